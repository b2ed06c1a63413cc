package capi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// dockerMachineGVK is the infrastructure machine kind of liveMachine.
var dockerMachineGVK = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta2", Kind: "DockerMachine"}

// liveMachine is the management cluster as Cluster API v1.14 leaves it
// when it calls UpdateMachine for Machine cp-0 (node cp-0) to v1.36.1:
// the Machine marked and the hook pending, its KubeadmConfig and
// DockerMachine marked.
type liveMachine struct {
	machine *clusterv1.Machine
	kc      *bootstrapv1.KubeadmConfig
	infra   *unstructured.Unstructured
}

func newLiveMachine(controlPlane bool) *liveMachine {
	marked := func() map[string]string { return map[string]string{clusterv1.UpdateInProgressAnnotation: ""} }
	m := &clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cp-0", UID: "uid-cp-0",
			Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"},
			Annotations: map[string]string{clusterv1.UpdateInProgressAnnotation: "",
				runtimev1.PendingHooksAnnotation: "UpdateMachine"}},
		Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.1", ProviderID: "docker:////cp-0",
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: "cp-0"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: dockerMachineGVK.Group, Kind: dockerMachineGVK.Kind, Name: "cp-0"}},
	}
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	kc := &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cp-0", Annotations: marked()},
		Spec:       bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "cp-0"}}},
	}
	infra := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"providerID": "docker:////cp-0"}}}
	infra.SetGroupVersionKind(dockerMachineGVK)
	infra.SetNamespace("default")
	infra.SetName("cp-0")
	infra.SetAnnotations(marked())
	return &liveMachine{machine: m, kc: kc, infra: infra}
}

// client is a management cluster reader holding the live objects.
func (l *liveMachine) client(t *testing.T) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clusterv1.AddToScheme(s))
	require.NoError(t, bootstrapv1.AddToScheme(s))
	s.AddKnownTypeWithName(dockerMachineGVK, &unstructured.Unstructured{})
	b := crfake.NewClientBuilder().WithScheme(s).WithObjects(l.kc.DeepCopy(), l.infra.DeepCopy())
	if l.machine != nil { // nil: no Machine
		b = b.WithObjects(l.machine.DeepCopy())
	}
	return b.Build()
}

// request is the request Cluster API sends for the live objects: their
// names, labels, annotations and specs (its cleanupMachine and
// cleanupUnstructured).
func (l *liveMachine) request(t *testing.T) *runtimehooksv1.UpdateMachineRequest {
	t.Helper()
	m := clusterv1.Machine{TypeMeta: l.machine.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: l.machine.Namespace, Name: l.machine.Name,
		Labels: l.machine.Labels, Annotations: l.machine.Annotations}, Spec: *l.machine.Spec.DeepCopy()}
	raw := func(obj any) runtime.RawExtension {
		b, err := json.Marshal(obj)
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	kc := &bootstrapv1.KubeadmConfig{TypeMeta: l.kc.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: l.kc.Namespace, Name: l.kc.Name,
		Annotations: l.kc.Annotations}, Spec: l.kc.Spec}
	return &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
		Machine: *m.DeepCopy(), BootstrapConfig: raw(kc), InfrastructureMachine: raw(l.infra)}}
}

// countingRecorder counts the Events recorded.
type countingRecorder struct{ calls []string }

func (r *countingRecorder) Eventf(regarding runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	name := ""
	if o, ok := regarding.(metav1.Object); ok {
		name = o.GetNamespace() + "/" + o.GetName() + " " + string(o.GetUID())
	}
	r.calls = append(r.calls, reason+" on "+name)
}

// TestUpdateMachineActsOnTheLiveMachineOnly: UpdateMachine checks a request
// with Cluster API's own preconditions for calling the hook (the Machine
// marked with the hook pending, its KubeadmConfig sent, equal and marked,
// its infrastructure machine marked) and acts on the live objects: a
// request that drops the control-plane label, or the KubeadmConfig, or one
// for a Machine only partly marked, is a Failure with the mismatch reason,
// one message for all, and leaves the node as it was (no update record,
// no upgrader pod, no cordon), with no Event. A genuine request for the
// first control plane gets the first-control-plane role.
func TestUpdateMachineActsOnTheLiveMachineOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		live   func(*liveMachine)                         // changes the management cluster
		req    func(*runtimehooksv1.UpdateMachineRequest) // changes the request
		reason string                                     // what the log says (not the answer)
	}{
		{name: "a request without the control-plane label",
			req: func(r *runtimehooksv1.UpdateMachineRequest) {
				delete(r.Desired.Machine.Labels, clusterv1.MachineControlPlaneLabel)
			}},
		{name: "a request without the bootstrap config",
			req: func(r *runtimehooksv1.UpdateMachineRequest) { r.Desired.BootstrapConfig = runtime.RawExtension{} }},
		{name: "a request without the infrastructure machine",
			req: func(r *runtimehooksv1.UpdateMachineRequest) { r.Desired.InfrastructureMachine = runtime.RawExtension{} }},
		{name: "only the Machine marked",
			live: func(l *liveMachine) {
				delete(l.machine.Annotations, runtimev1.PendingHooksAnnotation)
				l.kc.Annotations, l.infra.Object["metadata"].(map[string]any)["annotations"] = nil, nil
			}},
		{name: "the hook not pending", live: func(l *liveMachine) {
			l.machine.Annotations[runtimev1.PendingHooksAnnotation] = "BeforeClusterUpgrade"
		}},
		{name: "the KubeadmConfig not marked", live: func(l *liveMachine) { l.kc.Annotations = nil }},
		{name: "the infrastructure machine not marked", live: func(l *liveMachine) { l.infra.SetAnnotations(nil) }},
		{name: "another KubeadmConfig", live: func(l *liveMachine) { l.machine.Spec.Bootstrap.ConfigRef.Name = "other" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			live := newLiveMachine(true)
			req := live.request(t) // as Cluster API would send it for the genuine objects
			if tc.live != nil {
				tc.live(live)
			}
			if tc.req != nil {
				tc.req(req)
			}
			var n corev1.Node
			require.NoError(t, pc.c.Get(t.Context(), types.NamespacedName{Name: "cp-0"}, &n))
			cs := k8sfake.NewClientset(n.DeepCopy())
			rec := &countingRecorder{}
			u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{Clientset: func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }, SkipPrePull: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: live.client(t), EventRecorder: rec})
			require.NoError(t, err)
			for range 2 {
				var resp runtimehooksv1.UpdateMachineResponse
				u.UpdateMachine(t.Context(), req, &resp)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Equal(t, "in-place update failed: "+observe.FailureRequestMismatch+": the request does not match a Machine that Cluster API is updating in place; the extension's log says why", resp.Message)
			}
			require.Nil(t, pc.record(), "no update record")
			require.Empty(t, pc.pods(), "no upgrader pod")
			require.False(t, pc.node().Spec.Unschedulable, "not cordoned")
			got, err := cs.CoreV1().Nodes().Get(t.Context(), "cp-0", metav1.GetOptions{})
			require.NoError(t, err)
			require.False(t, got.Spec.Unschedulable, "not cordoned")
			require.Empty(t, rec.calls, "no Event")
		})
	}

	t.Run("a genuine request for the first control plane", func(t *testing.T) {
		pc := newPodsCluster(t)
		live := newLiveMachine(true)
		rec := &countingRecorder{}
		u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: live.client(t), EventRecorder: rec})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), live.request(t), &resp)
		requireWaiting(t, resp, "started first-control-plane upgrade of node cp-0")
		require.Equal(t, "first-control-plane", pc.record().Role)
		require.Len(t, pc.pods(), 1)
		if diff := cmp.Diff([]string{observe.EventReasonUpdateStarted + " on default/cp-0 uid-cp-0"}, rec.calls); diff != "" {
			t.Fatalf("Events (-want +got):\n%s", diff)
		}
	})

	t.Run("a worker's request cannot make it a control plane", func(t *testing.T) {
		pc := newPodsCluster(t)
		live := newLiveMachine(false)
		req := live.request(t)
		req.Desired.Machine.Labels[clusterv1.MachineControlPlaneLabel] = ""
		u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: live.client(t)})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureRequestMismatch)
		require.Nil(t, pc.record())
		u.UpdateMachine(t.Context(), live.request(t), &resp)
		requireWaiting(t, resp, "started worker upgrade of node cp-0")
	})
}

// TestUpdateMachineMismatchesTellNothing: a request for a Machine that does
// not exist, is not marked for an update, or is marked but has another
// providerID or version records no Event (in any namespace), and all get
// the same answer, which names nothing of the live Machine: the answers do
// not tell a caller which Machines exist, nor a live providerID or version.
func TestUpdateMachineMismatchesTellNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		live func(*liveMachine) bool // false: no Machine at all
		req  func(*runtimehooksv1.UpdateMachineRequest)
	}{
		{name: "no such Machine", live: func(*liveMachine) bool { return false }},
		{name: "no such Machine in kube-system", live: func(*liveMachine) bool { return false },
			req: func(r *runtimehooksv1.UpdateMachineRequest) { r.Desired.Machine.Namespace = "kube-system" }},
		{name: "not marked", live: func(l *liveMachine) bool { l.machine.Annotations = nil; return true }},
		{name: "another providerID", live: func(l *liveMachine) bool { l.machine.Spec.ProviderID = "docker:////secret-host"; return true }},
		{name: "another version", live: func(l *liveMachine) bool { l.machine.Spec.Version = "v1.36.7"; return true }},
		{name: "another cluster", live: func(l *liveMachine) bool { l.machine.Spec.ClusterName = "hidden"; return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			live := newLiveMachine(true)
			req := live.request(t)
			if tc.req != nil {
				tc.req(req)
			}
			if !tc.live(live) {
				live.machine = nil
			}
			mgmt := live.client(t)
			rec := &countingRecorder{}
			u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: mgmt, EventRecorder: rec})
			require.NoError(t, err)
			var resp runtimehooksv1.UpdateMachineResponse
			u.UpdateMachine(t.Context(), req, &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
			require.Equal(t, "in-place update failed: "+observe.FailureRequestMismatch+": the request does not match a Machine that Cluster API is updating in place; the extension's log says why", resp.Message)
			require.Empty(t, rec.calls, "no Event")
			require.Nil(t, pc.record())
		})
	}
}
