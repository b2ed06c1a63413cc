package capi_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestUpdateMachineProperty drives MachineUpdater itself, the way Cluster
// API does (call until done, a new updater per call as after an extension
// restart), against a simulated cluster (one control plane machine, two
// workers, simulator.Fleet) whose kubelets (simulator.PodRunner) run the upgrader
// pods it creates, in either init-container layout, with faults between
// calls: the upgrader pod deleted, a worker's Node lost, the API server
// refusing the pod, a kubelet step failing once, with or without a change
// of the kubelet's extra arguments and, on the control plane, of its
// ClusterConfiguration (API server arguments, etcd image: rendered from
// kubeadm-config by kubeadm upgrade on the fake host and verified in the
// manifests and mirror pods); after a failed step, an
// operator may retry once (capi.AnnotationRetry). Every run must end, and:
//
//   - done only with a verified node: the kubelet runs the target version
//     with the desired extra arguments, the control plane's static pods
//     run the desired arguments and etcd image, and the kubelet and
//     containerd units are active;
//   - never a node left with its kubelet stopped;
//   - no endless waiting: every run ends done or in a Failure whose reason
//     is one of the stable Failure* constants, within the call budget.
//
// What it does not cover: the drain (the controller-runtime fake client
// and client-go's fake clientset do not share objects; the drain and
// cordon ownership are tested against a real API server in
// drainstep_test.go), several machines at once (they go one after the
// other, as Cluster API takes them), and more than one control plane
// machine.
// UPGRADEKIT_PROPERTY_RUNS sets the number of runs (default 100; 300 take
// about 4 minutes with the race detector on 2 cores), and
// UPGRADEKIT_PROPERTY_DEBUG=1 (or "all") logs the failures (or every answer).
func TestUpdateMachineProperty(t *testing.T) {
	runs := 100
	if s := os.Getenv("UPGRADEKIT_PROPERTY_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		runs = n
	}
	ends := map[string]int{}
	for seed := int64(1); seed <= int64(runs); seed++ {
		end := propertyRun(t, seed, nil)
		ends[end]++
	}
	t.Logf("%d runs: %v", runs, ends)
	require.Positive(t, ends["done"], "some runs must succeed, or the faults are too many to show anything")
	require.Positive(t, ends["done after a retry"], "a retried failure must be able to end done")
}

const (
	propFrom = "v1.35.4"
	propTo   = "v1.36.1"
)

// propertyRun plays one rollout of a cluster with one control plane
// machine and two workers, one machine after the other as Cluster API
// does (control plane first), and returns how it ended: "done" or the
// Failure reason of the first machine that failed (the rollout stops
// there).
//
// With a world (a real API server, see TestUpdateMachinePropertyWithDrain)
// the updater also drains, and an operator may cordon a node before its
// update (kubectl cordon) or take over the updater's cordon record during
// it; such a node must still be cordoned when its update ends.
func propertyRun(t *testing.T, seed int64, w *propertyWorld) string {
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	refuse := rng.Intn(10) == 0 // the API server refuses the upgrader pod (Pod Security, say)
	cl := simulator.NewCluster(fmt.Sprintf("p%d", seed)).ControlPlane(1, propFrom).MachineDeployment("md", 2, propFrom)
	funcs := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, pod := obj.(*corev1.Pod); pod && refuse {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, obj.GetName(), fmt.Errorf("violates PodSecurity \"baseline:latest\": hostPID"))
		}
		return c.Create(ctx, obj, opts...)
	}}
	var c client.WithWatch
	var err error
	if w == nil {
		c, err = cl.Client(simulator.WithInterceptor(funcs))
	} else {
		c, err = w.nodes(t, cl, funcs)
		defer w.clear(t) // each run is a cluster of its own
	}
	require.NoError(t, err)
	foreign := map[string]bool{} // nodes an operator cordoned
	faults := simulator.NewFaults(uint64(seed))
	for _, n := range cl.Nodes() {
		if rng.Intn(8) == 0 {
			faults.FailStep(n.Name, "kubelet", 1) // one failed attempt: the step's retry budget absorbs it
		}
	}
	fleet, err := simulator.NewFleet(cl, simulator.WithNodeClient(c), simulator.WithHostClock(clk), simulator.WithFaults(faults))
	require.NoError(t, err)
	journal := t.TempDir()
	layout := []nodepod.Option{nodepod.WithImage("r/u:1"), nodepod.WithStageFrom("/staging")}
	if rng.Intn(2) == 0 {
		layout = append(layout, nodepod.WithRunnerCommand("/upgrader", "run"))
	}
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	// The kubelet's pods, by namespace/name (the fake client sets no
	// UIDs); a deleted pod's runner goes with it.
	runners := map[string]*simulator.PodRunner{}
	retriedDone := 0

	for _, m := range cl.Nodes() {
		host := fleet.Host(m.Name)
		req := updateReq(m.Name, m.ProviderID, propTo, m.Role == strategy.RoleControlPlane)
		req.Desired.Machine.Spec.ClusterName = "p"
		// The desired KubeadmConfig changes the kubelet's extra arguments
		// along with the version, or not.
		var wantArgs []string
		if rng.Intn(2) == 0 {
			wantArgs = []string{fmt.Sprintf("max-pods=%d", 100+rng.Intn(100))}
		}
		req.Desired.BootstrapConfig = workerConfig(t, wantArgs...)
		// The control plane machine changes its ClusterConfiguration along
		// with the version, or not; KubeadmControlPlane writes it into
		// kubeadm-config first.
		var wantCP []string
		if m.Role == strategy.RoleControlPlane {
			var cc bootstrapv1.ClusterConfiguration
			if rng.Intn(2) == 0 {
				cc.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: ptrTo(strconv.Itoa(1 + rng.Intn(60)))}}
				cc.Etcd.Local.ImageTag = "3.5.16-0"
				wantCP = []string{"--audit-log-maxage=" + *cc.APIServer.ExtraArgs[0].Value}
			}
			cfg := &bootstrapv1.KubeadmConfig{
				TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
				Spec: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: cc, JoinConfiguration: bootstrapv1.JoinConfiguration{
					ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: m.Name}}},
			}
			for _, a := range wantArgs {
				n, v, _ := strings.Cut(a, "=")
				cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: n, Value: ptrTo(v)})
			}
			req.Desired.BootstrapConfig = raw(t, cfg)
			writeKubeadmConfig(t, c, kubeadmConfigFor(t, propTo, cc))
		}
		nodeLost, retried := false, false
		end := ""
		const budget = 60
		for call := 0; call < budget && end == ""; call++ {
			opts := []updOpt{withoutDrain(), withPodOptions(layout...),
				withUpdaterClock(clk), withNodeGoneGrace(10 * time.Minute)}
			if w != nil {
				opts = append(opts[1:], w.drain...)
			}
			u, err := capi.NewMachineUpdater(workload, updaterOpts(opts...))
			require.NoError(t, err)
			var resp runtimehooksv1.UpdateMachineResponse
			u.UpdateMachine(ctx, req, &resp)
			where := fmt.Sprintf("seed %d machine %s call %d: %s", seed, m.Name, call, resp.Message)
			if os.Getenv("UPGRADEKIT_PROPERTY_DEBUG") == "all" {
				t.Logf("%s", where)
			}

			if resp.Status == runtimehooksv1.ResponseStatusFailure {
				reason := failureReason(resp.Message)
				if os.Getenv("UPGRADEKIT_PROPERTY_DEBUG") != "" {
					t.Logf("%s", where)
				}
				require.NotEmpty(t, reason, "a Failure names a stable reason: %s", where)
				if !nodeLost {
					require.Equal(t, simulator.UnitActive, host.UnitState("kubelet"), "never a stopped kubelet: %s", where)
					w.requireForeignCordonKept(t, c, m.Name, foreign, where)
				}
				if refuse {
					require.Equal(t, observe.FailurePodRejected, reason, where)
					require.Equal(t, propFrom, host.RunningVersion(simulator.ComponentKubelet), "refused before anything ran: %s", where)
				}
				if reason == observe.FailureStepFailed && !retried && rng.Intn(2) == 0 {
					// An operator retries from the management cluster.
					retried = true
					if req.Desired.Machine.Annotations == nil {
						req.Desired.Machine.Annotations = map[string]string{}
					}
					req.Desired.Machine.Annotations[capi.AnnotationRetry] = fmt.Sprintf("%d", call)
					clk.Step(time.Minute)
					continue
				}
				return reason
			}
			if resp.RetryAfterSeconds == 0 {
				require.False(t, nodeLost, "done for a node that is gone: %s", where)
				require.Equal(t, propTo, host.RunningVersion(simulator.ComponentKubelet), "done only with a verified node: %s", where)
				require.Equal(t, simulator.UnitActive, host.UnitState("kubelet"), where)
				require.Equal(t, simulator.UnitActive, host.UnitState("containerd"), where)
				for _, a := range wantArgs {
					require.Contains(t, host.KubeletArgs(), "--"+a, "done only with the desired kubelet arguments running: %s", where)
				}
				for _, a := range wantCP {
					require.Contains(t, host.StaticPodCommand("kube-apiserver"), a, "done only with the desired API server arguments: %s", where)
					require.Equal(t, "registry.k8s.io/etcd:3.5.16-0", host.StaticPodImage("etcd"), "done only with the desired etcd image: %s", where)
				}
				w.requireForeignCordonKept(t, c, m.Name, foreign, where)
				end = "done"
				if retried {
					retriedDone++
				}
				break
			}

			// Between two calls: faults, then the kubelet runs what it can.
			switch f := rng.Intn(12); {
			case f == 0 && !nodeLost: // a cleanup job or an operator deletes the upgrader pod
				for _, p := range upgraderPods(t, c) {
					// The kubelet stops the containers and confirms the
					// deletion (grace 0 plays that on a real API server,
					// where no kubelet would).
					require.NoError(t, c.Delete(ctx, &p, client.GracePeriodSeconds(0)))
					delete(runners, p.Namespace+"/"+p.Name)
				}
			case f == 1 && !nodeLost && m.Role != strategy.RoleControlPlane:
				var n corev1.Node
				require.NoError(t, c.Get(ctx, client.ObjectKey{Name: m.Name}, &n))
				require.NoError(t, c.Delete(ctx, &n))
				nodeLost = true
			case f == 2 && !nodeLost && w != nil: // an operator cordons the node as their own
				operatorCordon(t, c, m.Name)
				foreign[m.Name] = true
			}
			clk.Step(time.Minute)
			if nodeLost {
				continue // its kubelet reports nothing any more
			}
			for _, p := range upgraderPods(t, c) {
				if p.Spec.NodeName != m.Name {
					continue
				}
				r, ok := runners[p.Namespace+"/"+p.Name]
				if !ok {
					r, err = simulator.NewPodRunner(host, &p, simulator.WithPodJournalDir(journal+"/"+m.Name),
						simulator.WithPodImageStaging(simulator.Staging{Kubernetes: propTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
					require.NoError(t, err)
					runners[p.Namespace+"/"+p.Name] = r
				}
				pr, err := r.Run(ctx)
				require.NoError(t, err)
				if os.Getenv("UPGRADEKIT_PROPERTY_DEBUG") == "all" {
					t.Logf("kubelet: pod %s: %s %s %s; host kubelet %s %s", p.Name, pr.Phase, pr.Container, pr.Reason, host.RunningVersion(simulator.ComponentKubelet), host.UnitState("kubelet"))
				}
				p.Status = r.Pod().Status
				require.NoError(t, c.Status().Update(ctx, &p))
			}
		}
		require.NotEmpty(t, end, "seed %d machine %s: no end after %d calls (endless waiting)", seed, m.Name, budget)
	}
	if retriedDone > 0 {
		return "done after a retry"
	}
	return "done"
}

// writeKubeadmConfig creates or replaces kube-system/kubeadm-config's
// ClusterConfiguration, as KubeadmControlPlane does.
func writeKubeadmConfig(t *testing.T, c client.Client, clusterConfiguration string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"}}
	_, err := controllerutil.CreateOrUpdate(context.Background(), c, cm, func() error {
		cm.Data = map[string]string{"ClusterConfiguration": clusterConfiguration}
		return nil
	})
	require.NoError(t, err)
}

func upgraderPods(t *testing.T, c client.Client) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	require.NoError(t, c.List(context.Background(), &l, client.MatchingLabelsSelector{Selector: nodepod.Selector()}))
	return l.Items
}

// failureReason returns the Failure* reason a Failure message starts with.
func failureReason(msg string) string {
	rest, ok := strings.CutPrefix(msg, capi.ErrUpdateFailed.Error()+": ")
	if !ok {
		return ""
	}
	reason, _, _ := strings.Cut(rest, ":")
	for _, r := range []string{observe.FailureInvalidMachine, observe.FailurePlanRejected, observe.FailurePodBuild, observe.FailurePodRejected,
		observe.FailureNodeGone, observe.FailureAmbiguousNode, observe.FailureNodeClaimed, observe.FailureUpdateTimeout, observe.FailureNodeNotReady,
		observe.FailureRequestMismatch, observe.FailureStepFailed, observe.FailureDrainTimeout} {
		if reason == r {
			return r
		}
	}
	return ""
}

// propertyWorld runs propertyRun against a real API server, with the
// drain on.
type propertyWorld struct {
	c     client.WithWatch
	drain []updOpt
	// kept counts the ends of updates of operator-cordoned nodes, checked
	// to be still cordoned.
	kept int
}

// nodes creates cl's Nodes (only those: the updater reads nothing else of
// the workload cluster) with their kubelet versions, and returns the
// world's client with funcs in front of it.
func (w *propertyWorld) nodes(t *testing.T, cl *simulator.Cluster, funcs interceptor.Funcs) (client.WithWatch, error) {
	objs, err := cl.Objects()
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		status := n.Status
		n.ResourceVersion = ""
		if err := w.c.Create(t.Context(), n); err != nil {
			return nil, err
		}
		n.Status = status
		if err := w.c.Status().Update(t.Context(), n); err != nil {
			return nil, err
		}
	}
	return interceptor.NewClient(w.c, funcs), nil
}

// clear deletes every Node and upgrader pod, so that the next run's
// control plane role is not chosen from this run's Nodes.
func (w *propertyWorld) clear(t *testing.T) {
	require.NoError(t, w.c.DeleteAllOf(t.Context(), &corev1.Pod{}, client.InNamespace(nodepod.DefaultNamespace), client.GracePeriodSeconds(0)))
	require.NoError(t, w.c.DeleteAllOf(t.Context(), &corev1.Node{}))
}

// operatorCordon is an operator cordoning node as their own: a kubectl
// cordon before the updater cordons it, or, once it has, taking the
// cordon record over (a plain kubectl cordon of a node the updater has
// already cordoned changes nothing anyone can see; see the drain docs).
func operatorCordon(t *testing.T, c client.Client, node string) {
	t.Helper()
	var n corev1.Node
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: node}, &n))
	if _, ours := n.Annotations[drain.AnnotationCordon]; ours {
		n.Annotations[drain.AnnotationCordon] = `{"owner":"oncall","priorUnschedulable":true}`
	}
	n.Spec.Unschedulable = true
	require.NoError(t, c.Update(t.Context(), &n))
}

// requireForeignCordonKept: a node an operator cordoned is still cordoned.
func (w *propertyWorld) requireForeignCordonKept(t *testing.T, c client.Client, node string, foreign map[string]bool, where string) {
	t.Helper()
	if w == nil || !foreign[node] {
		return
	}
	w.kept++
	var n corev1.Node
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: node}, &n))
	require.True(t, n.Spec.Unschedulable, "an operator's cordon was lifted: %s", where)
}

// TestUpdateMachinePropertyWithDrain is TestUpdateMachineProperty against
// a real API server with the drain on (cordon, evictions, uncordon), and
// an operator who may cordon a node as their own: 0 foreign cordons
// lifted. UPGRADEKIT_PROPERTY_DRAIN_RUNS sets the number of runs (default
// 20).
func TestUpdateMachinePropertyWithDrain(t *testing.T) {
	runs := 20
	if s := os.Getenv("UPGRADEKIT_PROPERTY_DRAIN_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		runs = n
	}
	env := apiserver.StartForTest(t)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	require.NoError(t, c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }
	w := &propertyWorld{c: c, drain: []updOpt{
		withWorkloadClientset(clientset),
		// Its kubelet plays upgrader pods only; the pre-pull has tests of
		// its own (prepull_test.go).
		withoutPrePull(),
		withDrainAttempt(time.Second),
		withDrainOptions(drain.WithGracePeriod(0)),
	}}
	ends := map[string]int{}
	for seed := int64(1); seed <= int64(runs); seed++ {
		ends[propertyRun(t, seed, w)]++
	}
	t.Logf("%d runs with the drain: %v; %d updates of operator-cordoned nodes ended with the cordon kept", runs, ends, w.kept)
	require.Positive(t, w.kept, "the operator's cordon must be exercised")
	require.Positive(t, ends["done"]+ends["done after a retry"], "some runs must succeed")
}
