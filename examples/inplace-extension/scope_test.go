package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestExtensionConfigScopeIsTheRoleBindings builds the kustomize base and
// evaluates its ExtensionConfig's namespaceSelector the way Cluster API's
// runtime client does (the selector against the labels of the Machine's
// or MachineSet's Namespace, read from the API server) over the
// namespaces of a real API server: it selects exactly the namespaces
// where the base grants the extension both of its roles.
func TestExtensionConfigScopeIsTheRoleBindings(t *testing.T) {
	fs := inMemory(t, "deploy", "/base", "kustomization.yaml", "extension.yaml")
	base, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/base")
	require.NoError(t, err)
	granted := map[string]map[string]bool{} // namespace -> ClusterRoles bound there
	var selector *metav1.LabelSelector
	for _, r := range base.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		switch r.GetKind() {
		case "RoleBinding":
			var rb rbacv1.RoleBinding
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &rb))
			if granted[rb.Namespace] == nil {
				granted[rb.Namespace] = map[string]bool{}
			}
			granted[rb.Namespace][rb.RoleRef.Name] = true
		case "ExtensionConfig":
			var ec runtimev1.ExtensionConfig
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ec))
			selector = ec.Spec.NamespaceSelector
		}
	}
	require.NotNil(t, selector, "the ExtensionConfig has a namespaceSelector")
	sel, err := metav1.LabelSelectorAsSelector(selector)
	require.NoError(t, err)
	require.False(t, sel.Empty(), "an empty selector selects every namespace")

	env := apiserver.StartForTest(t)
	for _, ns := range []string{"tenant", "default-clusters", "upgradekit-system"} {
		require.NoError(t, env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	var namespaces corev1.NamespaceList
	require.NoError(t, env.Client.List(t.Context(), &namespaces))
	require.Greater(t, len(namespaces.Items), 4)
	for _, ns := range namespaces.Items {
		both := granted[ns.Name]["upgradekit-extension"] && granted[ns.Name]["upgradekit-extension-kubeconfig"]
		require.Equal(t, both, sel.Matches(labels.Set(ns.Labels)), "namespace %s: selected if and only if both roles are bound there", ns.Name)
	}
	for ns := range granted {
		require.Len(t, granted[ns], 2, "namespace %s: both RoleBindings, or neither", ns)
	}
}

// TestUnreachableWorkloadClusterIsDeclinedAndBounded runs the extension as
// deploy/extension.yaml does (its service account, its RBAC) against a
// real API server. A cluster in a namespace without the RoleBindings is
// declined by CanUpdateMachine with the reason (its kubeconfig secret is
// Forbidden) instead of being accepted; a cluster that is served is
// accepted. When the extension then loses access to that cluster's
// kubeconfig secret mid-update, UpdateMachine answers in progress, and,
// once -workload-unreachable-timeout has passed, Failure naming the
// secret.
func TestUnreachableWorkloadClusterIsDeclinedAndBounded(t *testing.T) {
	ctx := t.Context()
	served := simulator.NewCluster("demo").ControlPlane(1, "v1.36.1").MachineDeployment("md", 1, "v1.35.4")
	elsewhere := simulator.NewCluster("far").InNamespace("tenant").ControlPlane(1, "v1.36.1").MachineDeployment("md", 1, "v1.35.4")
	env := apiserver.StartForTest(t, apiserver.WithCRDs(served.InfrastructureCRD()))
	admin := env.Client
	require.NoError(t, served.Apply(ctx, admin))
	require.NoError(t, elsewhere.Apply(ctx, admin))
	deployRBAC(t, admin)
	// Both clusters have their kubeconfig secret, as Cluster API makes it.
	for _, cl := range []*simulator.Cluster{served, elsewhere} {
		s, err := env.KubeconfigSecret(cl.Namespace(), cl.Name())
		require.NoError(t, err)
		require.NoError(t, admin.Create(ctx, s))
	}

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: extensionUser}
	mgmt, err := client.New(sa, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	// The deadline under test, -workload-unreachable-timeout, is 2 s
	// instead of the default 30 m, so that the test sees it pass. The
	// first UpdateMachine call starts it, so that call answers in progress
	// however loaded the machine is; the Failure is then awaited for up to
	// 60 s.
	// -retry-after 1 (default 15) only changes the answers' RetryAfter.
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir, "-metrics-bind-address", "0",
		"-upgrader-image", "registry.example/upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles", "-skip-steps", "containerd,cni-plugins",
		"-retry-after", "1", "-workload-unreachable-timeout", "2s"}, &bytes.Buffer{})
	require.NoError(t, err)
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(serveCtx, o, deps{mgmt: mgmt, scheme: env.Scheme, recorder: events.NewFakeRecorder(100)})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	hooks := newHookClient(t, port, pool)

	// The worker Machine of a cluster, its infrastructure machine as JSON,
	// and a CanUpdateMachine request for its version change.
	worker := func(cl *simulator.Cluster) (*clusterv1.Machine, *unstructured.Unstructured) {
		t.Helper()
		var live clusterv1.Machine
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: cl.Namespace(), Name: cl.Nodes()[1].Name}, &live))
		ref := live.Spec.InfrastructureRef
		mapping, err := admin.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
		require.NoError(t, err)
		infra := &unstructured.Unstructured{}
		infra.SetGroupVersionKind(mapping.GroupVersionKind)
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: live.Namespace, Name: ref.Name}, infra))
		return &live, infra
	}
	canUpdate := func(cl *simulator.Cluster) runtimehooksv1.CanUpdateMachineResponse {
		t.Helper()
		live, infra := worker(cl)
		infraRaw, err := json.Marshal(infra)
		require.NoError(t, err)
		current := live.DeepCopy()
		current.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"}
		desired := current.DeepCopy()
		desired.Spec.Version = "v1.36.1"
		var resp runtimehooksv1.CanUpdateMachineResponse
		hooks.post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
			TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
			Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *current, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
			Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *desired, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
		}, &resp)
		return resp
	}

	// Elsewhere: declined, with the reason, and no patch to apply.
	resp := canUpdate(elsewhere)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.False(t, resp.MachinePatch.IsDefined(), "declined: nothing to apply in place")
	require.Contains(t, resp.Message, "cannot update in place: infeasible in place: workload cluster unreachable: cluster tenant/far: "+
		"the extension cannot use the kubeconfig secret tenant/far-kubeconfig (Forbidden; permanent:")
	require.Contains(t, resp.Message, "in place needs the extension's two RoleBindings in namespace tenant and the namespace in the ExtensionConfig's namespaceSelector")

	// Served: accepted.
	resp = canUpdate(served)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.True(t, resp.MachinePatch.IsDefined(), "accepted: %s", resp.Message)

	// Cluster API marks the served Machine for the update and starts it.
	live, infra := worker(served)
	kc := &bootstrapv1.KubeadmConfig{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: live.Namespace, Name: live.Spec.Bootstrap.ConfigRef.Name}, kc))
	patch := client.MergeFrom(live.DeepCopy())
	live.Spec.Version = "v1.36.1"
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	live.Annotations[clusterv1.UpdateInProgressAnnotation] = ""
	live.Annotations[runtimev1.PendingHooksAnnotation] = "UpdateMachine"
	require.NoError(t, admin.Patch(ctx, live, patch))
	for _, obj := range []client.Object{infra, kc} {
		p := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[clusterv1.UpdateInProgressAnnotation] = ""
		obj.SetAnnotations(a)
		require.NoError(t, admin.Patch(ctx, obj, p))
	}
	infraRaw, err := json.Marshal(infra)
	require.NoError(t, err)
	kc.TypeMeta = metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"}
	kcRaw, err := json.Marshal(kc)
	require.NoError(t, err)
	desired := live.DeepCopy()
	desired.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"}
	desired.Status = clusterv1.MachineStatus{} // Cluster API strips it
	updateMachine := func() runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		var resp runtimehooksv1.UpdateMachineResponse
		hooks.post(runtimehooksv1.UpdateMachine, "upgradekit-update-machine", &runtimehooksv1.UpdateMachineRequest{
			TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "UpdateMachineRequest"},
			Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: *desired, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw},
				BootstrapConfig: runtime.RawExtension{Raw: kcRaw}},
		}, &resp)
		return resp
	}

	// The extension loses access to the kubeconfig secret (its RoleBinding
	// removed): no workload client any more.
	require.NoError(t, admin.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "upgradekit-extension-kubeconfig"}}))
	require.Eventually(t, func() bool {
		err := mgmt.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-kubeconfig"}, &corev1.Secret{})
		return err != nil
	}, 30*time.Second, 100*time.Millisecond, "the secret is no longer readable")

	// First: in progress (the deadline counts from this call), naming why.
	up := updateMachine()
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, up.Status, up.Message)
	require.Positive(t, up.RetryAfterSeconds, up.Message)
	require.Contains(t, up.Message, "waiting for the workload cluster: kubeconfig of cluster default/demo: secrets \"demo-kubeconfig\" is forbidden")

	// Then, once the deadline has passed: Failure, naming the secret.
	require.Eventually(t, func() bool {
		up = updateMachine()
		return up.Status == runtimehooksv1.ResponseStatusFailure
	}, 60*time.Second, 250*time.Millisecond, "Failure after the deadline: %s", up.Message)
	require.Contains(t, up.Message, "in-place update failed: "+observe.FailureWorkloadUnreachable+": waiting for the workload cluster for ")
	require.Contains(t, up.Message, "(deadline 2s, counted in the management cluster): kubeconfig of cluster default/demo: secrets \"demo-kubeconfig\" is forbidden")
}
