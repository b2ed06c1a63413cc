package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// demoChange is README's change.yaml: md-0 and md-2 to the control
// plane's version, md-1 to a new machine image.
const demoChange = `apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: md-0}
spec:
  template:
    spec: {version: v1.36.3}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: md-2}
spec:
  template:
    spec: {version: v1.36.3}
---
apiVersion: infrastructure.upgradekit.dev/v1alpha1
kind: TestMachineTemplate
metadata: {name: md-1-v2}
spec:
  template:
    spec: {image: test-image-2}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: md-1}
spec:
  template:
    spec:
      infrastructureRef: {apiGroup: infrastructure.upgradekit.dev, kind: TestMachineTemplate, name: md-1-v2}
`

// demoCluster is README's cluster: a control plane at v1.36.3, three
// MachineDeployments of one machine at v1.35.4 (Cluster API v1.14's
// newest supported step left to take), its kubeconfig Secret
// (the workload cluster is the same API server), and on md-2's node a
// database pod its PodDisruptionBudget does not let go.
func demoCluster(t *testing.T) (*apiserver.Env, string) {
	t.Helper()
	env := apiserver.StartForTest(t, apiserver.WithCRDs(clusterapi.InfrastructureCRDs()...))
	ctx, c := t.Context(), env.Client
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "demo", Version: "v1.36.3", WorkerVersion: "v1.35.4", ControlPlane: 1,
		Workers: map[string]int{"md-0": 1, "md-1": 1, "md-2": 1}, Nodes: true}.Create(ctx, c))
	secret, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, secret))
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}))
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-0", Labels: map[string]string{"app": "db"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "55555555-5555-5555-5555-555555555555", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "md-2-abcde-0000", Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}}}))
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	require.NoError(t, c.Create(ctx, pdb))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	require.NoError(t, c.Status().Update(ctx, pdb)) // envtest runs no disruption controller
	file := filepath.Join(t.TempDir(), "change.yaml")
	require.NoError(t, os.WriteFile(file, []byte(demoChange), 0o600))
	return env, file
}

func runWith(t *testing.T, c client.Client, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, &deps{mgmt: c})
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

// commandClient is a client of env with the command's own scheme.
func commandClient(t *testing.T, env *apiserver.Env) client.Client {
	t.Helper()
	scheme, err := newScheme()
	require.NoError(t, err)
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

func TestPreviewAgainstAPIServer(t *testing.T) {
	env, file := demoCluster(t)
	c := commandClient(t, env)

	out, errOut, code := runWith(t, c, "", "preview", "-cluster", "demo", "-f", file)
	require.Equal(t, exitBlocked, code, "md-2's node cannot be drained: %s%s", out, errOut)
	require.Contains(t, out, "md-0-abcde-0000  md-0           InPlace")
	require.Contains(t, out, "md-1-abcde-0000  md-1           Replace")
	require.Contains(t, out, "md-2-abcde-0000  md-2           Blocked")
	require.Contains(t, errOut, "read and predicted 4 machines")

	for _, output := range [][]string{{"-o", "json"}, {"--output=yaml"}, {"-oyaml"}} {
		t.Run(strings.Join(output, ""), func(t *testing.T) {
			// Flags after the arguments' place, kubectl-style spellings.
			out, _, code := runWith(t, c, demoChange, append([]string{"--cluster=demo", "-f", "-"}, output...)...)
			require.Equal(t, exitBlocked, code)
			var pr struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Estimate   string `json:"estimate"`
				Machines   []struct {
					Name          string   `json:"name"`
					ReplaceFields []string `json:"replaceFields"`
				} `json:"machines"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(out), &pr))
			require.Equal(t, "cli.upgradekit.io/v1alpha1", pr.APIVersion)
			require.Equal(t, "Prediction", pr.Kind)
			_, err := time.ParseDuration(pr.Estimate)
			require.NoError(t, err, "a duration as a string: %q", pr.Estimate)
			require.NotContains(t, out, "null")
			require.Len(t, pr.Machines, 4)
			require.Equal(t, "md-1-abcde-0000", pr.Machines[1].Name)
			require.Equal(t, []string{"infrastructure.spec.template.spec.image (InfrastructureImage)"}, pr.Machines[1].ReplaceFields)
		})
	}
	t.Run("replaced only", func(t *testing.T) {
		_, _, code := runWith(t, c, demoChange, "-cluster", "demo", "-f", "-", "-workload=false")
		require.Equal(t, exitReplaced, code, "without the workload cluster no drain blocker is known")
	})
	t.Run("in place only", func(t *testing.T) {
		_, _, code := runWith(t, c, strings.SplitN(demoChange, "---", 2)[0], "-cluster", "demo", "-f", "-")
		require.Equal(t, exitOK, code)
	})
	t.Run("settings from the ExtensionConfig", func(t *testing.T) {
		require.NoError(t, c.Create(t.Context(), &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: "upgradekit"},
			Spec: runtimev1.ExtensionConfigSpec{ClientConfig: runtimev1.ClientConfig{URL: "https://127.0.0.1:1"},
				Settings: map[string]string{"upgradekit.io/disabled": "true"}}}))
		out, _, code := runWith(t, c, strings.SplitN(demoChange, "---", 2)[0], "-cluster", "demo", "-f", "-", "-extension-config", "upgradekit")
		require.Equal(t, exitReplaced, code, "a disabled extension declines everything: %s", out)
	})
	t.Run("timeline and timings", func(t *testing.T) {
		page := filepath.Join(t.TempDir(), "preview.html")
		out, errOut, code := runWith(t, c, demoChange, "-cluster", "demo", "-f", "-", "-timeline", page, "-timings", "kubeadm=10m,drain=1m")
		require.Equal(t, exitBlocked, code, errOut)
		require.Contains(t, out, "11m    kubeadm: machine.spec.template.spec.version", "drain 1m + kubeadm 10m")
		require.Contains(t, errOut, "timeline written to "+page)
		html, err := os.ReadFile(page)
		require.NoError(t, err)
		doc := string(html)
		require.Contains(t, doc, "<title>upgradekit preview of default/demo</title>")
		require.Contains(t, doc, "estimated time")
		require.Contains(t, doc, "1 in place, 1 replaced, 1 blocked, 1 unchanged")
		require.Contains(t, doc, ">‖<title>md-2-abcde-0000: drain (blocked)", "the blocked machine is marked")
		require.Contains(t, doc, "md-0-abcde-0000: kubeadm (InPlace)")
		require.Contains(t, doc, "md-1-abcde-0000: replace (Replace)")
		var svg struct {
			Rects []struct {
				Title string `xml:"title"`
			} `xml:"rect"`
		}
		from, to := strings.Index(doc, "<svg"), strings.Index(doc, "</svg>")
		require.NoError(t, xml.Unmarshal([]byte(doc[from:to+len("</svg>")]), &svg))
		require.Len(t, svg.Rects, 3+4, "3 group bars (one per wave) and 4 step bars (drain and kubeadm, replace, blocked drain)")
	})
	t.Run("names are checked", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"-cluster", "nosuch"}, "--cluster: no Cluster default/nosuch"},
			{[]string{"-cluster", "demo", "-extension-config", "nosuch"}, `--extension-config: no ExtensionConfig "nosuch"`},
			{[]string{"-cluster", "demo", "-f", filepath.Join(t.TempDir(), "nosuch.yaml")}, "no such file"},
			{[]string{"-cluster", "demo", "-in-place", "NoSuchCategory"}, "NoSuchCategory"},
			{[]string{"-cluster", "demo", "-upgrader-images", "v1.36=x"}, "v1.36"},
			{[]string{"-cluster", "demo", "-upgrader-images", "v1.36.3"}, `--upgrader-images: "v1.36.3" is not version=image`},
			{[]string{"-cluster", "demo", "-timings", "kubeadmm=1m"}, `--timings: no updater "kubeadmm"`},
			{[]string{"-cluster", "demo", "-timings", "drain=soon"}, `"soon" is not a duration`},
		} {
			_, errOut, code := runWith(t, c, "", tc.args...)
			require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
			require.Contains(t, errOut, tc.want, "%v", tc.args)
		}
		_, errOut, code := runWith(t, c, "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata: {name: md-0}\n", "-cluster", "demo", "-f", "-")
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "v1beta2 only")
		_, errOut, code = runWith(t, c, "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: md-0}\nspec: {replicas: -1}\n", "-cluster", "demo", "-f", "-")
		require.Equal(t, exitUsage, code, "the API server's dry run refuses it: %s", errOut)
		require.Contains(t, errOut, "dry run refuses it")
	})
}

// TestREADMEShowsARealPreview: the command line and output in README.md's
// preview section are this command's, on demoCluster with demoChange.
func TestREADMEShowsARealPreview(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	// The command line as README shows it, kubectl's spelling: two dashes.
	m := regexp.MustCompile(`\n\$ kubectl upgradekit preview (.*)\n`).FindSubmatch(readme)
	require.NotNil(t, m, "README.md shows a preview command line")
	args := strings.Fields(string(m[1]))
	require.Equal(t, []string{"--cluster", "demo", "-f", "change.yaml"}, args)
	env, file := demoCluster(t)
	args[3] = file
	out, _, code := runWith(t, commandClient(t, env), "", args...)
	require.Equal(t, exitBlocked, code)
	t.Logf("output:\n%s", out)
	if !strings.Contains(string(readme), demoChange) {
		t.Fatalf("README's change.yaml is not demoChange:\n%s", demoChange)
	}
	if !strings.Contains(string(readme), string(m[0])+out+"$ echo $?\n4\n") {
		t.Fatalf("README does not show the real output:\n%s", out)
	}
}

// registerServed serves upgradekit's extension, configured by opts, over
// HTTPS as its Deployment runs it (startServed) and registers it as Cluster API leaves an ExtensionConfig it has
// discovered (status.handlers written here: no Cluster API controller
// runs in this test).
func registerServed(t *testing.T, c client.Client, name string, opts extensionserver.Options) {
	t.Helper()
	srv, url, ca := startServed(t, c, opts)
	ec := &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: runtimev1.ExtensionConfigSpec{ClientConfig: runtimev1.ClientConfig{URL: url, CABundle: ca}, NamespaceSelector: &metav1.LabelSelector{}}}
	require.NoError(t, c.Create(t.Context(), ec))
	for _, h := range srv.Handlers() {
		ec.Status.Handlers = append(ec.Status.Handlers, runtimev1.ExtensionHandler{Name: h.Name + "." + name, TimeoutSeconds: 10, FailurePolicy: runtimev1.FailurePolicyFail,
			RequestHook: runtimev1.GroupVersionHook{APIVersion: runtimehooksv1.GroupVersion.String(), Hook: runtimecatalog.HookName(h.Hook)}})
	}
	require.NoError(t, c.Status().Update(t.Context(), ec))
}

// TestPreviewAsksTheDeployedExtension: with an extension registered, the
// plugin asks it (-mode auto, the default), so its configuration decides,
// not the plugin's flags: the deployed extension has upgrader images for
// another version only, and declines what the flags' defaults accept.
func TestPreviewAsksTheDeployedExtension(t *testing.T) {
	env, file := demoCluster(t)
	c := commandClient(t, env)

	_, errOut, code := runWith(t, c, "", "-cluster", "demo", "-f", file, "-mode", "extension")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "--mode extension: no in-place extension registered")
	_, errOut, code = runWith(t, c, "", "-cluster", "demo", "-f", file, "-mode", "sometimes")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `--mode "sometimes": want auto, extension or in-process`)

	registerServed(t, c, "upgradekit", extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.37.0": "registry.example/upgrader:v1.37.0"}}})
	for _, mode := range []string{"", "extension"} {
		args := []string{"-cluster", "demo", "-f", file}
		if mode != "" {
			args = append(args, "-mode", mode)
		}
		out, errOut, code := runWith(t, c, "", args...)
		require.Equal(t, exitBlocked, code, "md-2's node cannot be drained: %s%s", out, errOut)
		// Not configured for the version: a Failure Cluster API asks again,
		// so the machine waits (Blocked) rather than being replaced.
		require.Contains(t, out, "md-0-abcde-0000  md-0           Blocked", "the deployed extension has no upgrader image for v1.36.3")
		require.Regexp(t, `md-0-abcde-0000 +md-0 +Blocked .*CanUpdateMachineSet answers Failure`, out)
		require.Contains(t, out, "answered by the deployed extension (ExtensionConfig upgradekit)")
	}
	out, _, code := runWith(t, c, "", "-cluster", "demo", "-f", file, "-mode", "in-process")
	require.Equal(t, exitBlocked, code)
	require.Contains(t, out, "md-0-abcde-0000  md-0           InPlace", "the flags' defaults accept any version")
	require.Contains(t, out, "answered in-process")

	out, _, _ = runWith(t, c, "", "-cluster", "demo", "-f", file, "-o", "json")
	var pr struct {
		Kind       string   `json:"kind"`
		Mode       string   `json:"mode"`
		Extensions []string `json:"extensions"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &pr))
	require.Equal(t, "Prediction", pr.Kind)
	require.Equal(t, preview.ModeExtension, pr.Mode)
	require.Equal(t, []string{"upgradekit"}, pr.Extensions)

	// Two in-place extensions: Cluster API refuses the hooks; so does the
	// preview, naming them.
	registerServed(t, c, "other-vendor", extensionserver.Options{UpgraderImage: "registry.example/upgrader:any"})
	for _, mode := range []string{"", "extension"} {
		_, errOut, code = runWith(t, c, "", "-cluster", "demo", "-f", file, "-mode", cmpOr(mode, "auto"))
		require.Equal(t, exitError, code, errOut)
		require.Contains(t, errOut, "several in-place extensions registered: ExtensionConfigs other-vendor, upgradekit register")
	}
	_, _, code = runWith(t, c, "", "-cluster", "demo", "-f", file, "-mode", "in-process")
	require.Equal(t, exitBlocked, code, "in process, the flags answer")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
