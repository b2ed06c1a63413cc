package preview_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// registration is an ExtensionConfig as Cluster API leaves it once it has
// discovered the extension: spec from the test, status.handlers from the
// handlers served (no Cluster API controller runs here).
type registration struct {
	name, url     string
	service       *runtimev1.ServiceReference // instead of url
	ca            []byte
	handlers      []server.ExtensionHandler
	settings      map[string]string
	selector      *metav1.LabelSelector
	failurePolicy runtimev1.FailurePolicy
}

func register(t *testing.T, c client.Client, r registration) {
	t.Helper()
	if r.selector == nil {
		r.selector = &metav1.LabelSelector{} // what Cluster API's webhook defaults it to
	}
	ec := &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: r.name},
		Spec: runtimev1.ExtensionConfigSpec{ClientConfig: runtimev1.ClientConfig{URL: r.url, CABundle: r.ca}, NamespaceSelector: r.selector, Settings: r.settings}}
	if r.service != nil {
		ec.Spec.ClientConfig.Service = *r.service
	}
	for _, h := range r.handlers {
		ec.Status.Handlers = append(ec.Status.Handlers, runtimev1.ExtensionHandler{Name: h.Name + "." + r.name, TimeoutSeconds: 10, FailurePolicy: cmpOr(r.failurePolicy, runtimev1.FailurePolicyFail),
			RequestHook: runtimev1.GroupVersionHook{APIVersion: runtimehooksv1.GroupVersion.String(), Hook: runtimecatalog.HookName(h.Hook)}})
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ec)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(runtimev1.GroupVersion.String())
	u.SetKind("ExtensionConfig")
	status := u.Object["status"]
	delete(u.Object, "status")
	require.NoError(t, c.Create(t.Context(), u))
	u.Object["status"] = status
	require.NoError(t, c.Status().Update(t.Context(), u))
	t.Cleanup(func() { _ = c.Delete(context.Background(), u) })
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// serve serves handlers over HTTPS and waits until the port answers.
func serve(t *testing.T, handlers ...server.ExtensionHandler) (string, []byte) {
	t.Helper()
	u, ca := clusterapi.ServeForTest(t, handlers...)
	host, err := url.Parse(u)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", host.Host, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the extension listens")
	return u, ca
}

// versionOnly is another vendor's extension, not upgradekit's: it accepts
// any MachineSet by patching the desired version in, and nothing else.
func versionOnly(name string, patchVersion bool) server.ExtensionHandler {
	return server.ExtensionHandler{Hook: runtimehooksv1.CanUpdateMachineSet, Name: name,
		HandlerFunc: func(_ context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) {
			resp.Status = runtimehooksv1.ResponseStatusSuccess
			path := "/spec/template/spec/version"
			if !patchVersion {
				path = "/spec/template/spec/minReadySeconds" // a patch that leaves the version to roll
			}
			val := fmt.Sprintf("%q", req.Desired.MachineSet.Spec.Template.Spec.Version)
			if !patchVersion {
				val = "0"
			}
			resp.MachineSetPatch = runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: []byte(`[{"op":"add","path":"` + path + `","value":` + val + `}]`)}
			resp.Message = "version only"
		}}
}

// TestTheDeployedExtensionDecides: the same change (md-a's workers to the
// control plane's version) previewed with the plugin's default in-process
// answer (upgradekit's extension accepting any version) and with the
// deployed extension, configured otherwise: the prediction in extension
// mode follows the deployed configuration, its ExtensionConfig's settings
// and its failure policy, for upgradekit's extension and for another.
func TestTheDeployedExtensionDecides(t *testing.T) {
	env, snap, change := smallClusterChange(t)
	c, ctx := env.Client, t.Context()
	workers := []string{"md-a-abcde-0000", "md-a-abcde-0001"}

	// In process, as the plugin's defaults configure upgradekit's
	// extension: in place.
	plugin, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: "preview.invalid/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true})
	require.NoError(t, err)
	pr, err := preview.Predict(ctx, c, snap, change, plugin.Extension())
	require.NoError(t, err)
	require.Equal(t, preview.ModeInProcess, pr.Mode)
	for _, n := range workers {
		m, _ := pr.Machine(n)
		require.Equal(t, strategy.MethodInPlace, m.Method, m.Reason)
	}

	upgradekit := func(opts extensionserver.Options) []server.ExtensionHandler {
		opts.AllowMutableUpgraderImages, opts.AllowUnverifiedBundles = true, true
		srv, err := extensionserver.New(c, opts)
		require.NoError(t, err)
		return srv.Handlers()
	}
	closed := func() string { // a port nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return "https://" + addr
	}()
	for _, tc := range []struct {
		name     string
		handlers []server.ExtensionHandler
		url      string // instead of serving the handlers
		settings map[string]string
		policy   runtimev1.FailurePolicy
		want     strategy.Method
		reason   string
	}{
		{name: "upgradekit as the plugin assumes", handlers: upgradekit(extensionserver.Options{UpgraderImage: "registry.example/upgrader:any"}), want: strategy.MethodInPlace, reason: "CanUpdateMachineSet accepts"},
		// Not configured for the version is a Failure, which Cluster API
		// asks again, not a decline it remembers.
		{name: "upgradekit with images for another version", handlers: upgradekit(extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{cpTo: "registry.example/upgrader:" + cpTo}}}),
			want: strategy.MethodBlocked, reason: "not configured for the version"},
		{name: "upgradekit disabled by its ExtensionConfig's settings", handlers: upgradekit(extensionserver.Options{UpgraderImage: "registry.example/upgrader:any"}),
			settings: map[string]string{capi.SettingDisabled: "true"}, want: strategy.MethodReplace, reason: "CanUpdateMachineSet declines"},
		{name: "another vendor's extension", handlers: []server.ExtensionHandler{versionOnly("other", true)}, want: strategy.MethodInPlace, reason: "version only (handler other.deployed)"},
		{name: "another vendor's patch leaves a difference", handlers: []server.ExtensionHandler{versionOnly("other", false)}, want: strategy.MethodReplace, reason: "Cluster API would still roll it out"},
		{name: "unreachable, FailurePolicy Fail", handlers: []server.ExtensionHandler{versionOnly("other", true)}, url: closed, want: strategy.MethodBlocked, reason: "answers Failure"},
		{name: "unreachable, FailurePolicy Ignore", handlers: []server.ExtensionHandler{versionOnly("other", true)}, url: closed, policy: runtimev1.FailurePolicyIgnore,
			want: strategy.MethodReplace, reason: "FailurePolicy is Ignore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, ca := tc.url, []byte(nil)
			if u == "" {
				u, ca = serve(t, tc.handlers...)
			}
			register(t, c, registration{name: "deployed", url: u, ca: ca, handlers: tc.handlers, settings: tc.settings, failurePolicy: tc.policy})
			d, err := preview.FindDeployed(ctx, c, "default")
			require.NoError(t, err)
			require.Equal(t, []string{"deployed"}, d.ExtensionConfigs())
			pr, err := preview.Predict(ctx, c, snap, change, d)
			require.NoError(t, err)
			require.Equal(t, preview.ModeExtension, pr.Mode)
			require.Contains(t, pr.String(), "answered by the deployed extension (ExtensionConfig deployed)")
			t.Logf("prediction:\n%s", pr)
			for _, n := range workers {
				m, _ := pr.Machine(n)
				require.Equal(t, tc.want, m.Method, m.Reason)
				require.Contains(t, m.Reason, tc.reason)
			}
		})
	}
}

// TestSeveralInPlaceExtensions: Cluster API v1.14 refuses the in-place
// hooks when more than one extension registers one for the namespace; the
// preview says so, naming the ExtensionConfigs, and a namespaceSelector
// that leaves one out settles it.
func TestSeveralInPlaceExtensions(t *testing.T) {
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}}))
	_, err := preview.FindDeployed(ctx, c, "team-a")
	require.ErrorIs(t, err, preview.ErrNoExtension)

	h := []server.ExtensionHandler{versionOnly("can-update-machineset", true)}
	register(t, c, registration{name: "vendor-a", url: "https://vendor-a.example", handlers: h})
	register(t, c, registration{name: "vendor-b", url: "https://vendor-b.example", handlers: h,
		selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}})
	d, err := preview.FindDeployed(ctx, c, "team-a")
	require.NoError(t, err, "vendor-b's selector leaves team-a out")
	require.Equal(t, []string{"vendor-a"}, d.ExtensionConfigs())

	register(t, c, registration{name: "vendor-c", url: "https://vendor-c.example", handlers: h})
	_, err = preview.FindDeployed(ctx, c, "team-a")
	require.ErrorIs(t, err, preview.ErrSeveralExtensions)
	var several *preview.SeveralExtensionsError
	require.True(t, errors.As(err, &several))
	require.Equal(t, &preview.SeveralExtensionsError{Hook: "CanUpdateMachineSet", Handlers: []string{"can-update-machineset.vendor-a", "can-update-machineset.vendor-c"},
		ExtensionConfigs: []string{"vendor-a", "vendor-c"}}, several)
	require.Contains(t, err.Error(), "vendor-a, vendor-c")

	// A namespace without labels: no selector but the empty one matches.
	_, err = preview.FindDeployed(ctx, c, "default")
	require.ErrorIs(t, err, preview.ErrSeveralExtensions)
	_, err = preview.FindDeployed(ctx, c, "")
	require.ErrorIs(t, err, preview.ErrInvalidArgument)
}

// TestThroughTheServiceProxy: an ExtensionConfig naming a Service, whose
// name resolves only inside the cluster, is reached through the API
// server's service proxy, as kubectl reaches services from outside; the
// answer is the deployed extension's (no upgrader image for the version:
// a Failure, so the machines are Blocked until it is configured). The API
// server proxies to no loopback address, so the extension listens in a
// network namespace of the test's own (extensionNetwork).
func TestThroughTheServiceProxy(t *testing.T) {
	ip, inNetns := extensionNetwork(t)
	env, snap, change := smallClusterChange(t)
	c, ctx := env.Client, t.Context()

	// The extension as its Deployment runs it, hooks and gate report on
	// one port, with a maintenance window that is closed.
	yearly, err := strategy.MaintenanceWindow("new-year", "0 0 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	srv, u, _ := startServer(t, ip, inNetns, c, extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{
		Images: capi.ImagesByVersion{cpTo: "registry.example/upgrader:" + cpTo}, Gates: []strategy.Gate{yearly}}})
	port, err := strconv.Atoi(u[strings.LastIndex(u, ":")+1:])
	require.NoError(t, err)

	// The Service and its endpoints, as a Deployment behind it would have
	// them (no controller runs here).
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgradekit-system"}}))
	require.NoError(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "upgradekit-system", Name: "upgradekit"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(port)}}}}))
	// The API server proxies only to an endpoint that is a pod with its IP.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "upgradekit-system", Name: "upgradekit-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "extension", Image: "registry.example/upgradekit:1"}}}}
	require.NoError(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	require.NoError(t, c.Status().Update(ctx, pod))
	podRef := &corev1.ObjectReference{Kind: "Pod", Namespace: "upgradekit-system", Name: "upgradekit-0", UID: pod.UID}
	// Endpoints, which the service proxy reads (unstructured: the typed
	// API is deprecated), and the EndpointSlice that goes with them.
	eps := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Endpoints",
		"metadata": map[string]any{"namespace": "upgradekit-system", "name": "upgradekit"},
		"subsets": []any{map[string]any{
			"addresses": []any{map[string]any{"ip": ip, "targetRef": map[string]any{"kind": "Pod", "namespace": "upgradekit-system", "name": "upgradekit-0", "uid": string(pod.UID)}}},
			"ports":     []any{map[string]any{"name": "https", "port": int64(port)}},
		}}}}
	require.NoError(t, c.Create(ctx, eps))
	require.NoError(t, c.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "upgradekit-system", Name: "upgradekit-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "upgradekit"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, TargetRef: podRef, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}}}))
	register(t, c, registration{name: "upgradekit", service: &runtimev1.ServiceReference{Namespace: "upgradekit-system", Name: "upgradekit", Port: ptr.To[int32](443)},
		handlers: srv.Handlers()})

	d, err := preview.FindDeployed(ctx, c, "default", preview.ThroughServiceProxy(env.Config))
	require.NoError(t, err)
	pr, err := preview.Predict(ctx, c, snap, change, d)
	require.NoError(t, err)
	t.Logf("prediction:\n%s", pr)
	for _, n := range []string{"md-a-abcde-0000", "md-a-abcde-0001"} {
		m, _ := pr.Machine(n)
		require.Equal(t, strategy.MethodBlocked, m.Method, m.Reason)
		require.Contains(t, m.Reason, "no upgrader image for "+cpFrom)
	}

	// The gate report goes the same way.
	rep, err := d.ReportGates(ctx, client.ObjectKey{Namespace: "default", Name: "small"}, []string{"md-a-abcde-0000"})
	require.NoError(t, err)
	require.Len(t, rep.Machines, 1)
	require.Equal(t, strategy.VerdictWait, rep.Machines[0].Verdict)
	require.Equal(t, "new-year", rep.Machines[0].Gates[0].Gate)
}

// smallClusterChange provisions the cluster "small" (one control plane at
// cpFrom, MachineDeployment md-a of two workers at workersFrom) with its
// kubeconfig Secret, reads it, and returns the change that takes md-a to
// the control plane's version.
func smallClusterChange(t *testing.T) (*apiserver.Env, *preview.Snapshot, []*unstructured.Unstructured) {
	t.Helper()
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "small", Version: cpFrom, WorkerVersion: workersFrom, ControlPlane: 1,
		Workers: map[string]int{"md-a": 2}, Nodes: true}.Create(ctx, c))
	kubeconfigFor(t, env, "small")
	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-a"}, &md))
	md.Spec.Template.Spec.Version = cpFrom
	change := []*unstructured.Unstructured{toUnstructured(t, &md, "MachineDeployment", clusterv1.GroupVersion.String())}
	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "small"})
	require.NoError(t, err)
	return env, snap, change
}
