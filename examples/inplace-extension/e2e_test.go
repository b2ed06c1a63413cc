package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

const (
	// Cluster API v1.14 supports workload clusters v1.31 to v1.36; the
	// scenarios take the newest step it supports.
	e2eFrom, e2eTo = "v1.35.4", "v1.36.3"
	e2eImage       = "registry.example/upgrader:v1.36.3@" + testDigest
	// e2eSkip skips a minor (e2eFrom -> e2eSkip): infeasible, declined.
	// e2eSkipImage gives the extension an image for it, so the decline is
	// the skipped minor's and not a missing image's.
	e2eSkip, e2eSkipImage = "v1.37.2", "registry.example/upgrader:v1.37.2@" + testDigestB
)

// e2eExtension serves the extension, as its main does, on a free port
// with a throwaway certificate and registers it with Cluster API through
// an ExtensionConfig. It returns a stop function (also run in t.Cleanup).
func e2eExtension(t *testing.T, h *clusterapi.Harness, dir string, port int, reg *prometheus.Registry, register bool) (stop func()) {
	t.Helper()
	return e2eExtensionWith(t, h, dir, port, reg, events.NewFakeRecorder(1000), register)
}

// e2eExtensionWith is e2eExtension recording Events with rec, and
// registering it with regOpts.
func e2eExtensionWith(t *testing.T, h *clusterapi.Harness, dir string, port int, reg *prometheus.Registry, rec events.EventRecorder, register bool, regOpts ...clusterapi.RegisterOption) (stop func()) {
	t.Helper()
	return e2eExtensionImages(t, h, dir, port, reg, rec, e2eTo+"="+e2eImage+","+e2eSkip+"="+e2eSkipImage, register, regOpts...)
}

// e2eExtensionImages is e2eExtensionWith with images as its
// -upgrader-images.
func e2eExtensionImages(t *testing.T, h *clusterapi.Harness, dir string, port int, reg *prometheus.Registry, rec events.EventRecorder, images string, register bool, regOpts ...clusterapi.RegisterOption) (stop func()) {
	t.Helper()
	return e2eExtensionServe(t, h, dir, port, reg, rec, images, register, e2eExtras{regOpts: regOpts})
}

// e2eExtras are what some scenarios add to e2eExtensionImages: the
// extension's logger and the ExtensionConfig's registration options
// (settings).
type e2eExtras struct {
	log     logr.Logger
	regOpts []clusterapi.RegisterOption
}

// e2eExtensionServe is e2eExtensionImages with extras.
func e2eExtensionServe(t *testing.T, h *clusterapi.Harness, dir string, port int, reg *prometheus.Registry, rec events.EventRecorder, images string, register bool, x e2eExtras) (stop func()) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard()) // as main sets its own
	// -retry-after 1, not the default 15: Cluster API calls UpdateMachine
	// again after it and the harness's steps take no time, so the default
	// would only slow the scenarios down; none depends on its length.
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir, "-metrics-bind-address", "0", "-health-addr", "0",
		"-upgrader-images", images, "-allow-unverified-bundles", "-retry-after", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	metrics, err := capi.NewMetrics(reg, capi.MetricsOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, o, deps{mgmt: h.Env.Client, scheme: h.Env.Scheme, recorder: rec, metrics: metrics, log: x.log})
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	if register {
		ca, err := os.ReadFile(filepath.Join(dir, testcerts.CAFile))
		require.NoError(t, err)
		rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
		defer rcancel()
		names, err := clusterapi.RegisterExtension(rctx, h.Env.Client, "upgradekit", "https://127.0.0.1:"+strconv.Itoa(port), ca, x.regOpts...)
		require.NoError(t, err)
		require.Len(t, names, 3, "the three in-place handlers: %v", names)
	}
	return stop
}

// e2eMachines returns a MachineDeployment's Machines by name.
func e2eMachines(t *testing.T, c client.Client, md string) map[string]clusterv1.Machine {
	t.Helper()
	var ms clusterv1.MachineList
	require.NoError(t, c.List(t.Context(), &ms, client.InNamespace("default"), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}))
	out := map[string]clusterv1.Machine{}
	for _, m := range ms.Items {
		out[m.Name] = m
	}
	return out
}

// settled: n Machines, each with its Node, running at version, up to
// date by Cluster API's own condition and not updating.
func settled(ms map[string]clusterv1.Machine, n int, version string) bool {
	if len(ms) != n {
		return false
	}
	for _, m := range ms {
		if m.DeletionTimestamp != nil || !m.Status.NodeRef.IsDefined() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) || m.Spec.Version != version {
			return false
		}
		if !conditionIs(m.Status.Conditions, clusterv1.MachineUpToDateCondition, "True") || conditionIs(m.Status.Conditions, clusterv1.MachineUpdatingCondition, "True") {
			return false
		}
		if _, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]; updating {
			return false
		}
	}
	return true
}

func conditionIs(conds []metav1.Condition, t, status string) bool {
	for _, c := range conds {
		if c.Type == t {
			return string(c.Status) == status
		}
	}
	return false
}

// mdSettled: Cluster API's MachineDeployment status has caught up with
// the spec and counts n replicas, all up to date and available.
func mdSettled(t *testing.T, c client.Client, name string, n int32) bool {
	t.Helper()
	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &md))
	st := md.Status
	return st.ObservedGeneration == md.Generation && ptrIs(st.Replicas, n) && ptrIs(st.UpToDateReplicas, n) && ptrIs(st.AvailableReplicas, n)
}

func ptrIs(p *int32, n int32) bool { return p != nil && *p == n }

// upgraderPods returns the upgrader pods of the named nodes.
func upgraderPods(t *testing.T, c client.Client, nodes []string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	require.NoError(t, c.List(t.Context(), &pods, client.InNamespace(nodepod.DefaultNamespace)))
	var out []corev1.Pod
	for _, p := range pods.Items {
		if slices.Contains(nodes, p.Spec.NodeName) {
			out = append(out, p)
		}
	}
	return out
}

// TestClusterAPIDrivesTheExtension runs Cluster API v1.14's own managers
// (InPlaceUpdates on) against a real API server, with the harness's
// provider and a simulated kubelet per machine, and this extension
// registered through an ExtensionConfig, and changes three
// MachineDeployments at once:
//
//   - "inplace", 3 machines, v1.35.4 -> v1.36.3: Cluster API asks
//     CanUpdateMachineSet (its only question for a MachineDeployment:
//     CanUpdateMachine is KubeadmControlPlane's), moves the machines to the
//     new MachineSet and calls UpdateMachine; the upgrader pods run on the
//     simulated nodes; every Machine ends up to date with the same name
//     and providerID;
//   - "image", 2 machines, a new infrastructure template (an image no
//     updater covers): declined, Cluster API replaces the machines, the
//     extension never touches a node;
//   - "skip", 2 machines, v1.35.4 -> v1.37.2 (a skipped minor):
//     infeasible, declined, replaced, nothing drained.
func TestClusterAPIDrivesTheExtension(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	sizes := map[string]int{"inplace": 3, "image": 2, "skip": 2}
	for md, n := range sizes {
		require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", md, int32(n), e2eFrom)...))
	}
	start := time.Now()
	before := map[string]map[string]clusterv1.Machine{}
	require.Eventually(t, func() bool {
		for md, n := range sizes {
			if before[md] = e2eMachines(t, c, md); !settled(before[md], n, e2eFrom) {
				return false
			}
		}
		return true
	}, 2*time.Minute, 200*time.Millisecond, "machines provisioned; provider: %v", h.Provider.Errors())
	t.Logf("7 machines provisioned in %s", time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtension(t, h, dir, testcerts.FreePort(t), reg, true)

	// The three changes, at once.
	edit := func(name string, mutate func(*clusterv1.MachineDeployment)) {
		var md clusterv1.MachineDeployment
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &md))
		patch := client.MergeFrom(md.DeepCopy())
		mutate(&md)
		require.NoError(t, c.Patch(ctx, &md, patch))
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(clusterapi.InfraTemplateGVK)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "image-0"}, tmpl))
	tmpl.SetResourceVersion("")
	tmpl.SetUID("")
	tmpl.SetName("image-1")
	require.NoError(t, unstructured.SetNestedField(tmpl.Object, "test-image-2", "spec", "template", "spec", "image"))
	require.NoError(t, c.Create(ctx, tmpl))
	start = time.Now()
	edit("inplace", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = e2eTo })
	edit("image", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.InfrastructureRef.Name = "image-1" })
	edit("skip", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = e2eSkip })

	after := map[string]map[string]clusterv1.Machine{}
	replaced := func(md string) bool {
		for name := range after[md] {
			if _, old := before[md][name]; old {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool {
		after["inplace"] = e2eMachines(t, c, "inplace")
		after["image"] = e2eMachines(t, c, "image")
		after["skip"] = e2eMachines(t, c, "skip")
		return settled(after["inplace"], 3, e2eTo) && settled(after["image"], 2, e2eFrom) && replaced("image") &&
			settled(after["skip"], 2, e2eSkip) && replaced("skip") &&
			mdSettled(t, c, "inplace", 3) && mdSettled(t, c, "image", 2) && mdSettled(t, c, "skip", 2)
	}, 5*time.Minute, 500*time.Millisecond, "rollouts end; machines %v; provider: %v", machineNames(after), h.Provider.Errors())
	t.Logf("in place (3) and replaced (2+2) in %s", time.Since(start).Round(time.Millisecond))

	// In place: the same machines, nodes and providerIDs, upgraded on the
	// host by a succeeded upgrader pod each, and Cluster API's own
	// bookkeeping says so.
	inplace := slices.Sorted(maps.Keys(before["inplace"]))
	require.Equal(t, inplace, slices.Sorted(maps.Keys(after["inplace"])), "no machine replaced")
	for _, name := range inplace {
		require.Equal(t, before["inplace"][name].Spec.ProviderID, after["inplace"][name].Spec.ProviderID)
		require.Equal(t, e2eTo, h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet), "%s upgraded on the host", name)
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		require.Equal(t, e2eTo, n.Status.NodeInfo.KubeletVersion)
		require.False(t, n.Spec.Unschedulable, "%s uncordoned", name)
		require.NotContains(t, n.Annotations, observe.AnnotationInPlaceUpdate, "%s: the update's record is removed once done", name)
		require.Contains(t, n.Annotations, capi.AnnotationKubeletArgs, "%s: the applied kubelet arguments' digest", name)
	}
	pods := upgraderPods(t, c, inplace)
	require.NotEmpty(t, pods)
	for _, name := range inplace {
		require.True(t, slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName == name && p.Status.Phase == corev1.PodSucceeded }),
			"%s: a succeeded upgrader pod", name)
	}
	var sets clusterv1.MachineSetList
	require.NoError(t, c.List(ctx, &sets, client.InNamespace("default"), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "inplace"}))
	for _, ms := range sets.Items {
		if ms.Spec.Template.Spec.Version == e2eTo {
			require.Equal(t, int32(3), *ms.Spec.Replicas, "the new MachineSet holds the moved machines")
		} else {
			require.Zero(t, *ms.Spec.Replicas, "the old MachineSet %s is empty", ms.Name)
		}
	}

	// Declined: Cluster API replaced the machines; the extension created
	// no upgrader pod and recorded no update on any of their nodes.
	for _, d := range []string{"image", "skip"} {
		var nodes []string
		for name := range before[d] {
			nodes = append(nodes, name)
		}
		for name := range after[d] {
			nodes = append(nodes, name)
			var n corev1.Node
			require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
			require.NotContains(t, n.Annotations, observe.AnnotationInPlaceUpdate, "%s: %s untouched", d, name)
			require.NotContains(t, n.Annotations, capi.AnnotationKubeletArgs, "%s: %s untouched", d, name)
		}
		require.Empty(t, upgraderPods(t, c, nodes), "%s: no upgrader pod", d)
	}
	require.Empty(t, h.Provider.Errors())

	// What Cluster API asked, as the extension's metrics counted it.
	decisions := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	require.GreaterOrEqual(t, decisions["CanUpdateMachineSet/accept"], 1.0, "the version change: %v", decisions)
	require.GreaterOrEqual(t, decisions["CanUpdateMachineSet/decline"], 2.0, "the image and the skipped minor: %v", decisions)
	// A MachineDeployment's rollout asks per MachineSet only: in Cluster
	// API v1.14.2 CanUpdateMachine is KubeadmControlPlane's hook
	// (controlplane/kubeadm/reconcilers/kubeadmcontrolplane/inplace_canupdatemachine.go
	// is its only caller).
	require.Zero(t, decisions["CanUpdateMachine/accept"]+decisions["CanUpdateMachine/decline"], "%v", decisions)
	require.Zero(t, decisions["CanUpdateMachineSet/error"]+decisions["CanUpdateMachine/error"], "%v", decisions)
	require.Equal(t, 3.0, metricSums(t, reg, observe.MetricUpdateDuration)[""], "three updates done")
	for reason, n := range metricSums(t, reg, observe.MetricFailures, "reason") {
		require.Zero(t, n, "no update failed: %s", reason)
	}
}

// metricSums sums a metric family's samples (counters, or histogram
// sample counts) by the values of labels, joined with "/".
func metricSums(t *testing.T, reg *prometheus.Registry, name string, labels ...string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var key []string
			for _, l := range labels {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == l {
						key = append(key, lp.GetValue())
					}
				}
			}
			v := m.GetCounter().GetValue()
			if m.GetHistogram() != nil {
				v = float64(m.GetHistogram().GetSampleCount())
			}
			out[strings.Join(key, "/")] += v
		}
	}
	return out
}

func machineNames(ms map[string]map[string]clusterv1.Machine) map[string][]string {
	out := map[string][]string{}
	for md, m := range ms {
		out[md] = slices.Sorted(maps.Keys(m))
	}
	return out
}

// TestClusterAPISurfacesFailuresAndSurvivesRestarts: a 2-machine
// MachineDeployment goes v1.35.4 -> v1.36.3 in place under Cluster API's
// own controllers, with three things going wrong:
//
//   - the ExtensionConfig's settings have a typo (upgradekit.io/ignroe):
//     CanUpdateMachineSet answers Failure, which Cluster API only logs,
//     retrying the MachineDeployment's reconcile and changing nothing (no
//     new MachineSet); the extension records it as a Warning Event on the
//     MachineDeployment naming the setting, for `kubectl describe`. Once
//     the setting is fixed, Cluster API's next try goes on in place;
//   - on one node (A) the kubeadm upgrade step fails for good: the update
//     ends in a Failure that Cluster API surfaces on the Machine (its
//     Updating condition, reason InPlaceUpdateFailed, and its controller
//     log carrying the extension's message, which names the step) and
//     that the extension records as an Event on the Machine; once the
//     cause is fixed, the documented retry (AnnotationRetry on the
//     Machine) completes the update;
//   - while the other node's (B) upgrader pod is in flight (its kubelet
//     holds it Pending, as a slow image pull would), the extension is
//     stopped and started again, as a rollout or a crash would: the update
//     completes with that one pod and no step runs twice on B.
func TestClusterAPISurfacesFailuresAndSurvivesRestarts(t *testing.T) {
	faults := simulator.NewFaults(1)
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}),
		clusterapi.WithHostOptions(simulator.WithFaults(faults)))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 2, e2eFrom)...))
	var before map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		before = e2eMachines(t, c, "md")
		return settled(before, 2, e2eFrom)
	}, 2*time.Minute, 200*time.Millisecond, "machines provisioned; provider: %v", h.Provider.Errors())
	names := slices.Sorted(maps.Keys(before))
	a, b := names[0], names[1]
	faults.FailStep(a, kubeadm.StepKubeadmUpgrade, 1000)
	require.True(t, h.Provider.HoldPods(b))

	// Events go to the API server, as the extension's main sends them.
	cs, err := kubernetes.NewForConfig(h.Env.Config)
	require.NoError(t, err)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	require.NoError(t, broadcaster.StartRecordingToSinkWithContext(ctx))
	t.Cleanup(broadcaster.Shutdown)
	dir := t.TempDir()
	testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	reg := prometheus.NewRegistry()
	typo := "upgradekit.io/ignroe"
	stop := e2eExtensionWith(t, h, dir, port, reg, broadcaster.NewRecorder(h.Env.Scheme, "upgradekit-inplace-extension"), true,
		clusterapi.WithExtensionSettings(map[string]string{typo: "infrastructure.spec.additionalTags"}))

	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &md, patch))

	// The typo: where `kubectl describe machinedeployment md` shows it.
	var typoEvent eventsv1.Event
	require.Eventually(t, func() bool {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "MachineDeployment" && e.Regarding.UID == md.UID && e.Type == corev1.EventTypeWarning &&
				e.Reason == observe.EventReasonCanUpdateFailed && strings.Contains(e.Note, `unknown setting "`+typo+`"`) {
				typoEvent = e
				return true
			}
		}
		return false
	}, time.Minute, 200*time.Millisecond, "a Warning Event on MachineDeployment md names the misspelt setting")
	require.Contains(t, typoEvent.Note, "CanUpdateMachineSet for MachineSet md-")
	var sets clusterv1.MachineSetList
	require.NoError(t, c.List(ctx, &sets, client.InNamespace("default"), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}))
	require.Len(t, sets.Items, 1, "Cluster API changed nothing: no new MachineSet")
	require.Equal(t, slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(e2eMachines(t, c, "md"))), "nor any Machine")
	// The operator fixes the ExtensionConfig.
	ec := &unstructured.Unstructured{}
	ec.SetGroupVersionKind(runtimev1.GroupVersion.WithKind("ExtensionConfig"))
	ec.SetName("upgradekit")
	require.NoError(t, c.Patch(ctx, ec, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"settings":null}}`))))
	t.Logf("misspelt setting surfaced on the MachineDeployment; fixed")

	retried, restarted := false, false
	deadline := time.Now().Add(5 * time.Minute)
	for {
		require.True(t, time.Now().Before(deadline), "no end: retried %v, restarted %v; machines %v; provider: %v",
			retried, restarted, machineNames(map[string]map[string]clusterv1.Machine{"md": e2eMachines(t, c, "md")}), h.Provider.Errors())
		ms := e2eMachines(t, c, "md")
		if retried && restarted && settled(ms, 2, e2eTo) && mdSettled(t, c, "md", 2) {
			break
		}
		if m, ok := ms[a]; ok && !retried && conditionReason(m.Status.Conditions, clusterv1.MachineUpdatingCondition) == clusterv1.MachineInPlaceUpdateFailedReason {
			// Cluster API's own surfaces of the Failure. Its condition
			// does not carry the extension's message (v1.14.2 writes a
			// fixed text and the error goes to its log), which is why the
			// extension records the reason as an Event on the Machine.
			require.Contains(t, conditionMessage(m.Status.Conditions, clusterv1.MachineUpdatingCondition), "UpdateMachine hook failed")
			log, err := os.ReadFile(h.Managers.LogPath(clusterapi.ManagerCore))
			require.NoError(t, err)
			require.Contains(t, string(log), kubeadm.StepKubeadmUpgrade, "Cluster API's Machine controller logs the extension's message")
			var evs eventsv1.EventList
			require.Eventually(t, func() bool {
				require.NoError(t, c.List(ctx, &evs, client.InNamespace("default")))
				return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
					return e.Regarding.Name == a && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, kubeadm.StepKubeadmUpgrade)
				})
			}, 30*time.Second, 200*time.Millisecond, "a Warning Event on Machine %s names the step", a)
			require.Eventually(t, func() bool {
				if err := c.List(ctx, &evs, client.InNamespace("default")); err != nil {
					return false
				}
				return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
					return e.Regarding.Kind == "MachineDeployment" && e.Regarding.UID == md.UID && e.Related != nil && e.Related.Name == a &&
						e.Type == corev1.EventTypeWarning && e.Reason == observe.EventReasonUpdateFailed && strings.Contains(e.Note, kubeadm.StepKubeadmUpgrade)
				})
			}, 2*time.Minute, 200*time.Millisecond, "and one on MachineDeployment md, about Machine %s", a)
			// The operator fixes the cause and asks for a retry.
			faults.Heal(a, kubeadm.StepKubeadmUpgrade)
			patch := client.MergeFrom(m.DeepCopy())
			m.Annotations[capi.AnnotationRetry] = "1"
			require.NoError(t, c.Patch(ctx, &m, patch))
			retried = true
			t.Logf("%s: Failure surfaced by Cluster API; retry asked", a)
		}
		if !restarted && len(upgraderPods(t, c, []string{b})) > 0 {
			stop()
			time.Sleep(2 * time.Second) // Cluster API's calls fail meanwhile
			stop = e2eExtensionWith(t, h, dir, port, prometheus.NewRegistry(), broadcaster.NewRecorder(h.Env.Scheme, "upgradekit-inplace-extension"), false)
			require.True(t, h.Provider.ReleasePods(b))
			restarted = true
			t.Logf("%s: extension restarted while its upgrader pod was in flight", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	after := e2eMachines(t, c, "md")
	require.Equal(t, names, slices.Sorted(maps.Keys(after)), "no machine replaced")
	for _, n := range names {
		require.Equal(t, e2eTo, h.Provider.Host(n).RunningVersion(simulator.ComponentKubelet), n)
	}
	runs := map[string]int{}
	for _, cmd := range h.Provider.Host(b).Commands() {
		if cmd.Phase == nodeexec.PhaseRun {
			runs[cmd.Step]++
		}
	}
	require.NotEmpty(t, runs)
	require.Len(t, upgraderPods(t, c, []string{b}), 1, "the restarted extension took over the pod in flight")
	for step, n := range runs {
		require.Equal(t, 1, n, "step %s ran once on %s across the restart", step, b)
	}
	require.Empty(t, h.Provider.Errors())
}

// logLines counts the lines of one of Cluster API's managers' log that
// contain every one of parts (-1 when the log cannot be read).
func logLines(h *clusterapi.Harness, m clusterapi.Manager, parts ...string) int {
	b, err := os.ReadFile(h.Managers.LogPath(m))
	if err != nil {
		return -1
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

func conditionMessage(conds []metav1.Condition, t string) string {
	for _, c := range conds {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

func conditionReason(conds []metav1.Condition, t string) string {
	for _, c := range conds {
		if c.Type == t {
			return c.Reason
		}
	}
	return ""
}

// kcpSettled: Cluster API's KubeadmControlPlane reports n replicas at
// version, all up to date and available, and each control plane Machine
// runs at version, up to date and not being updated.
func kcpSettled(t *testing.T, c client.Client, name string, n int32, version string) (map[string]clusterv1.Machine, bool) {
	t.Helper()
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &kcp))
	st := kcp.Status
	if st.ObservedGeneration != kcp.Generation || !ptrIs(st.Replicas, n) || !ptrIs(st.UpToDateReplicas, n) || !ptrIs(st.AvailableReplicas, n) {
		return nil, false
	}
	var list clusterv1.MachineList
	require.NoError(t, c.List(t.Context(), &list, client.InNamespace("default"), client.HasLabels{clusterv1.MachineControlPlaneLabel}))
	ms := map[string]clusterv1.Machine{}
	for _, m := range list.Items {
		ms[m.Name] = m
	}
	return ms, settled(ms, int(n), version)
}

// TestClusterAPIDrivesKubeadmControlPlaneInPlace: KubeadmControlPlane's
// own controller takes three control planes from v1.35.4 to v1.36.3 in
// place through the extension, one at a time: for each, its preflight
// checks (the control plane Pods the kubelets report), CanUpdateMachine,
// the Machine marked for update, UpdateMachine until done. Every machine
// keeps its name; each host runs kubelet and API server v1.36.3; the
// first control plane ran `kubeadm upgrade apply` and, etcd being
// external, no etcd snapshot.
//
// On the way, the second control plane KubeadmControlPlane updates (its
// Machines in KubeadmControlPlane's own order: oldest first) fails its
// kubeadm upgrade step. Cluster API writes a fixed text on the Machine
// and KubeadmControlPlane waits for that machine and does nothing else:
// the extension's reason is in an Event on the Machine, one on the
// KubeadmControlPlane (recorded once, however often Cluster API asks
// again) and the Node's condition, and the third control plane is left
// alone. The documented way out, the retry annotation once the cause is
// fixed, then takes the rollout to its end.
//
// v1.36 is where kubeadm dropped the ControlPlaneKubeletLocalMode gate
// (GA and locked on in v1.35): KubeadmControlPlane's v1.35 KubeadmConfigs
// carry featureGates.ControlPlaneKubeletLocalMode: true, its v1.36 ones
// do not, so CanUpdateMachine sees the gate removed with the version. The
// extension accepts that in place (kubeadm upgrade already points the
// kubelet at the local API server); afterwards every KubeadmConfig is
// without the gate, as Cluster API writes it.
func TestClusterAPIDrivesKubeadmControlPlaneInPlace(t *testing.T) {
	faults := simulator.NewFaults(1)
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}),
		clusterapi.WithHostOptions(simulator.WithFaults(faults)))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "demo", 3, e2eFrom)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	start := time.Now()
	var before map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		var ok bool
		before, ok = kcpSettled(t, c, "demo-cp", 3, e2eFrom)
		return ok
	}, 4*time.Minute, 500*time.Millisecond, "KubeadmControlPlane provisioned")
	t.Logf("3 control planes provisioned in %s", time.Since(start).Round(time.Millisecond))
	for name, m := range before {
		require.Equal(t, map[string]bool{"ControlPlaneKubeletLocalMode": true}, kubeadmConfigGates(t, c, m), "%s: Cluster API's v1.35 default", name)
	}
	// Certificates that expire in 40 days, as KubeadmControlPlane recorded
	// them (the annotation, copied to each Machine's status).
	stale := time.Now().Add(40 * 24 * time.Hour).UTC().Truncate(time.Second)
	for _, m := range before {
		setCertificatesExpiry(t, c, m, stale)
	}

	// KubeadmControlPlane updates its oldest outdated Machine first
	// (creation time, then name: selectMachineForInPlaceUpdateOrScaleDown).
	order := slices.SortedFunc(maps.Values(before), func(x, y clusterv1.Machine) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	first, second, third := order[0].Name, order[1].Name, order[2].Name
	faults.FailStep(second, kubeadm.StepKubeadmUpgrade, 1000)

	// Events go to the API server, as the extension's main sends them.
	cs, err := kubernetes.NewForConfig(h.Env.Config)
	require.NoError(t, err)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	require.NoError(t, broadcaster.StartRecordingToSinkWithContext(ctx))
	t.Cleanup(broadcaster.Shutdown)
	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtensionWith(t, h, dir, testcerts.FreePort(t), reg, broadcaster.NewRecorder(h.Env.Scheme, "upgradekit-inplace-extension"), true)
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-cp"}, &kcp))
	patch := client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &kcp, patch))

	start = time.Now()
	var failed clusterv1.Machine
	require.Eventually(t, func() bool {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: second}, &failed); err != nil {
			return false
		}
		return conditionReason(failed.Status.Conditions, clusterv1.MachineUpdatingCondition) == clusterv1.MachineInPlaceUpdateFailedReason
	}, 5*time.Minute, 200*time.Millisecond, "the second control plane's update (%s) fails", second)
	t.Logf("%s updated, %s failed, in %s", first, second, time.Since(start).Round(time.Millisecond))
	require.Contains(t, conditionMessage(failed.Status.Conditions, clusterv1.MachineUpdatingCondition), "please check controller logs",
		"Cluster API's own text: no reason")
	require.Equal(t, e2eTo, h.Provider.Host(first).RunningVersion(simulator.ComponentKubelet), "the first control plane was updated")
	// The reason, where `kubectl describe` shows it: the Machine, the
	// KubeadmControlPlane, the Node.
	var onKCP eventsv1.Event
	require.Eventually(t, func() bool {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return false
		}
		onMachine := slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "Machine" && e.Regarding.UID == failed.UID && e.Type == corev1.EventTypeWarning &&
				e.Reason == observe.EventReasonUpdateFailed && strings.Contains(e.Note, kubeadm.StepKubeadmUpgrade)
		})
		i := slices.IndexFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "KubeadmControlPlane" && e.Regarding.UID == kcp.UID && e.Related != nil && e.Related.Name == second &&
				e.Type == corev1.EventTypeWarning && e.Reason == observe.EventReasonUpdateFailed && strings.Contains(e.Note, kubeadm.StepKubeadmUpgrade)
		})
		if i >= 0 {
			onKCP = evs.Items[i]
		}
		return onMachine && i >= 0
	}, 2*time.Minute, 200*time.Millisecond, "Warning Events on Machine %s and on KubeadmControlPlane demo-cp name the step", second)
	var node corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: second}, &node))
	cond := observe.InPlaceUpdateCondition(&node)
	require.NotNil(t, cond, "the Node condition")
	require.Equal(t, corev1.ConditionFalse, cond.Status)
	require.Equal(t, observe.ReasonFailed, cond.Reason)
	require.Contains(t, cond.Message, kubeadm.StepKubeadmUpgrade)
	// KubeadmControlPlane holds: it reconciles after the Failure (the
	// Machine's condition changed) and waits for that machine, leaving the
	// third alone, while Cluster API asks the extension again.
	waitingFor := "Waiting for in-place update of Machine default/" + second + " to complete"
	seen := logLines(h, clusterapi.ManagerKubeadmControlPlane, waitingFor)
	require.GreaterOrEqual(t, seen, 0, "KubeadmControlPlane's log")
	require.Eventually(t, func() bool {
		return logLines(h, clusterapi.ManagerKubeadmControlPlane, waitingFor) > seen &&
			logLines(h, clusterapi.ManagerCore, `"Reconciler error" err="in-place update failed`, `Machine="default/`+second+`"`) >= 2
	}, time.Minute, 200*time.Millisecond, "KubeadmControlPlane waits for %s, and Cluster API asked again", second)
	var untouched clusterv1.Machine
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: third}, &untouched))
	require.Equal(t, e2eFrom, untouched.Spec.Version, "%s not triggered", third)
	require.NotContains(t, untouched.Annotations, clusterv1.UpdateInProgressAnnotation, third)
	require.Equal(t, e2eFrom, h.Provider.Host(third).RunningVersion(simulator.ComponentKubelet), third)
	require.False(t, slices.ContainsFunc(h.Provider.Host(third).Commands(), func(cmd nodeexec.Command) bool { return cmd.Phase == nodeexec.PhaseRun }),
		"no step ran on %s", third)
	require.Empty(t, upgraderPods(t, c, []string{third}), third)

	// The way out: fix the cause, ask for a retry.
	faults.Heal(second, kubeadm.StepKubeadmUpgrade)
	patch = client.MergeFrom(failed.DeepCopy())
	failed.Annotations[capi.AnnotationRetry] = "1"
	require.NoError(t, c.Patch(ctx, &failed, patch))

	var after map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		var ok bool
		after, ok = kcpSettled(t, c, "demo-cp", 3, e2eTo)
		return ok
	}, 5*time.Minute, 500*time.Millisecond, "KubeadmControlPlane updated")
	t.Logf("3 control planes updated in place in %s", time.Since(start).Round(time.Millisecond))
	// One Event on the KubeadmControlPlane for the failure, however often
	// Cluster API asked: a second one would have made client-go's
	// recorder write a series.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(&onKCP), &onKCP))
	require.Nil(t, onKCP.Series, "recorded once")

	names := slices.Sorted(maps.Keys(before))
	require.Equal(t, names, slices.Sorted(maps.Keys(after)), "no control plane replaced")
	applied := 0
	for _, name := range names {
		host := h.Provider.Host(name)
		require.Equal(t, e2eTo, host.RunningVersion(simulator.ComponentKubelet), name)
		require.Equal(t, "registry.k8s.io/kube-apiserver:"+e2eTo, host.StaticPodImage("kube-apiserver"), name)
		require.Empty(t, kubeadmConfigGates(t, c, after[name]), "%s: Cluster API's v1.36 KubeadmConfig has no gate", name)
		for _, cmd := range host.Commands() {
			require.NotEqual(t, kubeadm.StepEtcdSnapshot, cmd.Step, "%s: etcd is external: no snapshot", name)
		}
		if slices.ContainsFunc(host.Commands(), upgradeApply) {
			applied++
		}
	}
	require.Equal(t, 1, applied, "exactly one control plane ran `kubeadm upgrade apply`")
	decisions := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	require.GreaterOrEqual(t, decisions["CanUpdateMachine/accept"], 3.0, "KubeadmControlPlane asks per machine: %v", decisions)
	require.Zero(t, decisions["CanUpdateMachine/decline"]+decisions["CanUpdateMachine/error"], "%v", decisions)
	require.Equal(t, 3.0, metricSums(t, reg, observe.MetricUpdateDuration)[""], "three updates done")

	// kubeadm upgrade renewed every certificate: the extension removed the
	// 40-day date and KubeadmControlPlane's (here the harness's) reading of
	// the renewed ones replaced it, on each KubeadmConfig and Machine.
	renewed := time.Now().Add(300 * 24 * time.Hour)
	require.Eventually(t, func() bool {
		var list clusterv1.MachineList
		if err := c.List(ctx, &list, client.InNamespace("default"), client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil || len(list.Items) != 3 {
			return false
		}
		for _, m := range list.Items {
			at, err := certificatesExpiry(ctx, c, m)
			if err != nil || at.Before(renewed) || m.Status.CertificatesExpiryDate.Time.Before(renewed) {
				return false
			}
		}
		return true
	}, time.Minute, 500*time.Millisecond, "certificate expiry dates renewed")
	// Asked to replace control planes whose certificates expire within 60
	// days, KubeadmControlPlane finds none: the stale date would have had
	// all three replaced after their in-place update.
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-cp"}, &kcp))
	patch = client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Rollout.Before.CertificatesExpiryDays = 60
	require.NoError(t, c.Patch(ctx, &kcp, patch))
	require.Eventually(t, func() bool {
		var ok bool
		after, ok = kcpSettled(t, c, "demo-cp", 3, e2eTo)
		return ok
	}, time.Minute, 500*time.Millisecond, "KubeadmControlPlane up to date under rollout.before.certificatesExpiryDays")
	require.Equal(t, names, slices.Sorted(maps.Keys(after)), "no control plane replaced for renewed certificates")
	require.Empty(t, h.Provider.Errors())
}

// upgradeApply reports whether cmd is the first control plane's
// `kubeadm upgrade apply`.
func upgradeApply(cmd nodeexec.Command) bool {
	return cmd.Step == kubeadm.StepKubeadmUpgrade && slices.Contains(cmd.Argv, "apply")
}

// setCertificatesExpiry writes Cluster API's certificate expiry
// annotation on m's KubeadmConfig, as KubeadmControlPlane does, and waits
// for Cluster API to copy it to the Machine's status.
func setCertificatesExpiry(t *testing.T, c client.Client, m clusterv1.Machine, at time.Time) {
	t.Helper()
	var cfg bootstrapv1.KubeadmConfig
	key := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}
	require.NoError(t, c.Get(t.Context(), key, &cfg))
	patch := client.MergeFrom(cfg.DeepCopy())
	cfg.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation] = at.Format(time.RFC3339)
	require.NoError(t, c.Patch(t.Context(), &cfg, patch))
	require.Eventually(t, func() bool {
		var live clusterv1.Machine
		err := c.Get(t.Context(), client.ObjectKeyFromObject(&m), &live)
		return err == nil && live.Status.CertificatesExpiryDate.Time.Equal(at)
	}, time.Minute, 200*time.Millisecond, "%s: Cluster API copies the expiry date to the Machine", m.Name)
}

// certificatesExpiry reads the certificate expiry annotation of m's
// KubeadmConfig (the zero time without one).
func certificatesExpiry(ctx context.Context, c client.Client, m clusterv1.Machine) (time.Time, error) {
	var cfg bootstrapv1.KubeadmConfig
	if err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, &cfg); err != nil {
		return time.Time{}, err
	}
	v, ok := cfg.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation]
	if !ok {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339, v)
}

// kubeadmConfigGates returns the feature gates of m's KubeadmConfig's
// ClusterConfiguration.
func kubeadmConfigGates(t *testing.T, c client.Client, m clusterv1.Machine) map[string]bool {
	t.Helper()
	var cfg bootstrapv1.KubeadmConfig
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, &cfg))
	return cfg.Spec.ClusterConfiguration.FeatureGates
}
