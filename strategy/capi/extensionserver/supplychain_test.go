package extensionserver_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

var (
	digestA = "sha256:" + strings.Repeat("a", 64)
	digestB = "sha256:" + strings.Repeat("b", 64)
	// kubernetesSums cover every plan without containerd and CNI: what
	// hack/bundle.sh builds by default (kubeadm, kubelet, kubectl and
	// etcdctl).
	kubernetesSums = map[string]string{
		kubeadm.StagedKubeadm: strings.Repeat("1", 64), kubeadm.StagedKubelet: strings.Repeat("2", 64), kubeadm.StagedKubectl: strings.Repeat("3", 64),
		kubeadm.StagedEtcdctl: strings.Repeat("4", 64),
	}
	// noTrees, as Options.SkipSteps, leaves out the steps kubernetesSums
	// carry nothing for.
	noTrees = []string{kubeadm.StepContainerd, kubeadm.StepCNIPlugins}
)

// logSink records what a logr.Logger logs.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestUpgraderImagesByDigest: an upgrader image reference without a digest
// is refused by Validate and New (capi.ErrInvalidOption, naming the
// option), unless AllowMutableUpgraderImages, which New logs. It failed
// before the fix: any string was accepted.
func TestUpgraderImagesByDigest(t *testing.T) {
	image := func(ref string) extensionserver.Options { return extensionserver.Options{UpgraderImage: ref} }
	images := func(m capi.ImagesByVersion) extensionserver.Options {
		return extensionserver.Options{UpdaterOptions: capi.UpdaterOptions{Images: m}}
	}
	for _, tc := range []struct {
		name   string
		opts   extensionserver.Options
		option string // "" when accepted
	}{
		{"a tag", image("registry.example/upgrader:v1.36.1"), "Options.UpgraderImage"},
		{"latest", image("registry.example/upgrader:latest"), "Options.UpgraderImage"},
		{"no tag", image("registry.example/upgrader"), "Options.UpgraderImage"},
		{"a short digest", image("registry.example/upgrader@sha256:abc"), "Options.UpgraderImage"},
		{"an uppercase digest", image("registry.example/upgrader@sha256:" + strings.Repeat("A", 64)), "Options.UpgraderImage"},
		{"a digest and then more", image("registry.example/upgrader@" + digestA + ":v1"), "Options.UpgraderImage"},
		{"one tag in a map", images(capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA, "v1.37.0": "r/u:v1.37.0"}), "UpdaterOptions.Images"},
		{"a digest", image("registry.example/upgrader@" + digestA), ""},
		{"a tag and a digest", image("registry.example:5000/upgrader:v1.36.1@" + digestA), ""},
		{"digests in a map", images(capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA, "v1.37.0": "r/u@" + digestB}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.AllowUnverifiedBundles = true
			err := extensionserver.Validate(tc.opts)
			_, errNew := extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, tc.opts))
			if tc.option == "" {
				require.NoError(t, err)
				require.NoError(t, errNew)
				return
			}
			for _, err := range []error{err, errNew} {
				requireOptionError(t, err, tc.option, "is not pinned by digest", nil)
			}
			// The explicit opt-out accepts it, and says so in the log.
			var log logSink
			mutable := tc.opts
			mutable.AllowMutableUpgraderImages = true
			require.NoError(t, extensionserver.Validate(mutable))
			mutable.Logger = log.logger()
			_, err = extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, mutable))
			require.NoError(t, err)
			require.Contains(t, log.String(), "upgrader images are not required to be pinned by digest (Options.AllowMutableUpgraderImages)")
		})
	}
}

// TestBundleChecksumsOptions: the extension refuses to run bundles it
// cannot verify unless told to (AllowUnverifiedBundles, logged); the
// checksums are checked when given, read from a directory of SHA256SUMS
// files (a mounted ConfigMap) by New, and each plan gets its target
// version's, required. It failed before the fix: there were no checksums.
func TestBundleChecksumsOptions(t *testing.T) {
	img := "r/u@" + digestA
	sums := func(m extensionserver.ChecksumsByVersion) extensionserver.Options {
		return extensionserver.Options{UpgraderImage: img, BundleChecksums: m}
	}
	for _, tc := range []struct {
		name   string
		opts   extensionserver.Options
		option string
		detail string
		cause  error
	}{
		// A nil map is "not set".
		{"none", sums(nil), "Options.BundleChecksums", "required", nil},
		{"two", extensionserver.Options{UpgraderImage: img, AllowUnverifiedBundles: true, BundleChecksumsDir: "/etc/sums"}, "Options.BundleChecksums", "set one", nil},
		{"three", extensionserver.Options{UpgraderImage: img, AllowUnverifiedBundles: true, BundleChecksumsDir: "/etc/sums",
			BundleChecksums: extensionserver.ChecksumsByVersion{"v1.36.1": kubernetesSums}}, "Options.BundleChecksums", "set one", nil},
		// A non-nil empty map is set, with no version.
		{"no version", sums(extensionserver.ChecksumsByVersion{}), "Options.BundleChecksums", "no version", nil},
		{"not a version", sums(extensionserver.ChecksumsByVersion{"1.31.1": kubernetesSums}),
			"Options.BundleChecksums", `version "1.31.1" is not a version`, nil},
		{"a version without checksums", sums(extensionserver.ChecksumsByVersion{"v1.36.1": {}}),
			"Options.BundleChecksums", "v1.36.1 has no checksum", nil},
		{"a bad checksum", sums(extensionserver.ChecksumsByVersion{"v1.36.1": {"kubernetes/kubeadm": "ABC"}}),
			"Options.BundleChecksums", "version v1.36.1", kubeadm.ErrInvalidConfig},
		{"a path out of staging", sums(extensionserver.ChecksumsByVersion{"v1.36.1": {"../usr/bin/kubeadm": strings.Repeat("1", 64)}}),
			"Options.BundleChecksums", "version v1.36.1", kubeadm.ErrInvalidConfig},
		{"an image version without checksums", extensionserver.Options{
			BundleChecksums: extensionserver.ChecksumsByVersion{"v1.36.1": kubernetesSums},
			UpdaterOptions:  capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA, "v1.37.0": "r/u@" + digestB}}},
			"Options.BundleChecksums", "upgrader image version v1.37.0 has no checksums", nil},
		{"a relative directory", extensionserver.Options{UpgraderImage: img, BundleChecksumsDir: "sums"}, "Options.BundleChecksumsDir", `"sums" is not an absolute path`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.SkipSteps = noTrees
			for _, err := range []error{
				extensionserver.Validate(tc.opts),
				func() error {
					_, err := extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, tc.opts))
					return err
				}(),
			} {
				requireOptionError(t, err, tc.option, tc.detail, tc.cause)
			}
		})
	}

	t.Run("from a directory", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "v1.36.1"), []byte(kubeadm.FormatChecksums(kubernetesSums)), 0o644))
		require.NoError(t, os.Mkdir(filepath.Join(dir, "..2026_11_27"), 0o755)) // a ConfigMap mount's
		require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not a version"), 0o644))
		mgmt := fakeclient.NewClientBuilder().Build()
		fromDir := extensionserver.Options{UpgraderImage: img, BundleChecksumsDir: dir, SkipSteps: noTrees}
		s, err := extensionserver.New(mgmt, withMetrics(t, fromDir))
		require.NoError(t, err)
		c := kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: "v1.35.4", ToVersion: "v1.36.1", SkipContainerd: true, SkipCNIPlugins: true}
		s.PlanConfig(&c)
		require.True(t, c.RequireChecksums)
		require.Equal(t, kubernetesSums, c.Checksums)
		p, err := kubeadm.NewPlan(c)
		require.NoError(t, err)
		require.Equal(t, kubeadm.StepBundle, p.Steps[0].Name)
		require.Equal(t, kubeadm.ChecksumsEnv, p.Steps[0].Env[0].Name)
		require.Equal(t, kubeadm.FormatChecksums(kubernetesSums), p.Steps[0].Env[0].Value, "the plan carries the checksums to the node")

		// A version without checksums cannot be planned: the update fails
		// before the node is touched.
		c = kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: "v1.36.1", ToVersion: "v1.37.0"}
		s.PlanConfig(&c)
		_, err = kubeadm.NewPlan(c)
		require.ErrorIs(t, err, kubeadm.ErrInvalidConfig)
		require.ErrorContains(t, err, "checksums: ")

		// New reads the files: a bad one, or a missing image version, fails.
		require.NoError(t, os.WriteFile(filepath.Join(dir, "v1.37.0"), []byte("not sha256sum output\n"), 0o644))
		_, err = extensionserver.New(mgmt, withMetrics(t, fromDir))
		require.ErrorIs(t, err, kubeadm.ErrInvalidConfig)
		require.ErrorContains(t, err, "Options.BundleChecksumsDir: file v1.37.0")
		require.NoError(t, os.Remove(filepath.Join(dir, "v1.37.0")))
		_, err = extensionserver.New(mgmt, withMetrics(t, extensionserver.Options{BundleChecksumsDir: dir, SkipSteps: noTrees,
			UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{"v1.36.1": "r/u@" + digestA, "v1.37.0": "r/u@" + digestB}}}))
		requireOptionError(t, err, "Options.BundleChecksumsDir", "upgrader image version v1.37.0 has no checksums", nil)
		_, err = extensionserver.New(mgmt, withMetrics(t, extensionserver.Options{UpgraderImage: img, BundleChecksumsDir: filepath.Join(dir, "missing")}))
		requireOptionError(t, err, "Options.BundleChecksumsDir", "", os.ErrNotExist)
	})

	t.Run("the opt-out is logged and requires nothing", func(t *testing.T) {
		var log logSink
		s, err := extensionserver.New(fakeclient.NewClientBuilder().Build(), extensionserver.Options{UpgraderImage: img, AllowUnverifiedBundles: true,
			UpdaterOptions: capi.UpdaterOptions{Logger: log.logger(), Metrics: metrics(t)}})
		require.NoError(t, err)
		require.Contains(t, log.String(), "upgrader bundles are not verified (Options.AllowUnverifiedBundles)")
		c := kubeadm.Config{Node: "n", Role: kubeadm.RoleWorker, FromVersion: "v1.35.4", ToVersion: "v1.36.1"}
		s.PlanConfig(&c)
		require.False(t, c.RequireChecksums)
		require.Empty(t, c.Checksums)
	})
}

// TestVersionWithoutChecksumsIsAFailure: CanUpdateMachine answers a
// version change to a version that has no bundle checksums (its update
// could not verify its bundle) with a Failure, which Cluster API asks
// again about once they are configured (a decline it would remember for a
// MachineSet for 24 hours), and accepts one that has them.
func TestVersionWithoutChecksumsIsAFailure(t *testing.T) {
	env := apiserver.StartForTest(t)
	machine := func(v string) clusterv1.Machine {
		return clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default"}, Spec: clusterv1.MachineSpec{
			ClusterName: "demo", Version: v, ProviderID: "test://m",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachine", Name: "m"},
		}}
	}
	live := machine("v1.35.4")
	require.NoError(t, env.Client.Create(t.Context(), &live))
	// The cluster's kubeconfig secret: a workload cluster the extension
	// can reach (WorkloadReachableCheck).
	kubeconfig, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(t.Context(), kubeconfig))
	mgmt := env.Client
	s, err := extensionserver.New(mgmt, withMetrics(t, extensionserver.Options{UpgraderImage: "r/u@" + digestA,
		BundleChecksums: extensionserver.ChecksumsByVersion{"v1.36.1": kubernetesSums}, SkipSteps: noTrees}))
	require.NoError(t, err)
	var can func(context.Context, *runtimehooksv1.CanUpdateMachineRequest, *runtimehooksv1.CanUpdateMachineResponse)
	for _, h := range s.Handlers() {
		if h.Name == "upgradekit-can-update-machine" {
			can = h.HandlerFunc.(func(context.Context, *runtimehooksv1.CanUpdateMachineRequest, *runtimehooksv1.CanUpdateMachineResponse))
		}
	}
	require.NotNil(t, can)
	infra := runtime.RawExtension{Raw: []byte(`{"kind":"TestMachine","spec":{"image":"node:v1"}}`)}
	ask := func(to string) *runtimehooksv1.CanUpdateMachineResponse {
		var resp runtimehooksv1.CanUpdateMachineResponse
		can(t.Context(), &runtimehooksv1.CanUpdateMachineRequest{
			Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.35.4"), InfrastructureMachine: infra},
			Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(to), InfrastructureMachine: infra},
		}, &resp)
		return &resp
	}
	resp := ask("v1.36.1")
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.True(t, resp.MachinePatch.IsDefined(), "accepted: %s", resp.Message)
	resp = ask("v1.36.2")
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	require.False(t, resp.MachinePatch.IsDefined(), "not accepted: %s", resp.Message)
	require.Contains(t, resp.Message, "no upgrader bundle checksums for v1.36.2 (have: v1.36.1)")
	require.Contains(t, resp.Message, capi.ErrVersionNotConfigured.Error())
}

// TestBundleMustCarryWhatTheStepsNeed: with bundle checksums (the list of
// what each version's bundle carries), a configuration whose plan steps
// need a staged binary or tree the bundle lacks is refused at start-up,
// naming the version, the path, the step and the option that leaves it
// out, instead of failing on a drained node. It failed before the fix:
// New accepted a bundle without etcdctl and without skipping the etcd
// snapshot, and the first control plane's update failed after the drain.
func TestBundleMustCarryWhatTheStepsNeed(t *testing.T) {
	sum := strings.Repeat("a", 64)
	with := func(paths ...string) map[string]string {
		m := maps.Clone(kubernetesSums)
		delete(m, kubeadm.StagedEtcdctl)
		for _, p := range paths {
			m[p] = sum
		}
		return m
	}
	etcd := kubeadm.StagedEtcdctl
	containerd := "containerd/usr/bin/containerd"
	cni := "cni-plugins/opt/cni/bin/loopback"
	for _, tc := range []struct {
		name    string
		sums    extensionserver.ChecksumsByVersion
		skip    []string
		refused string // "" accepted
	}{
		{"everything, nothing skipped", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd, containerd, cni)}, nil, ""},
		{"the default bundle, trees skipped", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd)}, []string{"containerd", "cni-plugins"}, ""},
		{"no etcdctl, everything skipped", extensionserver.ChecksumsByVersion{"v1.36.1": with()}, extensionserver.SkippableSteps(), ""},
		{"no etcdctl, the snapshot not skipped (the shipped Deployment before)", extensionserver.ChecksumsByVersion{"v1.36.1": with()}, []string{"containerd", "cni-plugins"},
			"version v1.36.1: the bundle carries no etcd/etcdctl, which the etcd-snapshot step needs (the bundle must carry it, or Options.SkipSteps with etcd-snapshot leaves the step out)"},
		{"no containerd tree", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd, cni)}, nil,
			"version v1.36.1: the bundle carries no containerd/ (a tree copied onto /), which the containerd step needs (the bundle must carry it, or Options.SkipSteps with containerd leaves the step out)"},
		{"no CNI tree", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd, containerd)}, []string{"etcd-snapshot"},
			"version v1.36.1: the bundle carries no cni-plugins/ (a tree copied onto /), which the cni-plugins step needs"},
		{"a file beside the tree is not the tree", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd, "cni-plugins.tar")}, []string{"containerd"},
			"the bundle carries no cni-plugins/"},
		{"no kubelet, which nothing skips", extensionserver.ChecksumsByVersion{"v1.36.1": func() map[string]string {
			m := with(etcd)
			delete(m, kubeadm.StagedKubelet)
			return m
		}()}, extensionserver.SkippableSteps(), "version v1.36.1: the bundle carries no kubernetes/kubelet, which the bundle step needs (the bundle must carry it)"},
		{"one version of two lacks etcdctl", extensionserver.ChecksumsByVersion{"v1.36.1": with(etcd), "v1.37.0": with()}, []string{"containerd", "cni-plugins"},
			"version v1.37.0: the bundle carries no etcd/etcdctl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := extensionserver.Options{UpgraderImage: "r/u@" + digestA, SkipSteps: tc.skip}
			dir := t.TempDir()
			for v, m := range tc.sums {
				require.NoError(t, os.WriteFile(filepath.Join(dir, v), []byte(kubeadm.FormatChecksums(m)), 0o644))
			}
			given, inDir := opts, opts
			given.BundleChecksums = tc.sums
			inDir.BundleChecksumsDir = dir
			for _, c := range []struct {
				option string
				err    error
			}{
				{"Options.BundleChecksums", extensionserver.Validate(given)},
				{"Options.BundleChecksums", func() error {
					_, err := extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, given))
					return err
				}()},
				// The directory is read by New only: Validate cannot see it.
				{"Options.BundleChecksumsDir", func() error {
					_, err := extensionserver.New(fakeclient.NewClientBuilder().Build(), withMetrics(t, inDir))
					return err
				}()},
			} {
				if tc.refused == "" {
					require.NoError(t, c.err)
					continue
				}
				requireOptionError(t, c.err, c.option, tc.refused, nil)
			}
		})
	}

	t.Run("AllowUnverifiedBundles lists nothing to check", func(t *testing.T) {
		require.NoError(t, extensionserver.Validate(extensionserver.Options{UpgraderImage: "r/u@" + digestA, AllowUnverifiedBundles: true}))
	})
}

// requireOptionError: err is a *capi.OptionError matching
// capi.ErrInvalidOption that names option, with detail in its Detail, and
// wraps cause (if any).
func requireOptionError(t *testing.T, err error, option, detail string, cause error) {
	t.Helper()
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	var oe *capi.OptionError
	require.ErrorAs(t, err, &oe, "%T is an *OptionError", err)
	require.Equal(t, option, oe.Option)
	require.Contains(t, oe.Detail, detail)
	if cause != nil {
		require.ErrorIs(t, err, cause)
	}
}
