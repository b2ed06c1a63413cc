package extensionserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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

// metrics are metrics on a registry of their own, for Options.Metrics: the
// default registers on controller-runtime's, once per process.
func metrics(t *testing.T) *capi.Metrics {
	t.Helper()
	m, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
	require.NoError(t, err)
	return m
}

// withMetrics is o with metrics(t).
func withMetrics(t *testing.T, o extensionserver.Options) extensionserver.Options {
	t.Helper()
	o.Metrics = metrics(t)
	return o
}

// TestValidateNamesTheOption: every option New refuses is refused with an
// *capi.OptionError naming it, matching capi.ErrInvalidOption (and the
// cause, when another package refused it).
func TestValidateNamesTheOption(t *testing.T) {
	img := "registry.example/upgrader@" + digestA
	for _, tc := range []struct {
		name   string
		opts   extensionserver.Options
		option string
		detail string
		cause  error
	}{
		// Options.validate
		{name: "management reader set", opts: extensionserver.Options{UpgraderImage: img,
			UpdaterOptions: capi.UpdaterOptions{ManagementReader: fakeclient.NewClientBuilder().Build()}},
			option: "UpdaterOptions.ManagementReader", detail: "must be nil"},
		{name: "no runner and a runner", opts: extensionserver.Options{UpgraderImage: img, NoUpgraderCommand: true, UpgraderCommand: []string{"/upgrader", "run"}},
			option: "Options.NoUpgraderCommand", detail: "and Options.UpgraderCommand are both set: set one"},
		{name: "no staging and a stage directory", opts: extensionserver.Options{UpgraderImage: img, NoStaging: true, StageFrom: "/staging"},
			option: "Options.NoStaging", detail: "and Options.StageFrom are both set: set one"},
		{name: "gates without UpdateMachine", opts: extensionserver.Options{DecideOnly: true,
			UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{strategy.Gates{}}}},
			option: "UpdaterOptions.Gates", detail: "configures UpdateMachine, which Options.DecideOnly does not serve"},
		{name: "drain settings without UpdateMachine", opts: extensionserver.Options{DecideOnly: true,
			UpdaterOptions: capi.UpdaterOptions{SkipDrain: true}},
			option: "UpdaterOptions.SkipDrain", detail: "configures UpdateMachine, which Options.DecideOnly does not serve"},
		{name: "a retry delay without UpdateMachine", opts: extensionserver.Options{DecideOnly: true,
			UpdaterOptions: capi.UpdaterOptions{RetryAfter: time.Minute}},
			option: "UpdaterOptions.RetryAfter", detail: "configures UpdateMachine, which Options.DecideOnly does not serve"},

		// config.validate: serving
		{name: "negative port", opts: extensionserver.Options{UpgraderImage: img, Port: -1}, option: "Options.Port", detail: "port -1: must be between 1 and 65535"},
		{name: "port too high", opts: extensionserver.Options{UpgraderImage: img, Port: 65536}, option: "Options.Port", detail: "port 65536"},
		{name: "http limits", opts: extensionserver.Options{UpgraderImage: img, HTTPLimits: extensionserver.HTTPLimits{MaxConcurrent: -1}},
			option: "Options.HTTPLimits", detail: "MaxConcurrent -1: must not be negative"},
		{name: "negative http timeout", opts: extensionserver.Options{UpgraderImage: img, HTTPLimits: extensionserver.HTTPLimits{IdleTimeout: -time.Second}},
			option: "Options.HTTPLimits", detail: "IdleTimeout -1000000000: must not be negative"},
		// config.validate: categories
		{name: "misspelt category", opts: extensionserver.Options{UpgraderImage: img, Categories: []diff.Category{"KubernetesVerison"}},
			option: "Options.Categories", detail: `unknown category "KubernetesVerison" (categories: `},
		{name: "misspelt category, decide only", opts: extensionserver.Options{DecideOnly: true, Categories: []diff.Category{"KubernetesVerison"}},
			option: "Options.Categories", detail: `unknown category "KubernetesVerison"`},
		{name: "category without executor", opts: extensionserver.Options{UpgraderImage: img, Categories: []diff.Category{diff.CategoryImage}},
			option: "Options.Categories", detail: "has no executor here"},
		// config.validate: the upgrader image
		{name: "no image", opts: extensionserver.Options{}, option: "Options.UpgraderImage", detail: "required"},
		{name: "blank image", opts: extensionserver.Options{UpgraderImage: "  "}, option: "Options.UpgraderImage", detail: "required"},
		{name: "both image forms", opts: extensionserver.Options{UpgraderImage: img,
			UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA}}},
			option: "Options.UpgraderImage", detail: "set one"},
		{name: "image map with a bad version", opts: extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"1.31": "r/u"}}},
			option: "UpdaterOptions.Images", cause: capi.ErrInvalidOption},
		{name: "empty image map", opts: extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{}}},
			option: "UpdaterOptions.Images"},
		// config.validate: the upgrader pod
		{name: "mode", opts: extensionserver.Options{UpgraderImage: img, UpgraderMode: "initcontainers"},
			option: "Options.UpgraderMode", detail: `"initcontainers": want InitContainers or SingleContainer`},
		{name: "single container without runner", opts: extensionserver.Options{UpgraderImage: img, UpgraderMode: nodepod.ModeSingleContainer, NoUpgraderCommand: true},
			option: "Options.UpgraderMode", detail: "needs a runner"},
		{name: "empty runner argument", opts: extensionserver.Options{UpgraderImage: img, UpgraderCommand: []string{"/upgrader", ""}},
			option: "Options.UpgraderCommand", detail: "argument 1 is empty"},
		{name: "relative stage dir", opts: extensionserver.Options{UpgraderImage: img, StageFrom: "staging"},
			option: "Options.StageFrom", detail: `"staging": must be an absolute directory`},
		{name: "stage the whole image", opts: extensionserver.Options{UpgraderImage: img, StageFrom: "//"}, option: "Options.StageFrom"},
		{name: "unskippable step", opts: extensionserver.Options{UpgraderImage: img, SkipSteps: []string{kubeadm.StepKubeadmUpgrade}}, option: "Options.SkipSteps",
			detail: `"kubeadm-upgrade" cannot be skipped; only containerd, cni-plugins, etcd-snapshot can`},
		{name: "ignore every preflight check", opts: extensionserver.Options{UpgraderImage: img, IgnorePreflightErrors: []string{"SystemVerification", "all"}},
			option: "Options.IgnorePreflightErrors", cause: kubeadm.ErrInvalidConfig},
		{name: "a flag as a check name", opts: extensionserver.Options{UpgraderImage: img, IgnorePreflightErrors: []string{"Swap --force"}},
			option: "Options.IgnorePreflightErrors", cause: kubeadm.ErrInvalidConfig},
		// config.validate: the updater's options, as NewMachineUpdater checks them
		{name: "namespace nodepod refuses", opts: extensionserver.Options{UpgraderImage: img, UpgraderNamespace: "Ops_Team"},
			option: "UpdaterOptions.PodOptions", cause: nodepod.ErrInvalidOptions},
		{name: "pod option nodepod refuses", opts: extensionserver.Options{UpgraderImage: img,
			UpdaterOptions: capi.UpdaterOptions{PodOptions: []nodepod.Option{nodepod.WithPriorityClass("Not A Name")}}},
			option: "UpdaterOptions.PodOptions", cause: nodepod.ErrInvalidOptions},
		{name: "nil gate", opts: extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{nil}}},
			option: "UpdaterOptions.Gates", detail: "gate 0 is nil"},
		{name: "retry after under a second", opts: extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{RetryAfter: 500 * time.Millisecond}},
			option: "UpdaterOptions.RetryAfter", detail: "500ms: must be at least 1s"},
		{name: "retry after not in whole seconds", opts: extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{RetryAfter: 1500 * time.Millisecond}},
			option: "UpdaterOptions.RetryAfter", detail: "1.5s: must be whole seconds"},
		{name: "negative drain attempt", opts: extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{DrainAttempt: -time.Second}},
			option: "UpdaterOptions.DrainAttempt", detail: "-1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Unverified bundles: the checksum options have their own test.
			tc.opts.AllowUnverifiedBundles = true
			err := extensionserver.Validate(tc.opts)
			requireOptionError(t, err, tc.option, tc.detail, tc.cause)
			require.Less(t, len(err.Error()), 1024)
			// New refuses the same, before it needs a cluster.
			_, err = extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, tc.opts))
			var oe *capi.OptionError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, tc.option, oe.Option)
		})
	}
}

// TestZeroIsTheDefault: a zero field is its default, not a mistake (the
// empty certificate directory, handler prefix and category list, port 0
// and RetryAfter 0 were errors of the functional options), and the
// embedded deadlines keep capi's meaning: negative is no deadline. The old
// upper bound of a day on RetryAfter is gone.
func TestZeroIsTheDefault(t *testing.T) {
	img := "registry.example/upgrader@" + digestA
	for _, tc := range []struct {
		name string
		opts extensionserver.Options
	}{
		{"everything zero but the image", extensionserver.Options{UpgraderImage: img}},
		{"port 0, no cert dir, no prefix", extensionserver.Options{UpgraderImage: img, Port: 0, CertDir: "", HandlerPrefix: ""}},
		{"nil categories", extensionserver.Options{UpgraderImage: img, Categories: nil}},
		{"no category", extensionserver.Options{UpgraderImage: img, Categories: []diff.Category{}}},
		{"retry after 0", extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{RetryAfter: 0}}},
		{"retry after two days", extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{RetryAfter: 48 * time.Hour}}},
		{"no drain deadline", extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{DrainTimeout: -time.Minute}}},
		{"no unreachable deadline", extensionserver.Options{UpgraderImage: img, UpdaterOptions: capi.UpdaterOptions{WorkloadUnreachableTimeout: -1}}},
		{"nsenter without staging", extensionserver.Options{UpgraderImage: img, NoUpgraderCommand: true, NoStaging: true}},
		{"decide only, with what both sides share", extensionserver.Options{DecideOnly: true, UpdaterOptions: capi.UpdaterOptions{
			Images: capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.AllowUnverifiedBundles = !tc.opts.DecideOnly
			require.NoError(t, extensionserver.Validate(tc.opts))
			s, err := extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, tc.opts))
			require.NoError(t, err)
			require.Equal(t, "upgradekit-can-update-machine", names(s)[0], "the default prefix")
			if !tc.opts.DecideOnly {
				require.Len(t, names(s), 3)
			}
		})
	}
}

// TestDecideOnly serves the two CanUpdate hooks without a management
// cluster or an image, and accepts any built-in category; the full server
// adds UpdateMachine and needs the management cluster reader.
func TestDecideOnly(t *testing.T) {
	var log logSink
	s, err := extensionserver.New(nil, extensionserver.Options{DecideOnly: true,
		Categories: []diff.Category{diff.CategoryKubernetesVersion, diff.CategoryFiles},
		// What CanUpdate* uses of the embedded options.
		UpdaterOptions: capi.UpdaterOptions{Metrics: metrics(t), Logger: log.logger(), Images: capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA}}})
	require.NoError(t, err)
	require.Equal(t, []string{"upgradekit-can-update-machine", "upgradekit-can-update-machineset"}, names(s))

	_, err = extensionserver.New(nil, withMetrics(t, extensionserver.Options{UpgraderImage: "r/u@" + digestA, AllowUnverifiedBundles: true}))
	var oe *capi.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "New", oe.Option)
	require.Contains(t, err.Error(), "nil management cluster reader")

	s, err = extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, extensionserver.Options{UpgraderImage: "r/u@" + digestA, AllowUnverifiedBundles: true,
		HandlerPrefix: "acme"}))
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
// the ones already decided, UpdaterOptions.PodOptions after the server's
// own, UpdaterOptions.PlanConfig after the server's adjustments.
func TestPodAndPlan(t *testing.T) {
	mgmt := fakeclient.NewClientBuilder().Build()
	s, err := extensionserver.New(mgmt, extensionserver.Options{
		BundleChecksums:       extensionserver.ChecksumsByVersion{"v1.36.1": kubernetesSums, "v1.37.0": kubernetesSums},
		SkipSteps:             []string{kubeadm.StepContainerd, kubeadm.StepCNIPlugins},
		IgnorePreflightErrors: []string{"SystemVerification"},
		UpgraderNamespace:     "ops",
		UpdaterOptions: capi.UpdaterOptions{
			Metrics:    metrics(t),
			Images:     capi.ImagesByVersion{"v1.37.0": "r/u@" + digestB, "v1.36.1": "r/u@" + digestA},
			PodOptions: []nodepod.Option{nodepod.WithPriorityClass("system-node-critical")},
			PlanConfig: func(c *kubeadm.Config) {
				require.True(t, c.RequireChecksums, "after the server's adjustments")
				c.IgnorePreflightErrors = append(c.IgnorePreflightErrors, "Swap")
			},
		},
	})
	require.NoError(t, err)
	plan, err := kubeadm.NewPlan(func() kubeadm.Config {
		c := kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: "v1.35.4", ToVersion: "v1.36.1", SkipEtcdSnapshot: true}
		s.PlanConfig(&c)
		require.True(t, c.SkipContainerd)
		require.True(t, c.SkipCNIPlugins)
		require.True(t, c.SkipEtcdSnapshot, "a skip already decided stays")
		require.Equal(t, []string{"SystemVerification", "Swap"}, c.IgnorePreflightErrors)
		require.True(t, c.RequireChecksums)
		require.Equal(t, kubernetesSums, c.Checksums, "the target version's checksums")
		return c
	}())
	require.NoError(t, err)
	pod, err := nodepod.Build(plan, s.PodOptions()...)
	require.NoError(t, err)
	require.Equal(t, "ops", pod.Namespace)
	require.Equal(t, "system-node-critical", pod.Spec.PriorityClassName)
	cnames, images, commands := podContainers(pod)
	for _, img := range images {
		require.Equal(t, "r/u@"+digestA, img)
	}
	require.Contains(t, commands, "/upgrader run")
	require.Contains(t, cnames, nodepod.StageContainer)
	require.Contains(t, commands, extensionserver.DefaultStageFrom)

	t.Run("no runner, no staging", func(t *testing.T) {
		s, err := extensionserver.New(mgmt, withMetrics(t, extensionserver.Options{UpgraderImage: "r/u@" + digestA, AllowUnverifiedBundles: true,
			NoUpgraderCommand: true, NoStaging: true}))
		require.NoError(t, err)
		pod, err := nodepod.Build(plan, s.PodOptions()...)
		require.NoError(t, err)
		cnames, _, commands := podContainers(pod)
		require.NotContains(t, cnames, nodepod.StageContainer)
		require.NotContains(t, commands, "/upgrader run")
		require.Contains(t, commands, "nsenter --target 1")
	})
}

// podContainers lists the names and images of the pod's containers, init
// containers first, and their commands one a line.
func podContainers(pod *corev1.Pod) (names, images []string, commands string) {
	var cmds []string
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		names = append(names, c.Name)
		images = append(images, c.Image)
		cmds = append(cmds, strings.Join(c.Command, " "))
	}
	return names, images, strings.Join(cmds, "\n")
}

// TestStartRefusesAZeroServer: a Server not made by New is an error, not a
// panic.
func TestStartRefusesAZeroServer(t *testing.T) {
	var nilServer *extensionserver.Server
	require.ErrorIs(t, nilServer.Start(t.Context()), capi.ErrInvalidOption)
	require.ErrorIs(t, (&extensionserver.Server{}).Start(t.Context()), capi.ErrInvalidOption)
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
	srv, err := extensionserver.New(mgmt, extensionserver.Options{UpgraderImage: "r/u@" + digestA, AllowUnverifiedBundles: true,
		UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{yearly}, Metrics: metrics(t)}})
	require.NoError(t, err)
	rep, err := srv.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, []string{"demo-md-0-a", "other"})
	require.NoError(t, err)
	require.Len(t, rep.Machines, 2)
	require.Equal(t, strategy.VerdictWait, rep.Machines[0].Verdict)
	require.Equal(t, "new-year", rep.Machines[0].Gates[0].Gate)
	require.Equal(t, "no Machine default/other of cluster demo", rep.Machines[1].Error)

	_, err = srv.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, nil)
	require.ErrorIs(t, err, gatereport.ErrInvalidRequest)

	decide, err := extensionserver.New(nil, withMetrics(t, extensionserver.Options{DecideOnly: true}))
	require.NoError(t, err)
	_, err = decide.ReportGates(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo"}, []string{"demo-md-0-a"})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}
