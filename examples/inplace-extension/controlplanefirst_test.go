package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// waitUntil polls cond every 250ms until it holds, failing t with cond's
// last explanation after timeout. cond returns errors instead of failing
// t itself.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why, err := cond()
		require.NoError(t, err, what)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			require.FailNow(t, what+": never happened", why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// machinesBy lists the Machines matching opts, by name.
func machinesBy(t *testing.T, c client.Client, opts ...client.ListOption) (map[string]clusterv1.Machine, error) {
	var ms clusterv1.MachineList
	if err := c.List(t.Context(), &ms, append([]client.ListOption{client.InNamespace("default")}, opts...)...); err != nil {
		return nil, err
	}
	out := map[string]clusterv1.Machine{}
	for _, m := range ms.Items {
		out[m.Name] = m
	}
	return out, nil
}

// bumpTogether sets version on the KubeadmControlPlane kcp and the
// MachineDeployment md in the default namespace, one right after the
// other, as one `kubectl apply` of both would.
func bumpTogether(t *testing.T, c client.Client, kcp, md, version string) {
	t.Helper()
	var cp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: kcp}, &cp))
	kpatch := client.MergeFrom(cp.DeepCopy())
	cp.Spec.Version = version
	var w clusterv1.MachineDeployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: md}, &w))
	mpatch := client.MergeFrom(w.DeepCopy())
	w.Spec.Template.Spec.Version = version
	require.NoError(t, c.Patch(t.Context(), &cp, kpatch))
	require.NoError(t, c.Patch(t.Context(), &w, mpatch))
}

// TestClusterAPIUpdatesControlPlaneAndWorkersTogether: a cluster whose
// KubeadmControlPlane (3) and MachineDeployment (2) run v1.35.4 gets both
// bumped to v1.36.3 at once, under Cluster API v1.14's own managers.
// KubeadmControlPlane writes a control plane Machine's new version only
// when it updates that machine, and the MachineDeployment asks
// CanUpdateMachineSet at once: the extension accepts (the control plane is
// going to reach v1.36.3) instead of declining a skew that passes by
// itself (a "no" Cluster API would remember for 24 hours, replacing the
// whole MachineDeployment), and its UpdateMachine holds each worker until
// the control plane runs v1.36.3 (the first worker Cluster API moves waits,
// and its Node's condition says so). Every Machine keeps its name; no
// worker's host ever runs a kubelet newer than any control plane host's
// kubelet and API server (sampled on the simulated hosts throughout).
func TestClusterAPIUpdatesControlPlaneAndWorkersTogether(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "demo", 3, e2eFrom)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 2, e2eFrom)...))
	cpLabel := client.HasLabels{clusterv1.MachineControlPlaneLabel}
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	cpBefore, wBefore := provisioned(t, h, 6*time.Minute, cpLabel, mdLabel, 3, 2, e2eFrom)
	cps, workers := slices.Sorted(maps.Keys(cpBefore)), slices.Sorted(maps.Keys(wBefore))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtension(t, h, dir, testcerts.FreePort(t), reg, true)

	// The skew policy on the hosts, sampled throughout: a worker's kubelet
	// is read first, then every control plane's kubelet and API server, so
	// a worker seen at v1.36.3 with a control plane seen below it was
	// ahead of that control plane.
	var mu sync.Mutex
	var ahead []string
	stop := every(20*time.Millisecond, func() {
		for _, w := range workers {
			// A host is gone once its machine is deleted (replaced).
			if host := h.Provider.Host(w); host == nil || host.RunningVersion(simulator.ComponentKubelet) != e2eTo {
				continue
			}
			for _, cp := range cps {
				host := h.Provider.Host(cp)
				if host == nil {
					continue
				}
				kubelet, api := host.RunningVersion(simulator.ComponentKubelet), host.StaticPodImage("kube-apiserver")
				if kubelet != e2eTo || api != "registry.k8s.io/kube-apiserver:"+e2eTo {
					mu.Lock()
					ahead = append(ahead, fmt.Sprintf("worker %s at %s while control plane %s runs kubelet %s, API server %s", w, e2eTo, cp, kubelet, api))
					mu.Unlock()
				}
			}
		}
	})
	defer stop()

	// Both bumped together, as one `kubectl apply` of both would.
	bumpTogether(t, c, "demo-cp", "md", e2eTo)
	start := time.Now()

	waitedForControlPlane := map[string]bool{}
	var cpAfter, wAfter map[string]clusterv1.Machine
	waitUntil(t, 10*time.Minute, "control plane and workers updated", func() (bool, string, error) {
		var err error
		if cpAfter, err = machinesBy(t, c, cpLabel); err != nil {
			return false, "", err
		}
		if wAfter, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		for _, w := range workers {
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: w}, &n); apierrors.IsNotFound(err) {
				return false, "", fmt.Errorf("worker %s's Node is gone: Cluster API replaced the machine", w)
			} else if err != nil {
				return false, "", err
			}
			if cond := observe.InPlaceUpdateCondition(&n); cond != nil && cond.Reason == observe.ReasonPending && strings.Contains(cond.Message, "waiting for the control plane") {
				waitedForControlPlane[w] = true
			}
		}
		var st clusterv1.MachineDeployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &st); err != nil {
			return false, "", err
		}
		mdDone := st.Status.ObservedGeneration == st.Generation && ptrIs(st.Status.UpToDateReplicas, 2) && ptrIs(st.Status.AvailableReplicas, 2)
		return settled(cpAfter, 3, e2eTo) && settled(wAfter, 2, e2eTo) && mdDone,
			fmt.Sprintf("control planes %v, workers %v; provider %v", slices.Sorted(maps.Keys(cpAfter)), slices.Sorted(maps.Keys(wAfter)), h.Provider.Errors()), nil
	})
	t.Logf("3 control planes, then 2 workers, updated in place in %s", time.Since(start).Round(time.Millisecond))

	require.Equal(t, cps, slices.Sorted(maps.Keys(cpAfter)), "no control plane replaced")
	require.Equal(t, workers, slices.Sorted(maps.Keys(wAfter)), "no worker replaced")
	for name, m := range wAfter {
		require.Equal(t, wBefore[name].Spec.ProviderID, m.Spec.ProviderID, name)
	}
	for _, name := range append(slices.Clone(cps), workers...) {
		require.Equal(t, e2eTo, h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet), "%s upgraded on its host", name)
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		require.Equal(t, e2eTo, n.Status.NodeInfo.KubeletVersion, name)
	}
	// Cluster API moves one worker at a time (maxUnavailable 1): the first
	// one it moved waited, and its Node said so.
	require.NotEmpty(t, waitedForControlPlane, "a worker's Node said it waited for the control plane")
	mu.Lock()
	require.Empty(t, ahead, "no worker kubelet ahead of the control plane")
	mu.Unlock()

	decisions := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	require.GreaterOrEqual(t, decisions["CanUpdateMachineSet/accept"], 1.0, "%v", decisions)
	require.Zero(t, decisions["CanUpdateMachineSet/decline"], "never declined for a skew that passes by itself: %v", decisions)
	require.GreaterOrEqual(t, decisions["CanUpdateMachine/accept"], 3.0, "%v", decisions)
	require.Zero(t, decisions["CanUpdateMachine/decline"], "%v", decisions)
	require.Equal(t, 5.0, metricSums(t, reg, observe.MetricUpdateDuration)[""], "five updates done")
	require.Empty(t, h.Provider.Errors())
}
