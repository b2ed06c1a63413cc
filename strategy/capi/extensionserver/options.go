package extensionserver

import (
	"crypto/tls"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// Option configures New and Validate.
type Option func(*config)

// config is what the options set; defaults() gives its starting point.
type config struct {
	host, certDir, prefix string
	port                  int
	tlsOpts               []func(*tls.Config)

	cats       []diff.Category
	decideOnly bool

	image            string
	images           capi.ImagesByVersion
	namespace        string
	createNamespace  bool
	runner           []string
	mode             nodepod.Mode
	stageFrom        string
	skip             []string
	extraPodOptions  []nodepod.Option
	drain            bool
	drainTimeout     time.Duration
	retryAfter       int
	scheme           *runtime.Scheme
	recorder         events.EventRecorder
	log              logr.Logger
	metrics          *capi.Metrics
	checks           []capi.Check
	gates            []strategy.Gate
	extensionOptions []capi.ExtensionOption
	updaterOptions   []capi.MachineUpdaterOption

	// Supply chain of the upgrader pods (supplychain.go).
	allowMutableImages bool
	checksums          ChecksumsByVersion
	checksumsSet       bool
	checksumsDir       string
	withoutChecksums   bool
}

// The defaults, which fit the upgrader image examples/upgrader builds (its
// Dockerfile's bundle target): the runner at /upgrader, the Kubernetes
// binaries under /staging.
const (
	// DefaultPort is the port the hooks are served on.
	DefaultPort = 9443
	// DefaultCertDir holds tls.crt and tls.key (controller-runtime's
	// webhook default, where cert-manager's secret is usually mounted).
	DefaultCertDir = "/tmp/k8s-webhook-server/serving-certs"
	// DefaultHandlerPrefix prefixes the handler names in the ExtensionConfig.
	DefaultHandlerPrefix = "upgradekit"
	// DefaultStageFrom is the directory of the upgrader image copied to the
	// node's staging directory before the first step.
	DefaultStageFrom = "/staging"
	// DefaultRetryAfter is how many seconds Cluster API waits between
	// UpdateMachine calls while a node upgrades.
	DefaultRetryAfter = 15
)

// DefaultUpgraderCommand is the runner command in the upgrader image.
func DefaultUpgraderCommand() []string { return []string{"/upgrader", "run"} }

func defaults() config {
	return config{
		port:            DefaultPort,
		certDir:         DefaultCertDir,
		prefix:          DefaultHandlerPrefix,
		cats:            capiKubeadmCategories(),
		namespace:       nodepod.DefaultNamespace,
		createNamespace: true,
		runner:          DefaultUpgraderCommand(),
		mode:            nodepod.ModeInitContainers,
		stageFrom:       DefaultStageFrom,
		drain:           true,
		drainTimeout:    capi.DefaultDrainTimeout,
		retryAfter:      DefaultRetryAfter,
	}
}

// WithServing sets where the hooks are served: host ("" for all
// addresses), port (default DefaultPort) and the directory holding tls.crt
// and tls.key (default DefaultCertDir).
func WithServing(host string, port int, certDir string) Option {
	return func(c *config) { c.host, c.port, c.certDir = host, port, certDir }
}

// WithTLSOptions adds functions that adjust the server's TLS configuration,
// after the server's own (HTTP/1.1 only).
func WithTLSOptions(opts ...func(*tls.Config)) Option {
	return func(c *config) { c.tlsOpts = append(c.tlsOpts, opts...) }
}

// WithHandlerPrefix sets the prefix of the handler names (default
// DefaultHandlerPrefix); Cluster API's ExtensionConfig lists them as
// <prefix>-can-update-machine.<extension config name> and so on.
func WithHandlerPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithCategories sets the diff categories accepted in place (default: the
// Kubernetes version, strategy.KubeadmCategories). With UpdateMachine
// served (the default) only categories it applies and verifies are
// allowed; with DecideOnly any built-in category is. An unknown name is an
// error: a misspelt category would decline every change and have Cluster
// API replace every machine.
func WithCategories(cats ...diff.Category) Option {
	return func(c *config) { c.cats = append([]diff.Category(nil), cats...) }
}

// DecideOnly serves only CanUpdateMachine and CanUpdateMachineSet: another
// extension answers UpdateMachine and applies what these accept. New then
// needs no management cluster reader and no upgrader image.
func DecideOnly() Option { return func(c *config) { c.decideOnly = true } }

// WithUpgraderImage sets the image of every upgrader pod: a bundle with the
// target version's kubeadm, kubelet and kubectl under the stage directory
// (WithStageFrom). Set it or WithUpgraderImages, not both. The reference
// must name the image by digest ("registry.example/upgrader@sha256:<64
// hex>", a tag before the digest allowed) unless
// AllowMutableUpgraderImages: a tag can be moved to other content after
// the extension was configured.
func WithUpgraderImage(image string) Option { return func(c *config) { c.image = image } }

// WithUpgraderImages sets the upgrader image per Kubernetes version: each
// update runs its target version's bundle, and a version change to a
// version not listed is declined at CanUpdate* (capi.WithUpgraderImages).
// Every image must be named by digest, as for WithUpgraderImage.
func WithUpgraderImages(images capi.ImagesByVersion) Option {
	return func(c *config) {
		c.images = make(capi.ImagesByVersion, len(images))
		for v, img := range images {
			c.images[v] = img
		}
	}
}

// WithUpgraderNamespace sets the namespace of the upgrader pods in the
// workload clusters (default nodepod.DefaultNamespace).
func WithUpgraderNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithoutNamespaceCreation leaves the upgrader namespace to the workload
// cluster's owner: by default a missing one is created, labelled for the
// privileged Pod Security Standard the upgrader pod needs (EnsureNamespace).
func WithoutNamespaceCreation() Option { return func(c *config) { c.createNamespace = false } }

// WithUpgraderCommand sets the runner command in the upgrader image
// (default DefaultUpgraderCommand), which reads the plan from the pod's
// UPGRADEKIT_* environment. No arguments runs each step's argv through
// nsenter instead (no journal, retries or rollback).
func WithUpgraderCommand(argv ...string) Option {
	return func(c *config) { c.runner = append([]string(nil), argv...) }
}

// WithUpgraderMode sets the upgrader pod's layout (default
// nodepod.ModeInitContainers).
func WithUpgraderMode(m nodepod.Mode) Option { return func(c *config) { c.mode = m } }

// WithStageFrom sets the directory of the upgrader image that the pod's
// stage container copies to the node's staging directory before the first
// step (default DefaultStageFrom); "" when the nodes have the binaries
// there already.
func WithStageFrom(dir string) Option { return func(c *config) { c.stageFrom = dir } }

// WithSkipSteps leaves kubeadm plan steps out of every update, so the
// bundle need not carry their component; SkippableSteps lists which.
func WithSkipSteps(steps ...string) Option {
	return func(c *config) { c.skip = append(c.skip, steps...) }
}

// WithPodOptions adds nodepod options to every upgrader pod, after the
// ones the other options make (image, namespace, mode, runner, staging):
// tolerations, image pull secrets, resources, a priority class.
func WithPodOptions(opts ...nodepod.Option) Option {
	return func(c *config) { c.extraPodOptions = append(c.extraPodOptions, opts...) }
}

// WithoutDrain upgrades nodes without cordoning and draining them first.
func WithoutDrain() Option { return func(c *config) { c.drain = false } }

// WithDrainTimeout sets how long a drain may stay unfinished before
// UpdateMachine answers Failure naming the blocking PodDisruptionBudgets
// (default capi.DefaultDrainTimeout; 0: no deadline).
func WithDrainTimeout(d time.Duration) Option { return func(c *config) { c.drainTimeout = d } }

// WithRetryAfter sets the seconds Cluster API waits between UpdateMachine
// calls while a node upgrades (default DefaultRetryAfter; 1 to 86400).
func WithRetryAfter(seconds int) Option { return func(c *config) { c.retryAfter = seconds } }

// WithScheme sets the scheme of the workload cluster clients (default:
// client-go's).
func WithScheme(s *runtime.Scheme) Option { return func(c *config) { c.scheme = s } }

// WithEventRecorder records Events on Machines in the management cluster,
// such as a controller-runtime manager's GetEventRecorder gives.
func WithEventRecorder(r events.EventRecorder) Option { return func(c *config) { c.recorder = r } }

// WithLogger sets the logger of the hooks and the server (default: none).
func WithLogger(l logr.Logger) Option { return func(c *config) { c.log = l } }

// WithMetrics sets the Prometheus metrics (default: capi.NewMetrics on
// controller-runtime's registry, which a manager's metrics server serves).
func WithMetrics(m *capi.Metrics) Option { return func(c *config) { c.metrics = m } }

// WithGates asks gates before each in-place update starts, before
// anything is done to the node (capi.WithGates): capi.ConcurrencyGate,
// SoakGate, WorkloadsGate, ControlPlaneGate, BreakerGate, AlertGate,
// PodBlockerGate, strategy.MaintenanceWindow, or your own. A nil gate is
// refused; with DecideOnly there is no update to gate, so gates are
// refused too.
func WithGates(gates ...strategy.Gate) Option {
	return func(c *config) { c.gates = append(c.gates, gates...) }
}

// WithChecks adds feasibility checks to CanUpdate*, after the built-in
// ones (capi.WithChecks). With a management cluster reader,
// capi.ControlPlaneSkewCheck is always one of them.
func WithChecks(checks ...capi.Check) Option {
	return func(c *config) { c.checks = append(c.checks, checks...) }
}

// WithExtensionOptions passes options to capi.NewExtension, after the ones
// New makes.
func WithExtensionOptions(opts ...capi.ExtensionOption) Option {
	return func(c *config) { c.extensionOptions = append(c.extensionOptions, opts...) }
}

// WithUpdaterOptions passes options to capi.NewMachineUpdater, after the
// ones New makes.
func WithUpdaterOptions(opts ...capi.MachineUpdaterOption) Option {
	return func(c *config) { c.updaterOptions = append(c.updaterOptions, opts...) }
}
