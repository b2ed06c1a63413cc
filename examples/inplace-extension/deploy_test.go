package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// TestDeployManifestsApply applies deploy/extension.yaml to a real API
// server with the CAPI CRDs (server-side validation included), except the
// cert-manager objects, whose CRDs are not installed there.
func TestDeployManifestsApply(t *testing.T) {
	env := apiserver.StartForTest(t)
	ctx := context.Background()
	kinds := map[string]int{}
	roles := map[string][]rbacv1.PolicyRule{}
	var clusterWide []string // roles bound cluster-wide
	var policy networkingv1.NetworkPolicy
	var deploy appsv1.Deployment
	var pdb policyv1.PodDisruptionBudget
	for _, obj := range deployManifests(t) {
		kinds[obj.GetKind()]++
		if obj.GetKind() == "ClusterRole" {
			var role rbacv1.ClusterRole
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
			roles[role.Name] = role.Rules
		}
		if obj.GetKind() == "NetworkPolicy" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &policy))
		}
		if obj.GetKind() == "PodDisruptionBudget" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pdb))
		}
		if obj.GetKind() == "Deployment" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &deploy))
		}
		if obj.GetKind() == "ClusterRoleBinding" {
			var b rbacv1.ClusterRoleBinding
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b))
			clusterWide = append(clusterWide, b.RoleRef.Name)
		}
		if obj.GroupVersionKind().Group == "cert-manager.io" {
			continue
		}
		require.NoError(t, env.Client.Create(ctx, &obj), "%s %s", obj.GetKind(), obj.GetName())
	}
	require.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 4, "RoleBinding": 2, "ClusterRoleBinding": 1,
		"Issuer": 1, "Certificate": 1, "Service": 1, "NetworkPolicy": 1, "Deployment": 1, "PodDisruptionBudget": 1, "ExtensionConfig": 1}, kinds)
	// Served from two replicas that a drain cannot both take, each with
	// probes and resources, as a numeric non-root user.
	require.GreaterOrEqual(t, *deploy.Spec.Replicas, int32(2))
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	require.True(t, pdbSel.Matches(labels.Set(deploy.Spec.Template.Labels)), "the PDB covers the extension's pods")
	require.Equal(t, int32(1), pdb.Spec.MinAvailable.IntVal)
	c := deploy.Spec.Template.Spec.Containers[0]
	require.NotEmpty(t, c.Resources.Requests)
	require.NotNil(t, deploy.Spec.Template.Spec.SecurityContext.RunAsUser)
	require.NotZero(t, *deploy.Spec.Template.Spec.SecurityContext.RunAsUser)
	o, err := parseFlags(containerArgs(c), io.Discard)
	require.NoError(t, err)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	portOf := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		require.NoError(t, err, addr)
		n, err := strconv.Atoi(p)
		require.NoError(t, err, addr)
		return int32(n)
	}
	// The ports the container declares are the ones it serves on.
	require.Equal(t, map[string]int32{"hooks": int32(o.port), "metrics": portOf(o.metricsAddr), "healthz": portOf(o.healthAddr)}, ports)
	// Metrics over HTTPS, for authorized scrapers, on every address (a
	// scraper reaches the pod's IP).
	require.True(t, o.metricsSecure, "metrics served securely")
	require.Equal(t, ":8443", o.metricsAddr)
	// HTTP probes of the health port: readiness once the hooks are served
	// (/readyz), liveness of the process (/healthz).
	for name, tc := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"readiness": {c.ReadinessProbe, "/readyz"}, "liveness": {c.LivenessProbe, "/healthz"}} {
		require.NotNil(t, tc.probe, name)
		require.NotNil(t, tc.probe.HTTPGet, "%s: an HTTP probe", name)
		require.Equal(t, tc.path, tc.probe.HTTPGet.Path, name)
		require.Equal(t, "healthz", tc.probe.HTTPGet.Port.StrVal, name)
		require.Empty(t, tc.probe.HTTPGet.Scheme, "%s: plain HTTP, as the health port serves", name)
		require.Nil(t, tc.probe.TCPSocket, name)
	}
	// Schedulable on a management cluster of control plane nodes only.
	require.Contains(t, deploy.Spec.Template.Spec.Tolerations,
		corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	// The NetworkPolicy covers the extension's pods and admits only Cluster
	// API's controllers' namespaces on the hooks' port, and namespaces
	// labelled metrics=enabled (Prometheus's) on the metrics port; nothing
	// else.
	sel, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	require.NoError(t, err)
	require.True(t, sel.Matches(labels.Set(deploy.Spec.Template.Labels)), "the NetworkPolicy selects the extension's pods")
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, policy.Spec.PolicyTypes)
	require.Len(t, policy.Spec.Ingress, 2)
	for i, tc := range []struct {
		port   int32
		admits map[string]labels.Set
	}{
		{ports["hooks"], map[string]labels.Set{"capi-system": {"kubernetes.io/metadata.name": "capi-system"},
			"capi-kubeadm-control-plane-system": {"kubernetes.io/metadata.name": "capi-kubeadm-control-plane-system"}}},
		{ports["metrics"], map[string]labels.Set{"monitoring": {"kubernetes.io/metadata.name": "monitoring", "metrics": "enabled"}}},
	} {
		in := policy.Spec.Ingress[i]
		require.Len(t, in.Ports, 1)
		require.Equal(t, tc.port, in.Ports[0].Port.IntVal)
		require.Len(t, in.From, 1)
		require.Nil(t, in.From[0].PodSelector)
		nsSel, err := metav1.LabelSelectorAsSelector(in.From[0].NamespaceSelector)
		require.NoError(t, err)
		for ns, nsLabels := range map[string]labels.Set{
			"capi-system":                       {"kubernetes.io/metadata.name": "capi-system"},
			"capi-kubeadm-control-plane-system": {"kubernetes.io/metadata.name": "capi-kubeadm-control-plane-system"},
			"monitoring":                        {"kubernetes.io/metadata.name": "monitoring", "metrics": "enabled"},
			"default":                           {"kubernetes.io/metadata.name": "default"},
			"kube-system":                       {"kubernetes.io/metadata.name": "kube-system"},
			"upgradekit-system":                 {"kubernetes.io/metadata.name": "upgradekit-system"},
		} {
			_, want := tc.admits[ns]
			require.Equal(t, want, nsSel.Matches(nsLabels), "port %d from %s", tc.port, ns)
		}
	}
	// Exactly what the extension does in the management cluster: read
	// Machines, their KubeadmConfigs (and remove a stale certificate
	// expiry annotation from them) and infrastructure machines, the
	// MachineSets, Clusters and KubeadmControlPlanes the skew check reads,
	// the MachineDrainRules the drain follows, record Events on Machines
	// and read kubeconfig Secrets, only where a
	// RoleBinding grants it.
	require.Empty(t, cmp.Diff(map[string][]rbacv1.PolicyRule{
		"upgradekit-extension": {
			{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machines"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machinesets", "clusters"}, Verbs: []string{"get"}},
			{APIGroups: []string{"controlplane.cluster.x-k8s.io"}, Resources: []string{"kubeadmcontrolplanes"}, Verbs: []string{"get"}},
			{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machinedrainrules"}, Verbs: []string{"list"}},
			{APIGroups: []string{"bootstrap.cluster.x-k8s.io"}, Resources: []string{"kubeadmconfigs"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"infrastructure.cluster.x-k8s.io"}, Resources: []string{"dockermachines"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
		"upgradekit-extension-kubeconfig": {
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		},
		// Reviews of metrics scrapers' tokens and permissions.
		"upgradekit-extension-metrics-auth": {
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		},
		// For scrapers, bound by the user.
		"upgradekit-extension-metrics-reader": {
			{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		},
	}, roles))
	require.Equal(t, []string{"upgradekit-extension-metrics-auth"}, clusterWide, "only the token and access reviews are bound cluster-wide")

	// kubeconfig-by-name.yaml: a Role reading only <cluster>-kubeconfig
	// Secrets by name, and its RoleBinding.
	kinds = map[string]int{}
	for _, obj := range manifests(t, "deploy/kubeconfig-by-name.yaml") {
		kinds[obj.GetKind()]++
		if obj.GetKind() == "Role" {
			var role rbacv1.Role
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role))
			require.Len(t, role.Rules, 1)
			r := role.Rules[0]
			require.Equal(t, []string{"secrets"}, r.Resources)
			require.Equal(t, []string{"get"}, r.Verbs)
			require.NotEmpty(t, r.ResourceNames)
			for _, n := range r.ResourceNames {
				require.True(t, strings.HasSuffix(n, "-kubeconfig"), n)
			}
		}
		require.NoError(t, env.Client.Create(ctx, &obj), "%s %s", obj.GetKind(), obj.GetName())
	}
	require.Equal(t, map[string]int{"Role": 1, "RoleBinding": 1}, kinds)
}

// TestDeployArgsParse: the Deployment's args are flags the binary accepts,
// and they give the upgrader pod examples/upgrader's bundle image expects;
// both images are named by digest, and the bundle checksums are read from
// the ConfigMap the Deployment mounts.
func TestDeployArgsParse(t *testing.T) {
	var args []string
	var d appsv1.Deployment
	for _, obj := range deployManifests(t) {
		if obj.GetKind() != "Deployment" {
			continue
		}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
		require.Len(t, d.Spec.Template.Spec.Containers, 1)
		args = containerArgs(d.Spec.Template.Spec.Containers[0])
	}
	require.NotEmpty(t, args, "deploy/extension.yaml has a Deployment with args")
	o, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "registry.example/upgradekit-upgrader@sha256:"+strings.Repeat("0", 64), o.upgraderImage, "by digest (a placeholder the overlay replaces)")
	require.True(t, extensionserver.PinnedByDigest(d.Spec.Template.Spec.Containers[0].Image), "the extension's own image by digest: %s", d.Spec.Template.Spec.Containers[0].Image)
	require.False(t, o.allowMutableImages)
	require.False(t, o.allowUnverifiedBundles)
	require.Equal(t, "/etc/upgradekit/bundle-checksums", o.bundleChecksumsDir)
	mounts := map[string]string{}
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	var cm string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mounts[o.bundleChecksumsDir] && v.ConfigMap != nil {
			cm = v.ConfigMap.Name
		}
	}
	require.Equal(t, "upgradekit-bundle-checksums", cm, "-bundle-checksums-dir is the mounted checksums ConfigMap")
	require.Equal(t, []string{"/upgrader", "run"}, o.runnerArgv)
	require.Equal(t, "/staging", o.stageFrom)
	require.Equal(t, string(nodepod.ModeInitContainers), o.upgraderMode)
	require.Equal(t, []string{kubeadm.StepContainerd, kubeadm.StepCNIPlugins}, o.skip)
}

// TestDeployFlagsMatchTheBundle: the Deployment's -skip-steps fit the
// bundle hack/bundle.sh builds by default (kubeadm, kubelet, kubectl,
// etcd/etcdctl; no containerd or CNI trees): the extension starts with its
// checksums. A bundle without etcdctl (what the README's manual recipe
// used to build) is refused at start-up, exit 2, naming the flag, instead
// of failing the first control plane's etcd-snapshot step after the drain.
// It failed before the fix: the extension started and the step failed on
// the node.
func TestDeployFlagsMatchTheBundle(t *testing.T) {
	var args []string
	for _, obj := range deployManifests(t) {
		if obj.GetKind() == "Deployment" {
			var d appsv1.Deployment
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
			args = containerArgs(d.Spec.Template.Spec.Containers[0])
		}
	}
	o, err := parseFlags(args, io.Discard)
	require.NoError(t, err)
	sum := strings.Repeat("5", 64)
	// hack/bundle.sh VERSION's SHA256SUMS (examples/upgrader's
	// TestBundleScript holds the script to this layout).
	defaultBundle := map[string]string{kubeadm.StagedKubeadm: sum, kubeadm.StagedKubelet: sum, kubeadm.StagedKubectl: sum, kubeadm.StagedEtcdctl: sum}
	d := deps{mgmt: fakeclient.NewClientBuilder().Build(), scheme: runtime.NewScheme(), log: logr.Discard()}
	d.metrics, err = capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
	require.NoError(t, err)

	o.bundleChecksumsDir = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(o.bundleChecksumsDir, "v1.36.3"), []byte(kubeadm.FormatChecksums(defaultBundle)), 0o644))
	_, err = extensionserver.New(d.mgmt, o.serverOptions(d))
	require.NoError(t, err, "the Deployment starts with the default bundle's checksums")

	delete(defaultBundle, kubeadm.StagedEtcdctl)
	require.NoError(t, os.WriteFile(filepath.Join(o.bundleChecksumsDir, "v1.36.3"), []byte(kubeadm.FormatChecksums(defaultBundle)), 0o644))
	var stderr bytes.Buffer
	require.Equal(t, exitUsage, exitCode(serve(t.Context(), o, d), &stderr))
	require.Equal(t, "inplace-extension: invalid flag: --bundle-checksums-dir: version v1.36.3: the bundle carries no etcd/etcdctl, which the etcd-snapshot step needs (the bundle must carry it, or --skip-steps with etcd-snapshot leaves the step out)\nSee 'inplace-extension --help' for usage.\n", stderr.String())
}
