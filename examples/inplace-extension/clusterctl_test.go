package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
)

// envClusterctl names the directory hack/clusterctl.sh prints: Cluster
// API's own clusterctl, a local repository of Cluster API's providers and
// cert-manager's CRDs.
const envClusterctl = "UPGRADEKIT_CLUSTERCTL"

// TestClusterctlRuntimeExtension installs the extension the way a Cluster
// API user does, with Cluster API's own clusterctl (v1.14.2, built by
// hack/clusterctl.sh) against a real API server, from a local clusterctl
// repository holding what hack/release writes for two versions:
// `clusterctl init --runtime-extension upgradekit:v0.1.0` installs it with
// the variables substituted, `clusterctl upgrade apply` moves it to v0.2.0,
// `clusterctl delete --runtime-extension upgradekit` removes it.
//
// What the API server alone cannot do, the test stands in for: cert-manager
// is "already installed" as its CRDs (clusterctl only checks that it can
// create an Issuer and a Certificate, cert_manager.go waitForAPIReady), and
// Cluster API's webhooks, which clusterctl installs pointing at the
// capi-webhook-service no API server of envtest can reach, are pointed at
// Cluster API's core manager running beside it, as the Service and
// cert-manager's CA injection would in a cluster: the ExtensionConfig is
// defaulted and validated by Cluster API's own webhooks. And as no
// namespace controller runs, the test finalizes the emptied namespace
// clusterctl's cert-manager check deletes.
func TestClusterctlRuntimeExtension(t *testing.T) {
	dir := os.Getenv(envClusterctl)
	if dir == "" {
		if os.Getenv(apiserver.RequireEnvVar) != "" { // CI: a skip must not hide
			t.Fatalf("%s is not set (and %s is): build clusterctl with hack/clusterctl.sh and set %s to the directory it prints", envClusterctl, apiserver.RequireEnvVar, envClusterctl)
		}
		t.Skipf("%s is not set: build clusterctl with hack/clusterctl.sh and set %s to the directory it prints", envClusterctl, envClusterctl)
	}
	env := apiserver.StartForTest(t, apiserver.WithoutCAPICRDs(), apiserver.WithCRDPaths(filepath.Join(dir, "cert-manager-crds.yaml")))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repository")
	for _, v := range []string{"v0.1.0", "v0.2.0"} {
		release(t, repo, v)
	}
	meta, err := os.ReadFile(filepath.Join(repo, "runtime-extension-upgradekit", "v0.2.0", "metadata.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(meta), "minor: 1", "v0.2.0's metadata keeps v0.1's release series, or clusterctl upgrade refuses it")

	kc, err := env.Kubeconfig("management")
	require.NoError(t, err)
	kcPath := filepath.Join(tmp, "kubeconfig")
	require.NoError(t, os.WriteFile(kcPath, kc, 0o600))
	capi := filepath.Join(dir, "repository")
	config := filepath.Join(tmp, "clusterctl.yaml")
	require.NoError(t, os.WriteFile(config, []byte(`providers:
- name: cluster-api
  type: CoreProvider
  url: file://`+capi+`/cluster-api/v1.14.2/core-components.yaml
- name: kubeadm
  type: BootstrapProvider
  url: file://`+capi+`/bootstrap-kubeadm/v1.14.2/bootstrap-components.yaml
- name: kubeadm
  type: ControlPlaneProvider
  url: file://`+capi+`/control-plane-kubeadm/v1.14.2/control-plane-components.yaml
- name: upgradekit
  type: RuntimeExtensionProvider
  url: file://`+repo+`/runtime-extension-upgradekit/latest/runtime-extension-components.yaml
`), 0o644))
	clusterctl := func(extra []string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "clusterctl"), append(args, "--config", config, "--kubeconfig", kcPath, "-v", "2")...)
		// Nothing from the user's own clusterctl configuration, no
		// version check against GitHub.
		cmd.Env = append(os.Environ(), "HOME="+tmp, "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true")
		cmd.Env = append(cmd.Env, extra...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "clusterctl %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	// The first init installs Cluster API (core, kubeadm bootstrap and
	// control plane: clusterctl adds them on a first run); cert-manager's
	// API is there, so clusterctl does not install it.
	out := clusterctl(nil, "init")
	require.Contains(t, out, "Skipping installing cert-manager as it is already installed")
	finalizeNamespace(ctx, t, env, "cert-manager-test")
	clusterapi.StartForTest(t, env, clusterapi.WithManagers(clusterapi.ManagerCore))
	routeWebhooks(ctx, t, env.Client)

	extImage := func(d string) string {
		return "registry.example/upgradekit-inplace-extension@sha256:" + strings.Repeat(d, 64)
	}
	upgraderImages := "v1.36.3=registry.example/upgradekit-upgrader@sha256:" + strings.Repeat("4", 64)
	out = clusterctl([]string{"UPGRADEKIT_EXTENSION_IMAGE=" + extImage("1"), "UPGRADEKIT_UPGRADER_IMAGES=" + upgraderImages},
		"init", "--runtime-extension", "upgradekit:v0.1.0")
	require.Contains(t, out, "runtime-extension-upgradekit")
	requireProvider(ctx, t, env.Client, "v0.1.0")
	dep := extensionDeployment(ctx, t, env.Client)
	require.Equal(t, extImage("1"), dep.Spec.Template.Spec.Containers[0].Image, "UPGRADEKIT_EXTENSION_IMAGE")
	o, err := parseFlags(containerArgs(dep.Spec.Template.Spec.Containers[0]), io.Discard)
	require.NoError(t, err, "the installed Deployment's args parse")
	require.Empty(t, o.upgraderImage)
	require.Contains(t, o.images, "v1.36.3", "UPGRADEKIT_UPGRADER_IMAGES reaches -upgrader-images")
	ec := &unstructured.Unstructured{}
	ec.SetGroupVersionKind(schema.GroupVersionKind{Group: "runtime.cluster.x-k8s.io", Version: "v1beta2", Kind: "ExtensionConfig"})
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "upgradekit"}, ec))
	require.Equal(t, "runtime-extension-upgradekit", ec.GetLabels()["cluster.x-k8s.io/provider"], "clusterctl's labels")
	svcNS, _, _ := unstructured.NestedString(ec.Object, "spec", "clientConfig", "service", "namespace")
	require.Equal(t, "upgradekit-system", svcNS)

	// upgrade apply: the new version's components replace the old ones.
	clusterctl([]string{"UPGRADEKIT_EXTENSION_IMAGE=" + extImage("2"), "UPGRADEKIT_UPGRADER_IMAGES=" + upgraderImages},
		"upgrade", "apply", "--runtime-extension", "upgradekit-system/upgradekit:v0.2.0")
	requireProvider(ctx, t, env.Client, "v0.2.0")
	require.Equal(t, extImage("2"), extensionDeployment(ctx, t, env.Client).Spec.Template.Spec.Containers[0].Image)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "upgradekit"}, ec))

	roles := &unstructured.UnstructuredList{}
	roles.SetGroupVersionKind(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleList"})
	require.NoError(t, env.Client.List(ctx, roles, client.MatchingLabels{"cluster.x-k8s.io/provider": "runtime-extension-upgradekit"}))
	require.NotEmpty(t, roles.Items, "the ClusterRoles are installed")

	// delete: the provider and its objects go (the namespace stays without
	// --include-namespace, as for every clusterctl provider).
	clusterctl(nil, "delete", "--runtime-extension", "upgradekit")
	// clusterctl never deletes objects of a kind a provider's CRD defines
	// (cluster/proxy.go ListResources), Cluster API's ExtensionConfig
	// included: the README has the user delete it.
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: "upgradekit"}, ec), "the ExtensionConfig stays")
	// The ClusterRoles are the provider's (named <namespace>-...), so
	// they go with it.
	require.NoError(t, env.Client.List(ctx, roles, client.MatchingLabels{"cluster.x-k8s.io/provider": "runtime-extension-upgradekit"}))
	require.Empty(t, roles.Items, "the ClusterRoles are deleted")
	require.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "upgradekit-system", Name: "upgradekit-extension"}, &appsv1.Deployment{})), "the Deployment is deleted")
	require.Empty(t, providers(ctx, t, env.Client, "RuntimeExtensionProvider"), "clusterctl's inventory has no runtime extension")
	require.Len(t, providers(ctx, t, env.Client, "CoreProvider"), 1, "Cluster API stays")
}

// finalizeNamespace does what the namespace controller (not running here)
// does once a deleted namespace is empty: removes its "kubernetes"
// finalizer. clusterctl deletes its cert-manager test namespace after each
// check and creates it again at the next.
func finalizeNamespace(ctx context.Context, t *testing.T, env *apiserver.Env, name string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, ns.DeletionTimestamp, "clusterctl deleted %s", name)
	for _, kind := range []string{"IssuerList", "CertificateList"} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: kind})
		require.NoError(t, env.Client.List(ctx, list, client.InNamespace(name)))
		require.Empty(t, list.Items, "clusterctl deleted its test objects")
	}
	ns.Spec.Finalizers = nil
	_, err = cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// release writes version's clusterctl repository files into repo with
// hack/release, as hack/release.sh -clusterctl does.
func release(t *testing.T, repo, version string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd := exec.Command("go", "run", ".", "clusterctl", "-repo", root, "-version", version, "-out", repo)
	cmd.Dir = filepath.Join(root, "hack", "release")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/release clusterctl %s:\n%s", version, out)
}

// routeWebhooks points the webhooks of the configurations clusterctl
// installed for the core provider at the core manager capitest started
// (whose copies of the same webhooks, in configurations named
// capi-manager-<name>, carry its URL and CA).
func routeWebhooks(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	for _, kind := range []string{"ValidatingWebhookConfigurationList", "MutatingWebhookConfigurationList"} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind})
		require.NoError(t, c.List(ctx, list))
		// The copies' clientConfigs by webhook name.
		local := map[string]any{}
		for _, item := range list.Items {
			if !strings.HasPrefix(item.GetName(), string(clusterapi.ManagerCore)+"-") {
				continue
			}
			hooks, _, _ := unstructured.NestedSlice(item.Object, "webhooks")
			for _, h := range hooks {
				h := h.(map[string]any)
				local[h["name"].(string)] = h["clientConfig"]
			}
		}
		routed := 0
		for _, item := range list.Items {
			if item.GetLabels()["cluster.x-k8s.io/provider"] != "cluster-api" {
				continue
			}
			urls := local
			hooks, _, _ := unstructured.NestedSlice(item.Object, "webhooks")
			for _, h := range hooks {
				h := h.(map[string]any)
				cc, ok := urls[h["name"].(string)]
				require.True(t, ok, "webhook %s of %s", h["name"], item.GetName())
				h["clientConfig"] = cc
			}
			require.NoError(t, unstructured.SetNestedSlice(item.Object, hooks, "webhooks"))
			require.NoError(t, c.Update(ctx, &item))
			routed++
		}
		require.Equal(t, 1, routed, "clusterctl installed one %s of Cluster API's core", strings.TrimSuffix(kind, "List"))
	}
}

// providers lists clusterctl's inventory (Provider objects) of a type.
func providers(ctx context.Context, t *testing.T, c client.Client, typ string) []unstructured.Unstructured {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "ProviderList"})
	require.NoError(t, c.List(ctx, list))
	var out []unstructured.Unstructured
	for _, p := range list.Items {
		if got, _, _ := unstructured.NestedString(p.Object, "type"); got == typ {
			out = append(out, p)
		}
	}
	return out
}

func requireProvider(ctx context.Context, t *testing.T, c client.Client, version string) {
	t.Helper()
	ps := providers(ctx, t, c, "RuntimeExtensionProvider")
	require.Len(t, ps, 1)
	p := ps[0]
	name, _, _ := unstructured.NestedString(p.Object, "providerName")
	v, _, _ := unstructured.NestedString(p.Object, "version")
	require.Equal(t, []string{"upgradekit-system", "runtime-extension-upgradekit", "upgradekit", version},
		[]string{p.GetNamespace(), p.GetName(), name, v}, "clusterctl's inventory")
}

func extensionDeployment(ctx context.Context, t *testing.T, c client.Client) appsv1.Deployment {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "upgradekit-system", Name: "upgradekit-extension"}, u))
	var d appsv1.Deployment
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	return d
}
