package capi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestUpdateMachineRetry: a failed update is retried from the management
// cluster with an annotation on the Machine, never with a shell on the
// node. The retry runs a plan of its own name, so a journal the failed
// attempt left on the host (Failed, RolledBack, or written for another
// from-version) cannot stop it; one annotation value is one retry.
func TestUpdateMachineRetry(t *testing.T) {
	withRetry := func(req *runtimehooksv1.UpdateMachineRequest, token string) *runtimehooksv1.UpdateMachineRequest {
		out := req.DeepCopy()
		if out.Desired.Machine.Annotations == nil {
			out.Desired.Machine.Annotations = map[string]string{}
		}
		out.Desired.Machine.Annotations[capi.AnnotationRetry] = token
		return out
	}
	requireFailure := func(t *testing.T, resp runtimehooksv1.UpdateMachineResponse, reason string) {
		t.Helper()
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, reason)
	}

	t.Run("a failed step, retried, runs a new plan to done", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
		requireWaiting(t, pc.call(req), "started worker upgrade")
		first := pc.onlyPod()
		finishPod(t, t.Context(), pc.c, first, kubeadm.StepKubeadmUpgrade, 1)
		for range 2 {
			requireFailure(t, pc.call(req), observe.FailureStepFailed)
		}
		require.NotNil(t, pc.record(), "the failure keeps the record")

		retry := withRetry(req, "1")
		resp := pc.call(retry)
		requireWaiting(t, resp, "retrying the update of node cp-0 to v1.36.1 (attempt 2")
		require.Contains(t, resp.Message, observe.FailureStepFailed, "the answer says what is retried")
		require.Empty(t, pc.pods(), "the failed pod is deleted")
		rec := pc.record()
		require.Equal(t, 1, rec.Attempt)
		require.Equal(t, "1", rec.RetryToken)
		require.Empty(t, rec.Pod)

		requireWaiting(t, pc.call(retry), "started worker upgrade")
		second := pc.onlyPod()
		require.NotEqual(t, first.Name, second.Name, "a new attempt runs a plan of another name: a new journal on the host")
		require.NotEqual(t, first.Labels[nodepod.LabelPlan], second.Labels[nodepod.LabelPlan])

		finishPod(t, t.Context(), pc.c, second, "", 0)
		requireWaiting(t, pc.call(retry), "waiting for the kubelet")
		pc.kubelet("v1.36.1")
		requireDone(t, pc.call(retry))
		require.Nil(t, pc.record())
	})

	t.Run("one value is one retry", func(t *testing.T) {
		pc := newPodsCluster(t)
		req := withRetry(updateReq("w-0", "docker:////cp-0", "v1.36.1", false), "a")
		requireWaiting(t, pc.call(req), "started worker upgrade")
		require.Equal(t, "a", pc.record().RetryToken, "a value present when the update starts asks for nothing")
		finishPod(t, t.Context(), pc.c, pc.onlyPod(), kubeadm.StepKubelet, 3)
		requireFailure(t, pc.call(req), observe.FailureStepFailed)

		b := withRetry(req, "b")
		requireWaiting(t, pc.call(b), "attempt 2")
		requireWaiting(t, pc.call(b), "started worker upgrade")
		finishPod(t, t.Context(), pc.c, pc.onlyPod(), kubeadm.StepKubelet, 3)
		for range 2 {
			requireFailure(t, pc.call(b), observe.FailureStepFailed)
		}
		requireWaiting(t, pc.call(withRetry(req, "c")), "attempt 3")
		require.Equal(t, 2, pc.record().Attempt)
	})

	t.Run("a running pod is not replaced: the retry waits for it to end", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		pc := newPodsCluster(t, withUpdaterClock(clk), withUpdateTimeout(time.Hour))
		req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
		requireWaiting(t, pc.call(req), "started worker upgrade")
		pod := pc.onlyPod()
		pc.runTo(pod, kubeadm.StepKubeadmUpgrade)
		rec := pc.record()
		clk.Step(2 * time.Hour) // the step hangs past the update deadline
		resp := pc.call(withRetry(req, "x"))
		requireFailure(t, resp, observe.FailureUpdateTimeout)
		require.Contains(t, resp.Message, "a retry is asked for")
		require.Contains(t, resp.Message, "starts once upgrader pod "+rec.Pod+" ends")
		require.Len(t, pc.pods(), 1, "the running pod is left alone")
		require.Zero(t, pc.record().Attempt)

		finishPod(t, t.Context(), pc.c, pod, kubeadm.StepKubeadmUpgrade, 1)
		requireWaiting(t, pc.call(withRetry(req, "x")), "attempt 2")
	})
}
