package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// DefaultKubernetesVersion is the kube-apiserver version hack/envtest-assets.sh
	// builds by default; it matches the minor of the k8s.io/* modules in go.mod.
	DefaultKubernetesVersion = "v1.36.3"
	// DefaultEtcdVersion is the etcd version hack/envtest-assets.sh builds by default.
	DefaultEtcdVersion = "v3.6.14"

	// SkipEnvVar, when set to a non-empty value, makes [StartForTest] skip the
	// calling test without starting anything, binaries present or not
	// (`make unit`: the fast tests only). [RequireEnvVar] overrides it.
	SkipEnvVar = "UPGRADEKIT_SKIP_ENVTEST"

	// RequireEnvVar, when set to a non-empty value, makes [StartForTest]
	// fail the calling test when the binaries are missing, and never skip
	// it. Without it a missing binary skips the test with the reason and
	// the command that builds them, so `go test ./...` passes on a fresh
	// clone; `make test` and CI set it, so no test can be skipped there.
	RequireEnvVar = "UPGRADEKIT_REQUIRE_ENVTEST"

	// AssetsCommand is the command that builds the binaries and prints the
	// directory to put in KUBEBUILDER_ASSETS.
	AssetsCommand = "hack/envtest-assets.sh"
)

// ErrAssetsMissing is matched (errors.Is) by the error [Start] returns when
// the kube-apiserver or etcd binary cannot be found.
var ErrAssetsMissing = errors.New("envtest binaries missing")

// AssetsMissingError says where binaries were looked for and which are absent.
type AssetsMissingError struct {
	// Dir is the directory that was searched.
	Dir string
	// Source says where Dir came from (option, KUBEBUILDER_ASSETS or default cache).
	Source string
	// Missing lists the absent binaries.
	Missing []string
}

// Error says which binaries are missing, where they were looked for (and
// why there), and the command that builds them.
func (e *AssetsMissingError) Error() string {
	return fmt.Sprintf("envtest binaries missing: %s not found in %s (from %s); build them with "+
		"`export KUBEBUILDER_ASSETS=$(%s)` (in a checkout of upgradekit; from another module: "+
		"`bash $(go list -m -f '{{.Dir}}' github.com/upgradekit/upgradekit)/%s`), or `make test`, "+
		"or set %s=1 to skip tests that need them (without %s they skip on their own)",
		strings.Join(e.Missing, " and "), e.Dir, e.Source, AssetsCommand, AssetsCommand, SkipEnvVar, RequireEnvVar)
}

// Is reports whether target is ErrAssetsMissing.
func (e *AssetsMissingError) Is(target error) bool { return target == ErrAssetsMissing }

// Option configures [Start].
type Option func(*options)

type options struct {
	assetsDir    string
	crdPaths     []string
	crds         []*apiextensionsv1.CustomResourceDefinition
	noCAPICRDs   bool
	scheme       *runtime.Scheme
	log          logr.Logger
	startTimeout time.Duration
	attachOutput bool
}

// WithAssetsDir sets the directory holding kube-apiserver and etcd, taking
// precedence over KUBEBUILDER_ASSETS.
func WithAssetsDir(dir string) Option { return func(o *options) { o.assetsDir = dir } }

// WithCRDPaths installs the CRDs found in these files or directories as well,
// for example an infrastructure provider's.
func WithCRDPaths(paths ...string) Option {
	return func(o *options) { o.crdPaths = append(o.crdPaths, paths...) }
}

// WithCRDs installs these CRD objects as well.
func WithCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(o *options) { o.crds = append(o.crds, crds...) }
}

// WithoutCAPICRDs skips installing the Cluster API CRDs.
func WithoutCAPICRDs() Option { return func(o *options) { o.noCAPICRDs = true } }

// WithScheme makes the returned client use s instead of [NewScheme]'s.
func WithScheme(s *runtime.Scheme) Option { return func(o *options) { o.scheme = s } }

// WithLogger sets the logger for start-up and shutdown messages.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithStartTimeout bounds how long each of etcd and kube-apiserver may take
// to become ready (default 60s: a cold start on two busy cores can be slow).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithControlPlaneOutput copies the control plane's output to this process's
// stdout and stderr, for debugging start-up failures.
func WithControlPlaneOutput() Option { return func(o *options) { o.attachOutput = true } }

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client with Scheme.
	Client client.Client
	// Scheme knows core Kubernetes types and CAPI v1beta2 (or what
	// WithScheme set).
	Scheme *runtime.Scheme
	// AssetsDir is the directory the binaries were started from.
	AssetsDir string

	env *crenvtest.Environment
	log logr.Logger
}

// NewScheme returns a scheme with the core Kubernetes types, the
// apiextensions v1 types and Cluster API core, kubeadm bootstrap and kubeadm
// control plane v1beta2.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme,
		bootstrapv1.AddToScheme,
		controlplanev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building scheme: %w", err)
		}
	}
	return s, nil
}

// Start starts etcd and kube-apiserver, installs the CRDs and returns a
// client. Call Stop when done. ctx bounds locating the CRDs; the control
// plane itself keeps running until Stop.
func Start(ctx context.Context, opts ...Option) (*Env, error) {
	o := options{log: logr.Discard(), startTimeout: 60 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	dir, err := resolveAssets(o.assetsDir)
	if err != nil {
		return nil, err
	}
	paths := append([]string(nil), o.crdPaths...)
	crds := append([]*apiextensionsv1.CustomResourceDefinition(nil), o.crds...)
	if !o.noCAPICRDs {
		capi, err := capiCRDs(ctx)
		if err != nil {
			return nil, err
		}
		crds = append(crds, capi...)
	}
	scheme := o.scheme
	if scheme == nil {
		if scheme, err = NewScheme(); err != nil {
			return nil, err
		}
	}

	env := &crenvtest.Environment{
		BinaryAssetsDirectory: dir,
		// Conversion webhooks are not wanted: the CAPI CRDs serve v1beta1 and
		// v1beta2 with strategy None, and we only talk v1beta2. A scheme
		// without spokes keeps envtest from wiring webhooks in.
		Scheme:                   clientgoscheme.Scheme,
		CRDDirectoryPaths:        paths,
		CRDs:                     crds,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: o.startTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
		AttachControlPlaneOutput: o.attachOutput,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	o.log.Info("control plane started", "assets", dir, "crds", len(env.CRDs), "took", time.Since(start).Round(time.Millisecond))
	return &Env{Config: cfg, Client: c, Scheme: scheme, AssetsDir: dir, env: env, log: o.log}, nil
}

// Stop stops the control plane and removes its data directories. It is safe
// to call more than once.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	env := e.env
	e.env = nil
	if err := env.Stop(); err != nil {
		return fmt.Errorf("stopping control plane: %w", err)
	}
	e.log.Info("control plane stopped")
	return nil
}

// StartForTest starts a control plane for t and stops it in t.Cleanup.
// When the binaries are missing it skips t, saying which are missing and
// the command that builds them, unless the RequireEnvVar environment
// variable is set (`make test`, CI): then it fails t. With SkipEnvVar set
// (and RequireEnvVar not) it skips t without starting anything. Any other
// error fails t.
func StartForTest(t testing.TB, opts ...Option) *Env {
	t.Helper()
	required := os.Getenv(RequireEnvVar) != ""
	if !required && os.Getenv(SkipEnvVar) != "" {
		t.Skipf("%s is set: skipping a test that needs a real kube-apiserver and etcd (%s=1 runs it)", SkipEnvVar, RequireEnvVar)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := Start(ctx, opts...)
	if err != nil {
		if errors.Is(err, ErrAssetsMissing) && !required {
			t.Skipf("skipped: %v", err)
		}
		if errors.Is(err, ErrAssetsMissing) {
			t.Fatalf("envtest: %s is set: %v", RequireEnvVar, err)
		}
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest: %v", err)
		}
	})
	return env
}

// DefaultAssetsDir is where hack/envtest-assets.sh caches binaries for the
// default versions, honouring the same environment variables it does.
func DefaultAssetsDir() string {
	root := os.Getenv("UPGRADEKIT_ENVTEST_CACHE")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return ""
			}
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "upgradekit", "envtest")
	}
	return filepath.Join(root, "k8s-"+DefaultKubernetesVersion+"_etcd-"+DefaultEtcdVersion)
}

func resolveAssets(explicit string) (string, error) {
	dir, source := explicit, "WithAssetsDir"
	if dir == "" {
		dir, source = os.Getenv("KUBEBUILDER_ASSETS"), "KUBEBUILDER_ASSETS"
	}
	if dir == "" {
		dir, source = DefaultAssetsDir(), "the default cache of "+AssetsCommand
	}
	var missing []string
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		fi, err := os.Stat(filepath.Join(dir, bin))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return "", &AssetsMissingError{Dir: dir, Source: source, Missing: missing}
	}
	return dir, nil
}
