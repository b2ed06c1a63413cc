package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// extensionUser is the identity deploy/extension.yaml runs the extension as.
const extensionUser = "system:serviceaccount:upgradekit-system:upgradekit-extension"

// apiRequest is one request the extension made to the management cluster,
// as RBAC sees it.
type apiRequest struct {
	verb, group, resource, namespace, name string
	status                                 int
}

func (r apiRequest) String() string {
	return fmt.Sprintf("%s %s/%s %s/%s -> %d", r.verb, r.group, r.resource, r.namespace, r.name, r.status)
}

// requestLog records every request made through a rest.Config.
type requestLog struct {
	mu   sync.Mutex
	reqs []apiRequest
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		r := parseAPIRequest(req)
		if resp != nil {
			r.status = resp.StatusCode
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
		return resp, err
	})
}

func (l *requestLog) all() []apiRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parseAPIRequest reads an API path (/api/v1/namespaces/ns/secrets/name,
// /apis/group/version/machines) and method into RBAC's terms.
func parseAPIRequest(req *http.Request) apiRequest {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var r apiRequest
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		r.group, parts = parts[1], parts[3:]
	default:
		r.verb, r.resource = strings.ToLower(req.Method), req.URL.Path
		return r
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		r.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) > 0 {
		r.resource = parts[0]
	}
	if len(parts) > 1 {
		r.name = parts[1]
	}
	if len(parts) > 2 {
		r.resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			r.verb = "watch"
		case r.name == "":
			r.verb = "list"
		default:
			r.verb = "get"
		}
	case http.MethodPost:
		r.verb = "create"
	case http.MethodPut:
		r.verb = "update"
	case http.MethodPatch:
		r.verb = "patch"
	case http.MethodDelete:
		r.verb = "delete"
	}
	return r
}

// deployRBAC applies the Namespace, ServiceAccount and RBAC objects of
// deploy/extension.yaml and returns the rules each binding grants: "" for
// cluster-wide, else the RoleBinding's namespace.
func deployRBAC(t *testing.T, c client.Client) map[string][]rbacv1.PolicyRule {
	t.Helper()
	return applyRBAC(t, c, deployManifests(t))
}

// applyRBAC applies the Namespace, ServiceAccount and RBAC objects of objs
// and returns the rules their bindings grant, as deployRBAC.
func applyRBAC(t *testing.T, c client.Client, objs []unstructured.Unstructured) map[string][]rbacv1.PolicyRule {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{} // ClusterRole/name, Role/namespace/name
	grants := map[string][]rbacv1.PolicyRule{}
	var bindings []struct{ namespace, role string }
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Namespace", "ServiceAccount":
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
			key := "ClusterRole/" + role.Name
			if obj.GetKind() == "Role" {
				key = "Role/" + obj.GetNamespace() + "/" + role.Name
			}
			roles[key] = role.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var ref struct {
				RoleRef rbacv1.RoleRef `json:"roleRef"`
			}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &ref))
			key := "ClusterRole/" + ref.RoleRef.Name
			if ref.RoleRef.Kind == "Role" {
				key = "Role/" + obj.GetNamespace() + "/" + ref.RoleRef.Name
			}
			bindings = append(bindings, struct{ namespace, role string }{obj.GetNamespace(), key})
		default:
			continue
		}
		require.NoError(t, c.Create(t.Context(), &obj), "%s %s", obj.GetKind(), obj.GetName())
	}
	for _, b := range bindings {
		require.Contains(t, roles, b.role, "bound but not defined")
		grants[b.namespace] = append(grants[b.namespace], roles[b.role]...)
	}
	return grants
}

// manifests reads the objects of a YAML file of deploy/.
func manifests(t *testing.T, path string) []unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []unstructured.Unstructured
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		require.NoError(t, err)
		if obj.Object != nil {
			objs = append(objs, obj)
		}
	}
}

// granted reports whether rules allow r.
func granted(rules []rbacv1.PolicyRule, r apiRequest) bool {
	for _, rule := range rules {
		if slices.Contains(rule.APIGroups, r.group) && slices.Contains(rule.Resources, r.resource) && slices.Contains(rule.Verbs, r.verb) &&
			(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, r.name)) {
			return true
		}
	}
	return false
}

// TestLeastPrivilegeOverHTTPS runs the extension as deploy/extension.yaml
// deploys it: served over HTTPS, its management-cluster client
// impersonating the manifest's ServiceAccount with exactly the manifest's
// RBAC on a real API server (which, as envtest, also plays the workload
// cluster, reached through the <cluster>-kubeconfig secret). A worker
// Machine goes through a whole in-place update (CanUpdateMachine, then
// UpdateMachine until done while a simulated kubelet runs the upgrader
// pod), spoofed UpdateMachine requests change nothing, and every request
// the extension made to the management cluster is compared with the
// rules: none refused (nothing missing) and every rule used (nothing in
// excess) but the one the test cannot provoke, which says why it is there.
// The metrics endpoint is scraped over HTTPS meanwhile, as the Deployment
// serves it: with the token of a service account bound to the manifest's
// metrics-reader role (200, the metrics), of one that is not (403), and
// without a token (401); the token and access reviews it takes are the
// manifest's one cluster-wide grant, and they are all that grant allows.
func TestLeastPrivilegeOverHTTPS(t *testing.T) {
	ctx := t.Context()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.36.1").MachineDeployment("md", 1, "v1.35.4")
	env := apiserver.StartForTest(t, apiserver.WithCRDs(cl.InfrastructureCRD()))
	admin := env.Client
	require.NoError(t, cl.Apply(ctx, admin))
	worker := cl.Nodes()[1]
	require.Equal(t, strategy.RoleWorker, worker.Role)
	grants := deployRBAC(t, admin)
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}, grants[""], "nothing is granted cluster-wide but the metrics scrapers' reviews")
	require.Contains(t, grants, "default", "the clusters' namespace")

	// CAPI's kubeconfig secret for the cluster, and secrets the extension
	// has no business reading.
	secret, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	require.NoError(t, admin.Create(ctx, secret))
	require.NoError(t, admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-keys"},
		Data: map[string][]byte{"key": []byte("not for the extension")}}))
	require.NoError(t, admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cloud-credentials"},
		Data: map[string][]byte{"key": []byte("not for the extension")}}))
	// A namespace with no RoleBinding: clusters the extension does not serve.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}))
	// A MachineDrainRule for Machines of clusters labelled env=prod: the
	// drain lists the namespace's rules and reads the Cluster's labels.
	require.NoError(t, admin.Create(ctx, &clusterv1.MachineDrainRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keep-monitoring"},
		Spec: clusterv1.MachineDrainRuleSpec{
			Drain:    clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
			Pods:     []clusterv1.MachineDrainRulePodSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "monitoring"}}}},
		},
	}))

	// The extension's management-cluster identity: the ServiceAccount,
	// every request recorded.
	log := &requestLog{}
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: extensionUser}
	sa.Wrap(log.wrap)
	mgmt, err := client.New(sa, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(sa)
	require.NoError(t, err)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	require.NoError(t, broadcaster.StartRecordingToSinkWithContext(ctx))
	t.Cleanup(broadcaster.Shutdown)

	// Not granted: another namespace's secret, listing secrets.
	err = mgmt.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "etcd-keys"}, &corev1.Secret{})
	require.True(t, apierrors.IsForbidden(err), "kube-system secrets: %v", err)
	err = mgmt.List(ctx, &corev1.SecretList{}, client.InNamespace("default"))
	require.True(t, apierrors.IsForbidden(err), "listing secrets: %v", err)
	// Not granted: anything outside the bound namespaces, or across all of
	// them.
	for what, err := range map[string]error{
		"get a Machine":          mgmt.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "m"}, &clusterv1.Machine{}),
		"list Machines":          mgmt.List(ctx, &clusterv1.MachineList{}, client.InNamespace("tenant")),
		"list all Machines":      mgmt.List(ctx, &clusterv1.MachineList{}),
		"get a KubeadmConfig":    mgmt.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "kc"}, &bootstrapv1.KubeadmConfig{}),
		"get all KubeadmConfigs": mgmt.List(ctx, &bootstrapv1.KubeadmConfigList{}),
		"list MachineDrainRules": mgmt.List(ctx, &clusterv1.MachineDrainRuleList{}, client.InNamespace("tenant")),
		"get a Cluster":          mgmt.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "demo"}, &clusterv1.Cluster{}),
		"read a kubeconfig":      mgmt.Get(ctx, client.ObjectKey{Namespace: "tenant", Name: "demo-kubeconfig"}, &corev1.Secret{}),
		"record an Event": func() error {
			_, err := cs.EventsV1().Events("tenant").Create(ctx, probeEvent("tenant"), metav1.CreateOptions{})
			return err
		}(),
		"patch an Event": func() error {
			_, err := cs.EventsV1().Events("tenant").Patch(ctx, "e", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
			return err
		}(),
		"record a kube-system Event": func() error {
			_, err := cs.EventsV1().Events("kube-system").Create(ctx, probeEvent("kube-system"), metav1.CreateOptions{})
			return err
		}(),
	} {
		require.True(t, apierrors.IsForbidden(err), "%s in another namespace: %v", what, err)
	}
	probes := len(log.all())

	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(testcerts.FreePort(t))
	// -retry-after 1, not the default 15: the test calls UpdateMachine
	// until done, and only the number of calls depends on it.
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir, "-metrics-bind-address", metricsAddr, "-health-addr", "0",
		"-upgrader-image", "registry.example/upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles", "-skip-steps", "containerd,cni-plugins", "-retry-after", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.True(t, o.metricsSecure, "as the Deployment serves them")
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(serveCtx, o, deps{mgmt: mgmt, cfg: sa, scheme: env.Scheme, recorder: broadcaster.NewRecorder(env.Scheme, "upgradekit-inplace-extension")})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	hooks := newHookClient(t, port, pool)
	post := hooks.post

	var live clusterv1.Machine
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: cl.Namespace(), Name: worker.Name}, &live))
	desired := live.DeepCopy()
	desired.Spec.Version = "v1.36.1"
	desired.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"}
	current := live.DeepCopy()
	current.TypeMeta = desired.TypeMeta
	ref := live.Spec.InfrastructureRef
	mapping, err := admin.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	require.NoError(t, err)
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(mapping.GroupVersionKind)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: live.Namespace, Name: ref.Name}, infra))
	infraRaw, err := json.Marshal(infra)
	require.NoError(t, err)

	// CanUpdateMachine: accepted, after the skew check read the Cluster
	// and its KubeadmControlPlane's desired version.
	var can runtimehooksv1.CanUpdateMachineResponse
	post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *current, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
		Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *desired, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
	}, &can)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, can.Status, can.Message)
	require.True(t, can.MachinePatch.IsDefined(), can.Message)

	// CanUpdateMachineSet (a MachineDeployment's question): accepted,
	// after the skew check read the MachineSet, the Cluster and its
	// KubeadmControlPlane.
	var ms clusterv1.MachineSet
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: live.Namespace, Name: live.Labels[clusterv1.MachineSetNameLabel]}, &ms))
	// The MachineSet's infrastructure template, as Cluster API sends it
	// (the fake cluster has no template objects: the extension reads
	// none).
	msRef := ms.Spec.Template.Spec.InfrastructureRef
	imtRaw, err := json.Marshal(map[string]any{"apiVersion": msRef.APIGroup + "/v1beta2", "kind": msRef.Kind,
		"metadata": map[string]any{"name": msRef.Name, "namespace": ms.Namespace}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}})
	require.NoError(t, err)
	curMS, desMS := ms.DeepCopy(), ms.DeepCopy()
	curMS.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"}
	desMS.TypeMeta, desMS.Name, desMS.Spec.Template.Spec.Version = curMS.TypeMeta, ms.Name+"-new", "v1.36.1"
	var canMS runtimehooksv1.CanUpdateMachineSetResponse
	post(runtimehooksv1.CanUpdateMachineSet, "upgradekit-can-update-machineset", &runtimehooksv1.CanUpdateMachineSetRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineSetRequest"},
		Current:  runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *curMS, InfrastructureMachineTemplate: runtime.RawExtension{Raw: imtRaw}},
		Desired:  runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *desMS, InfrastructureMachineTemplate: runtime.RawExtension{Raw: imtRaw}},
	}, &canMS)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, canMS.Status, canMS.Message)
	require.True(t, canMS.MachineSetPatch.IsDefined(), canMS.Message)

	// A misspelt ExtensionConfig setting: both hooks answer Failure, and
	// each is recorded on the MachineDeployment, found through the live
	// Machine and MachineSet (get, already granted: no new permission).
	typo := map[string]string{"upgradekit.io/ignroe": "x"}
	var failedMS runtimehooksv1.CanUpdateMachineSetResponse
	post(runtimehooksv1.CanUpdateMachineSet, "upgradekit-can-update-machineset", &runtimehooksv1.CanUpdateMachineSetRequest{
		TypeMeta:      metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineSetRequest"},
		CommonRequest: runtimehooksv1.CommonRequest{Settings: typo},
		Current:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *curMS, InfrastructureMachineTemplate: runtime.RawExtension{Raw: imtRaw}},
		Desired:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *desMS, InfrastructureMachineTemplate: runtime.RawExtension{Raw: imtRaw}},
	}, &failedMS)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, failedMS.Status, failedMS.Message)
	var failedM runtimehooksv1.CanUpdateMachineResponse
	post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta:      metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		CommonRequest: runtimehooksv1.CommonRequest{Settings: typo},
		Current:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *current, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
		Desired:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *desired, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw}},
	}, &failedM)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, failedM.Status, failedM.Message)
	mdUID := ms.OwnerReferences[0].UID
	require.Eventually(t, func() bool { // sent asynchronously
		var evs eventsv1.EventList
		if err := admin.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return false
		}
		related := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "MachineDeployment" && e.Regarding.UID == mdUID && e.Reason == observe.EventReasonCanUpdateFailed && e.Related != nil {
				related[e.Related.Kind] = true
			}
		}
		return related["MachineSet"] && related["Machine"]
	}, 2*time.Minute, 100*time.Millisecond, "the Failures recorded on the MachineDeployment")

	// The Machine's KubeadmConfig, which Cluster API sends along.
	kc := &bootstrapv1.KubeadmConfig{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: live.Namespace, Name: live.Spec.Bootstrap.ConfigRef.Name}, kc))
	kcRaw := func(mutate func(*bootstrapv1.KubeadmConfig)) runtime.RawExtension {
		c := kc.DeepCopy()
		c.TypeMeta = metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"}
		if mutate != nil {
			mutate(c)
		}
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	bootstrap := kcRaw(nil)
	updateMachine := func(m *clusterv1.Machine) runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		var resp runtimehooksv1.UpdateMachineResponse
		post(runtimehooksv1.UpdateMachine, "upgradekit-update-machine", &runtimehooksv1.UpdateMachineRequest{
			TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "UpdateMachineRequest"},
			Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: *m, InfrastructureMachine: runtime.RawExtension{Raw: infraRaw},
				BootstrapConfig: bootstrap},
		}, &resp)
		return resp
	}
	untouched := func(where string) {
		t.Helper()
		var n corev1.Node
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: worker.Name}, &n))
		require.False(t, n.Spec.Unschedulable, "%s: not cordoned", where)
		require.Empty(t, n.Annotations[observe.AnnotationInPlaceUpdate], "%s: no update recorded", where)
		var pods corev1.PodList
		require.NoError(t, admin.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace)))
		require.Empty(t, pods.Items, "%s: no upgrader pod", where)
	}

	// Every request that does not match gets the same answer, which tells
	// nothing of the management cluster.
	mismatch := "in-place update failed: " + observe.FailureRequestMismatch +
		": the request does not match a Machine that Cluster API is updating in place; the extension's log says why"

	// Spoofed requests, valid JSON over the same HTTPS endpoint.
	resp := updateMachine(desired)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	require.Equal(t, mismatch, resp.Message)
	untouched("a Machine Cluster API has not marked")

	// Cluster API marks the Machine for the update and sets its spec.
	patch := client.MergeFrom(live.DeepCopy())
	live.Spec.Version = "v1.36.1"
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	live.Annotations[clusterv1.UpdateInProgressAnnotation] = ""
	live.Annotations[runtimev1.PendingHooksAnnotation] = "UpdateMachine"
	require.NoError(t, admin.Patch(ctx, &live, patch))
	infraPatch := client.MergeFrom(infra.DeepCopy())
	infra.SetAnnotations(map[string]string{clusterv1.UpdateInProgressAnnotation: ""})
	require.NoError(t, admin.Patch(ctx, infra, infraPatch))
	kcPatch := client.MergeFrom(kc.DeepCopy())
	if kc.Annotations == nil {
		kc.Annotations = map[string]string{}
	}
	kc.Annotations[clusterv1.UpdateInProgressAnnotation] = ""
	require.NoError(t, admin.Patch(ctx, kc, kcPatch))

	// Kubelet arguments Cluster API never asked for.
	bootstrap = kcRaw(func(c *bootstrapv1.KubeadmConfig) {
		c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs,
			bootstrapv1.Arg{Name: "authorization-mode", Value: new("AlwaysAllow")})
	})
	resp = updateMachine(desired)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	require.Equal(t, mismatch, resp.Message)
	untouched("kubelet arguments Cluster API never asked for")
	bootstrap = kcRaw(nil)

	for _, spoof := range []struct {
		name string
		edit func(m *clusterv1.Machine)
	}{
		{"another version", func(m *clusterv1.Machine) { m.Spec.Version = "v1.37.0" }},
		{"another node", func(m *clusterv1.Machine) { m.Spec.ProviderID = cl.Nodes()[0].ProviderID }},
		{"another cluster", func(m *clusterv1.Machine) { m.Spec.ClusterName = "other" }},
		{"no such Machine", func(m *clusterv1.Machine) { m.Name = "nope" }},
		{"a control plane", func(m *clusterv1.Machine) { m.Labels[clusterv1.MachineControlPlaneLabel] = "" }},
	} {
		m := desired.DeepCopy()
		spoof.edit(m)
		resp := updateMachine(m)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, "%s: %s", spoof.name, resp.Message)
		require.Equal(t, mismatch, resp.Message, spoof.name)
		untouched(spoof.name)
	}

	// The real update, to done, the node's kubelet simulated.
	fleet, err := simulator.NewFleet(cl, simulator.WithNodeClient(admin))
	require.NoError(t, err)
	host := fleet.Host(worker.Name)
	runners := map[string]*simulator.PodRunner{}
	journal := t.TempDir()
	var answers []string
	for call := 0; ; call++ {
		require.Less(t, call, 30, "no end: %v", answers)
		resp := updateMachine(desired)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		answers = append(answers, resp.Message)
		if resp.RetryAfterSeconds == 0 {
			break
		}
		var pods corev1.PodList
		require.NoError(t, admin.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace)))
		for i := range pods.Items {
			p := &pods.Items[i]
			r, ok := runners[p.Name]
			if !ok {
				r, err = simulator.NewPodRunner(host, p, simulator.WithPodJournalDir(journal),
					simulator.WithPodImageStaging(simulator.Staging{Kubernetes: "v1.36.1", Containerd: "2.0.5", CNI: "v1.7.1"}))
				require.NoError(t, err)
				runners[p.Name] = r
			}
			_, err := r.Run(ctx)
			require.NoError(t, err)
			p.Status = r.Pod().Status
			require.NoError(t, admin.Status().Update(ctx, p))
		}
	}
	require.Equal(t, "v1.36.1", host.RunningVersion(simulator.ComponentKubelet))
	var n corev1.Node
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: worker.Name}, &n))
	require.False(t, n.Spec.Unschedulable, "uncordoned once done")
	require.Eventually(t, func() bool { // the Events, sent asynchronously
		return slices.ContainsFunc(log.all(), func(r apiRequest) bool { return r.resource == "events" && r.verb == "create" })
	}, 30*time.Second, 100*time.Millisecond)

	// Scrapes of the metrics: Prometheus's service account bound to the
	// manifest's metrics-reader role, another one not bound, no token.
	applyMetricsReader(t, admin)
	scrapeStatus := scrapeMetrics(t, env.Config, metricsAddr)
	require.Equal(t, map[string]int{"reader": http.StatusOK, "not a reader": http.StatusForbidden, "anonymous": http.StatusUnauthorized}, scrapeStatus)

	// Every request: allowed (nothing missing), and each rule was needed.
	used := map[string]bool{}
	for _, r := range log.all()[probes:] {
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, r.status, "refused: %s", r)
		allowed := granted(grants[""], r) || (r.namespace != "" && granted(grants[r.namespace], r))
		require.True(t, allowed, "made but not granted by the manifests (the server must have refused it): %s", r)
		if r.resource == "secrets" {
			require.Equal(t, "get default/demo-kubeconfig", r.verb+" "+r.namespace+"/"+r.name, "the only Secret read")
		}
		used[r.group+"/"+r.resource+"/"+r.verb] = true
	}
	// An Event that repeats is patched (its series count), which a single
	// update does not provoke.
	// Patching a KubeadmConfig removes KubeadmControlPlane's certificate
	// expiry date after a control plane's kubeadm upgrade; this update is
	// a worker's (TestClusterAPIDrivesKubeadmControlPlaneInPlace shows it).
	// Listing the control plane Machines is ControlPlaneSkewCheck's
	// fallback for a cluster without a control plane object it can read
	// (standalone control plane Machines, another provider's kind); this
	// cluster has a KubeadmControlPlane.
	unprovoked := map[string]string{
		"events.k8s.io/events/patch":                      "repeated Events are patched",
		"bootstrap.cluster.x-k8s.io/kubeadmconfigs/patch": "a control plane's certificates renewed",
		"cluster.x-k8s.io/machines/list":                  "the skew check's fallback",
		// Patching infrastructure machines, with dry run only, tries an
		// accepted MachineDeployment infrastructure template change
		// (TestClusterAPIReplacesWhenTheProviderRefusesAnIgnoredChange);
		// this update changes none.
		"infrastructure.cluster.x-k8s.io/dockermachines/patch": "an infrastructure template change dry-run",
	}
	var excess []string
	for _, rules := range grants {
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						if k := g + "/" + res + "/" + v; !used[k] && unprovoked[k] == "" {
							excess = append(excess, k)
						}
					}
				}
			}
		}
	}
	sort.Strings(excess)
	require.Empty(t, excess, "granted but never used: remove from deploy/extension.yaml")

	// deploy/kubeconfig-by-name.yaml instead of the namespace's Secrets:
	// the kubeconfig still reads (UpdateMachine answers done, reading it
	// again), the namespace's other Secrets no longer do.
	require.NoError(t, admin.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "upgradekit-extension-kubeconfig"}}))
	byName := applyRBAC(t, admin, manifests(t, "deploy/kubeconfig-by-name.yaml"))
	require.Eventually(t, func() bool {
		err := mgmt.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cloud-credentials"}, &corev1.Secret{})
		return apierrors.IsForbidden(err)
	}, 30*time.Second, 100*time.Millisecond, "another Secret of the namespace")
	// The API server's RBAC authorizer learns the new binding from its
	// informers, after the old one is gone: wait for it too (CI once read
	// the kubeconfig in between and was refused).
	require.Eventually(t, func() bool {
		return mgmt.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-kubeconfig"}, &corev1.Secret{}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the kubeconfig, through deploy/kubeconfig-by-name.yaml")
	before := len(log.all())
	resp = updateMachine(desired)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.Zero(t, resp.RetryAfterSeconds, resp.Message)
	read := false
	for _, r := range log.all()[before:] {
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, r.status, "refused: %s", r)
		if r.resource == "secrets" {
			require.True(t, granted(byName["default"], r), "read under kubeconfig-by-name.yaml: %s", r)
			read = true
		}
	}
	require.True(t, read, "the answer read the kubeconfig Secret")
}

// probeEvent is an Event on a Machine of namespace ns, as the extension
// records them.
func probeEvent(ns string) *eventsv1.Event {
	return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}, EventTime: metav1.NowMicro(),
		ReportingController: "upgradekit-inplace-extension", ReportingInstance: "probe", Action: "Probe", Reason: "Probe", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Namespace: ns, Name: "m"}}
}

// applyMetricsReader binds the manifest's metrics-reader ClusterRole to a
// "prometheus" service account of namespace monitoring, as the README
// tells a Prometheus operator to.
func applyMetricsReader(t *testing.T, admin client.Client) {
	t.Helper()
	ctx := t.Context()
	var reader *rbacv1.ClusterRole
	for _, obj := range deployManifests(t) {
		if obj.GetKind() == "ClusterRole" && obj.GetName() == "upgradekit-extension-metrics-reader" {
			reader = &rbacv1.ClusterRole{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, reader))
		}
	}
	require.NotNil(t, reader, "deploy/extension.yaml has the metrics-reader ClusterRole")
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}))
	for _, name := range []string{"prometheus", "nosy"} {
		require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: name}}))
	}
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-upgradekit-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}}}))
}

// scrapeMetrics gets https://addr/metrics (its self-signed certificate
// not verified, as a Prometheus scrape config with insecure_skip_verify
// does) with monitoring/prometheus's token, monitoring/nosy's and none,
// (tokens requested with the admin's config) and returns the answers'
// status codes. The reader's answer must be the extension's metrics.
func scrapeMetrics(t *testing.T, adminCfg *rest.Config, addr string) map[string]int {
	t.Helper()
	ctx := t.Context()
	adminCS, err := kubernetes.NewForConfig(adminCfg)
	require.NoError(t, err)
	token := func(sa string) string {
		tr, err := adminCS.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the metrics server's certificate is self-signed
	get := func(bearer string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		r, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		return r.StatusCode, string(b), err
	}
	require.Eventually(t, func() bool { _, _, err := get(""); return err == nil }, 30*time.Second, 50*time.Millisecond, "the metrics server answers")
	status := map[string]int{}
	for who, bearer := range map[string]string{"reader": token("prometheus"), "not a reader": token("nosy"), "anonymous": ""} {
		code, body, err := get(bearer)
		require.NoError(t, err, who)
		status[who] = code
		if code == http.StatusOK {
			// controller-runtime's registry, shared by the tests of the
			// package: the count is at least this test's one.
			require.Regexp(t, `(?m)^`+observe.MetricDecisions+`\{hook="CanUpdateMachine",outcome="accept"\} [1-9]`, body, "the extension's metrics")
		}
	}
	return status
}
