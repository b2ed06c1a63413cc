package simulator

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/strategy"
)

func demo() *Cluster {
	return NewCluster("demo").InNamespace("ns1").
		ControlPlane(3, "v1.30.4").
		MachineDeployment("md-0", 2, "v1.30.4", WithImage("ami-old"), WithNotReady(1)).
		MachineDeployment("md-1", 1, "v1.29.9").
		Pod("web-0", "demo-md-0-0", map[string]string{"app": "web"}).
		Pod("web-1", "demo-md-0-1", map[string]string{"app": "web"}).
		PodDisruptionBudget("web", map[string]string{"app": "web"}, intstr.FromInt32(1))
}

func names(objs []client.Object) []string {
	var out []string
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		if kind == "" {
			kind = typeName(o)
		}
		out = append(out, kind+"/"+o.GetName())
	}
	return out
}

func typeName(o client.Object) string {
	switch o.(type) {
	case *corev1.Namespace:
		return "Namespace"
	case *clusterv1.Cluster:
		return "Cluster"
	case *controlplanev1.KubeadmControlPlane:
		return "KubeadmControlPlane"
	case *bootstrapv1.KubeadmConfig:
		return "KubeadmConfig"
	case *clusterv1.Machine:
		return "Machine"
	case *clusterv1.MachineDeployment:
		return "MachineDeployment"
	case *clusterv1.MachineSet:
		return "MachineSet"
	case *corev1.Node:
		return "Node"
	case *corev1.Pod:
		return "Pod"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	}
	return "?"
}

func TestObjectsDeterministicNames(t *testing.T) {
	objs, err := NewCluster("demo").ControlPlane(1, "v1.31.0").MachineDeployment("md-0", 1, "v1.31.0").
		Pod("p", "demo-md-0-0", nil).PodDisruptionBudget("pdb", map[string]string{"a": "b"}, intstr.FromInt32(1)).Objects()
	require.NoError(t, err)
	want := []string{
		"Cluster/demo", "KubeadmControlPlane/demo-control-plane",
		"KubeadmConfig/demo-control-plane-0", "DockerMachine/demo-control-plane-0", "Machine/demo-control-plane-0",
		"MachineDeployment/demo-md-0", "MachineSet/demo-md-0-0",
		"KubeadmConfig/demo-md-0-0", "DockerMachine/demo-md-0-0", "Machine/demo-md-0-0",
		"Node/demo-control-plane-0", "Node/demo-md-0-0", "Pod/p", "PodDisruptionBudget/pdb",
	}
	require.Empty(t, cmp.Diff(want, names(objs)))

	again, err := NewCluster("demo").ControlPlane(1, "v1.31.0").MachineDeployment("md-0", 1, "v1.31.0").
		Pod("p", "demo-md-0-0", nil).PodDisruptionBudget("pdb", map[string]string{"a": "b"}, intstr.FromInt32(1)).Objects()
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(objs, again), "Objects must be a pure function of the builder")
}

func TestBuilderErrors(t *testing.T) {
	tests := map[string]*Cluster{
		"bad cluster name":   NewCluster("Demo_1"),
		"bad version":        NewCluster("demo").ControlPlane(1, "1.31"),
		"negative replicas":  NewCluster("demo").MachineDeployment("md", -1, "v1.31.0"),
		"duplicate md":       NewCluster("demo").MachineDeployment("md", 1, "v1.31.0").MachineDeployment("md", 1, "v1.31.0"),
		"two control planes": NewCluster("demo").ControlPlane(1, "v1.31.0").ControlPlane(1, "v1.31.0"),
		"pod on no node":     NewCluster("demo").ControlPlane(1, "v1.31.0").Pod("p", "nope", nil),
		"bad namespace":      NewCluster("demo").InNamespace("A B"),
		"bad infrastructure": NewCluster("demo").WithInfrastructure(Infrastructure{Kind: "X"}),
		"not-ready index":    NewCluster("demo").MachineDeployment("md", 2, "v1.31.0", WithNotReady(2)),
	}
	for name, cl := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := cl.Objects()
			require.ErrorIs(t, err, ErrInvalidCluster)
			_, err = cl.Client()
			require.ErrorIs(t, err, ErrInvalidCluster)
			_, err = NewFleet(cl)
			if name != "pod on no node" {
				require.ErrorIs(t, err, ErrInvalidCluster)
			}
		})
	}
}

// checkCluster asserts what both the fake client and the real API server
// must hold after the builder's objects were loaded.
func checkCluster(t *testing.T, ctx context.Context, c client.Client, ns string) {
	t.Helper()
	var machines clusterv1.MachineList
	require.NoError(t, c.List(ctx, &machines, client.InNamespace(ns)))
	require.Len(t, machines.Items, 6)
	var nodes corev1.NodeList
	require.NoError(t, c.List(ctx, &nodes))
	byProvider := map[string]corev1.Node{}
	for _, n := range nodes.Items {
		byProvider[n.Spec.ProviderID] = n
	}
	for _, m := range machines.Items {
		n, ok := byProvider[m.Spec.ProviderID]
		require.True(t, ok, "machine %s has no node with providerID %q", m.Name, m.Spec.ProviderID)
		require.Equal(t, m.Name, n.Name)
		require.Equal(t, m.Name, m.Status.NodeRef.Name)
		require.Equal(t, m.Spec.Version, n.Status.NodeInfo.KubeletVersion)
		require.Len(t, m.OwnerReferences, 1)
	}
	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "demo-md-0-1"}, &n))
	require.Equal(t, []corev1.NodeCondition{NodeReady(false)}, normalise(n.Status.Conditions))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "demo-md-1-0"}, &n))
	require.Equal(t, "v1.29.9", n.Status.NodeInfo.KubeletVersion)
	require.Equal(t, []corev1.NodeCondition{NodeReady(true)}, normalise(n.Status.Conditions))

	var ms clusterv1.MachineSet
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-0-0"}, &ms))
	require.Equal(t, int32(1), *ms.Status.ReadyReplicas)
	var m clusterv1.Machine
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-0-0"}, &m))
	require.Equal(t, ms.UID, m.OwnerReferences[0].UID, "owner references point at the real owner")
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-control-plane"}, &kcp))
	require.Equal(t, []clusterv1.StatusVersion{{Version: "v1.30.4", Replicas: 3}}, kcp.Status.Versions)

	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(DockerMachine.APIVersion)
	infra.SetKind(DockerMachine.Kind)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-md-0-1"}, infra))
	img, _, _ := unstructured.NestedString(infra.Object, "spec", "customImage")
	require.Equal(t, "ami-old", img)

	var pods corev1.PodList
	require.NoError(t, c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"}))
	require.Len(t, pods.Items, 2)
	require.Equal(t, corev1.PodRunning, pods.Items[0].Status.Phase)
	var pdb policyv1.PodDisruptionBudget
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &pdb))
	require.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	require.Equal(t, int32(1), pdb.Status.DisruptionsAllowed)
	require.Equal(t, int32(2), pdb.Status.ExpectedPods)
}

// normalise drops server-side time rounding differences.
func normalise(cs []corev1.NodeCondition) []corev1.NodeCondition {
	out := append([]corev1.NodeCondition(nil), cs...)
	for i := range out {
		out[i].LastHeartbeatTime = NodeReady(true).LastHeartbeatTime
		out[i].LastTransitionTime = NodeReady(true).LastTransitionTime
	}
	return out
}

func TestFakeClient(t *testing.T) {
	c, err := demo().Client()
	require.NoError(t, err)
	checkCluster(t, context.Background(), c, "ns1")
}

func TestApplyToRealAPIServer(t *testing.T) {
	cl := demo()
	env := apiserver.StartForTest(t, apiserver.WithCRDs(cl.InfrastructureCRD()))
	ctx := context.Background()
	require.NoError(t, cl.Apply(ctx, env.Client))
	checkCluster(t, ctx, env.Client, "ns1")

	// The real Eviction API enforces the PDB whose status the builder wrote:
	// one of the two web pods may go, not both.
	evict := func(name string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name}}
		return env.Client.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{})
	}
	require.NoError(t, evict("web-0"))
	var h *Host
	err := evict("web-1")
	require.True(t, apierrors.IsTooManyRequests(err), "%v", err)

	// A host writes its Node's status in the real API server too.
	h, err = NewHost("demo-md-0-1", strategy.RoleWorker, "v1.30.4", WithNodeClient(env.Client))
	require.NoError(t, err)
	h.WriteFile("/usr/bin/kubelet", binary(ComponentKubelet, "v1.31.2"))
	res, err := h.Run(ctx, nodeexec.Command{Argv: []string{"systemctl", "restart", "kubelet"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Output)
	var n corev1.Node
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "demo-md-0-1"}, &n))
	require.Equal(t, "v1.31.2", n.Status.NodeInfo.KubeletVersion)
	require.Equal(t, []corev1.NodeCondition{NodeReady(true)}, normalise(n.Status.Conditions))
}

func TestAWSInfrastructure(t *testing.T) {
	cl := NewCluster("prod").WithInfrastructure(AWSMachine).MachineDeployment("md", 1, "v1.31.0", WithImage("ami-123"))
	c, err := cl.Client()
	require.NoError(t, err)
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(AWSMachine.APIVersion)
	infra.SetKind(AWSMachine.Kind)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "prod-md-0"}, infra))
	img, _, _ := unstructured.NestedString(infra.Object, "spec", "ami", "id")
	require.Equal(t, "ami-123", img)
	pid, _, _ := unstructured.NestedString(infra.Object, "spec", "providerID")
	require.Equal(t, cl.Nodes()[0].ProviderID, pid)
	require.Regexp(t, `^aws:///us-east-1a/i-[0-9a-f]{17}$`, pid)
}
