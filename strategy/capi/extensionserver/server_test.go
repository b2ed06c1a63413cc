package extensionserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

func metrics(t *testing.T) extensionserver.Option {
	t.Helper()
	m, err := capi.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return extensionserver.WithMetrics(m)
}

// TestValidateNamesTheOption: every option New refuses is refused with an
// *OptionError naming it, matching ErrInvalidOption (and the cause, when
// another package refused it).
func TestValidateNamesTheOption(t *testing.T) {
	img := extensionserver.WithUpgraderImage("registry.example/upgrader@" + digestA)
	for _, tc := range []struct {
		name   string
		opts   []extensionserver.Option
		option string
		detail string
		cause  error
	}{
		{name: "no image", opts: nil, option: "WithUpgraderImage", detail: "required"},
		{name: "blank image", opts: []extensionserver.Option{extensionserver.WithUpgraderImage("  ")}, option: "WithUpgraderImage", detail: "required"},
		{name: "both image forms", opts: []extensionserver.Option{img, extensionserver.WithUpgraderImages(capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA})},
			option: "WithUpgraderImage", detail: "set one"},
		{name: "image map with a bad version", opts: []extensionserver.Option{extensionserver.WithUpgraderImages(capi.ImagesByVersion{"1.31": "r/u"})},
			option: "WithUpgraderImages", cause: capi.ErrInvalidOption},
		{name: "empty image map", opts: []extensionserver.Option{extensionserver.WithUpgraderImages(capi.ImagesByVersion{})},
			option: "WithUpgraderImages"},
		{name: "misspelt category", opts: []extensionserver.Option{img, extensionserver.WithCategories("KubernetesVerison")},
			option: "WithCategories", detail: `unknown category "KubernetesVerison" (categories: `},
		{name: "category without executor", opts: []extensionserver.Option{img, extensionserver.WithCategories(diff.CategoryImage)},
			option: "WithCategories", detail: "has no executor here"},
		{name: "no category", opts: []extensionserver.Option{img, extensionserver.WithCategories()}, option: "WithCategories", detail: "at least one"},
		{name: "port", opts: []extensionserver.Option{img, extensionserver.WithServing("", 0, "/certs")}, option: "WithServing", detail: "port 0"},
		{name: "cert dir", opts: []extensionserver.Option{img, extensionserver.WithServing("", 9443, "")}, option: "WithServing", detail: "certificate directory"},
		{name: "prefix", opts: []extensionserver.Option{img, extensionserver.WithHandlerPrefix("")}, option: "WithHandlerPrefix"},
		{name: "http limits", opts: []extensionserver.Option{img, extensionserver.WithHTTPLimits(extensionserver.HTTPLimits{MaxConcurrent: -1})},
			option: "WithHTTPLimits", detail: "MaxConcurrent -1: must be positive"},
		{name: "retry after", opts: []extensionserver.Option{img, extensionserver.WithRetryAfter(0)}, option: "WithRetryAfter", detail: "0: must be between 1 and 86400"},
		{name: "drain timeout", opts: []extensionserver.Option{img, extensionserver.WithDrainTimeout(-time.Minute)}, option: "WithDrainTimeout", detail: "-1m0s"},
		{name: "mode", opts: []extensionserver.Option{img, extensionserver.WithUpgraderMode("initcontainers")}, option: "WithUpgraderMode", detail: `"initcontainers": want InitContainers or SingleContainer`},
		{name: "single container without runner", opts: []extensionserver.Option{img, extensionserver.WithUpgraderMode(nodepod.ModeSingleContainer), extensionserver.WithUpgraderCommand()},
			option: "WithUpgraderMode", detail: "needs a runner"},
		{name: "empty runner argument", opts: []extensionserver.Option{img, extensionserver.WithUpgraderCommand("/upgrader", "")}, option: "WithUpgraderCommand", detail: "argument 1 is empty"},
		{name: "relative stage dir", opts: []extensionserver.Option{img, extensionserver.WithStageFrom("staging")}, option: "WithStageFrom", detail: `"staging": must be an absolute directory`},
		{name: "stage the whole image", opts: []extensionserver.Option{img, extensionserver.WithStageFrom("//")}, option: "WithStageFrom"},
		{name: "unskippable step", opts: []extensionserver.Option{img, extensionserver.WithSkipSteps(kubeadm.StepKubeadmUpgrade)}, option: "WithSkipSteps",
			detail: `"kubeadm-upgrade" cannot be skipped; only containerd, cni-plugins, etcd-snapshot can`},
		{name: "ignore every preflight check", opts: []extensionserver.Option{img, extensionserver.WithIgnorePreflightErrors("SystemVerification", "all")}, option: "WithIgnorePreflightErrors",
			cause: kubeadm.ErrInvalidConfig},
		{name: "a flag as a check name", opts: []extensionserver.Option{img, extensionserver.WithIgnorePreflightErrors("Swap --force")}, option: "WithIgnorePreflightErrors",
			cause: kubeadm.ErrInvalidConfig},
		{name: "namespace nodepod refuses", opts: []extensionserver.Option{img, extensionserver.WithUpgraderNamespace("Ops_Team")}, option: "WithPodOptions",
			cause: nodepod.ErrInvalidOptions},
		{name: "nil gate", opts: []extensionserver.Option{img, extensionserver.WithGates(nil)}, option: "WithGates", detail: "gate 0 is nil"},
		{name: "gates without UpdateMachine", opts: []extensionserver.Option{extensionserver.DecideOnly(), extensionserver.WithGates(strategy.Gates{})}, option: "WithGates",
			detail: "DecideOnly serves no UpdateMachine to gate"},
		{name: "pod option nodepod refuses", opts: []extensionserver.Option{img, extensionserver.WithPodOptions(nodepod.WithPriorityClass("Not A Name"))}, option: "WithPodOptions",
			cause: nodepod.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Unverified bundles: the checksum options have their own test.
			tc.opts = append([]extensionserver.Option{extensionserver.WithoutBundleChecksums()}, tc.opts...)
			err := extensionserver.Validate(tc.opts...)
			requireOptionError(t, err, tc.option, tc.detail, tc.cause)
			require.Less(t, len(err.Error()), 1024)
			// New refuses the same, before it needs a cluster.
			_, err = extensionserver.New(fakeclient.NewClientBuilder().Build(), append(tc.opts, metrics(t))...)
			var oe *extensionserver.OptionError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, tc.option, oe.Option)
		})
	}
}

// TestDecideOnly serves the two CanUpdate hooks without a management
// cluster or an image, and accepts any built-in category; the full server
// adds UpdateMachine and needs the management cluster reader.
func TestDecideOnly(t *testing.T) {
	s, err := extensionserver.New(nil, extensionserver.DecideOnly(), extensionserver.WithCategories(diff.CategoryKubernetesVersion, diff.CategoryFiles), metrics(t))
	require.NoError(t, err)
	require.Equal(t, []string{"upgradekit-can-update-machine", "upgradekit-can-update-machineset"}, names(s))

	_, err = extensionserver.New(nil, extensionserver.WithUpgraderImage("r/u@"+digestA), extensionserver.WithoutBundleChecksums(), metrics(t))
	var oe *extensionserver.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "New", oe.Option)
	require.Contains(t, err.Error(), "nil management cluster reader")

	s, err = extensionserver.New(fakeclient.NewClientBuilder().Build(), extensionserver.WithUpgraderImage("r/u@"+digestA), extensionserver.WithoutBundleChecksums(),
		extensionserver.WithHandlerPrefix("acme"), metrics(t))
	require.NoError(t, err)
	require.Equal(t, []string{"acme-can-update-machine", "acme-can-update-machineset", "acme-update-machine"}, names(s))
}

func names(s *extensionserver.Server) []string {
	var out []string
	for _, h := range s.Handlers() {
		out = append(out, h.Name)
	}
	return out
}

// TestPodAndPlan: the pod options and plan adjustments UpdateMachine uses
// follow the options: the image of the lowest version when there is a map
// (MachineUpdater sets each update's own), staging, runner, skips added to
// the ones already decided.
func TestPodAndPlan(t *testing.T) {
	mgmt := fakeclient.NewClientBuilder().Build()
	s, err := extensionserver.New(mgmt, metrics(t),
		extensionserver.WithUpgraderImages(capi.ImagesByVersion{"v1.37.0": "r/u@" + digestB, "v1.36.1": "r/u@" + digestA}),
		extensionserver.WithBundleChecksums(extensionserver.ChecksumsByVersion{"v1.36.1": kubernetesSums, "v1.37.0": kubernetesSums}),
		extensionserver.WithSkipSteps(kubeadm.StepContainerd, kubeadm.StepCNIPlugins),
		extensionserver.WithIgnorePreflightErrors("SystemVerification"),
		extensionserver.WithUpgraderNamespace("ops"))
	require.NoError(t, err)
	plan, err := kubeadm.NewPlan(func() kubeadm.Config {
		c := kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: "v1.35.4", ToVersion: "v1.36.1", SkipEtcdSnapshot: true}
		s.PlanConfig(&c)
		require.True(t, c.SkipContainerd)
		require.True(t, c.SkipCNIPlugins)
		require.True(t, c.SkipEtcdSnapshot, "a skip already decided stays")
		require.Equal(t, []string{"SystemVerification"}, c.IgnorePreflightErrors)
		require.True(t, c.RequireChecksums)
		require.Equal(t, kubernetesSums, c.Checksums, "the target version's checksums")
		return c
	}())
	require.NoError(t, err)
	pod, err := nodepod.Build(plan, s.PodOptions()...)
	require.NoError(t, err)
	require.Equal(t, "ops", pod.Namespace)
	var images, commands []string
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		images = append(images, c.Image)
		commands = append(commands, strings.Join(c.Command, " "))
	}
	for _, img := range images {
		require.Equal(t, "r/u@"+digestA, img)
	}
	require.Contains(t, strings.Join(commands, "\n"), "/upgrader run")
	require.Contains(t, strings.Join(commands, "\n"), extensionserver.DefaultStageFrom)
}

// TestStartRefusesAZeroServer: a Server not made by New is an error, not a
// panic.
func TestStartRefusesAZeroServer(t *testing.T) {
	var nilServer *extensionserver.Server
	require.ErrorIs(t, nilServer.Start(t.Context()), extensionserver.ErrInvalidOption)
	require.ErrorIs(t, (&extensionserver.Server{}).Start(t.Context()), extensionserver.ErrInvalidOption)
	require.Empty(t, (&extensionserver.Server{}).Handlers())
}

// TestReportGates: in process, the Server reports what its gates would
// answer about a cluster's machines, each checked against the management
// cluster; a DecideOnly Server has no gates to report.
func TestReportGates(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clusterv1.AddToScheme(s))
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-md-0-a"}, Spec: clusterv1.MachineSpec{ClusterName: "demo"}}
	mgmt := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(m).Build()
	yearly, err := strategy.MaintenanceWindow("new-year", "0 0 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	srv, err := extensionserver.New(mgmt, extensionserver.WithUpgraderImage("r/u@"+digestA), extensionserver.WithoutBundleChecksums(),
		extensionserver.WithGates(yearly), metrics(t))
	require.NoError(t, err)
	rep, err := srv.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, []string{"demo-md-0-a", "other"})
	require.NoError(t, err)
	require.Len(t, rep.Machines, 2)
	require.Equal(t, strategy.VerdictWait, rep.Machines[0].Verdict)
	require.Equal(t, "new-year", rep.Machines[0].Gates[0].Gate)
	require.Equal(t, "no Machine default/other of cluster demo", rep.Machines[1].Error)

	_, err = srv.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, nil)
	require.ErrorIs(t, err, gatereport.ErrInvalidRequest)

	decide, err := extensionserver.New(nil, extensionserver.DecideOnly(), metrics(t))
	require.NoError(t, err)
	_, err = decide.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, []string{"demo-md-0-a"})
	require.ErrorIs(t, err, extensionserver.ErrInvalidOption)
}
