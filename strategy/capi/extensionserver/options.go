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
	limits                HTTPLimits

	cats       []diff.Category
	decideOnly bool

	image           string
	images          capi.ImagesByVersion
	namespace       string
	createNamespace bool
	runner          []string
	mode            nodepod.Mode
	stageFrom       string
	skip            []string
	ignorePreflight []string
	extraPodOptions []nodepod.Option
	drain           bool
	drainTimeout    time.Duration
	unreachable     time.Duration
	retryAfter      int
	scheme          *runtime.Scheme
	recorder        events.EventRecorder
	log             logr.Logger
	metrics         *capi.Metrics
	checks          []capi.Check
	gates           []strategy.Gate

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
		limits:          DefaultHTTPLimits(),
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
		unreachable:     capi.DefaultWorkloadUnreachableTimeout,
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
// after the server's own. HTTP/2 stays off: "h2" is taken out of
// NextProtos after them.
func WithTLSOptions(opts ...func(*tls.Config)) Option {
	return func(c *config) { c.tlsOpts = append(c.tlsOpts, opts...) }
}

// HTTPLimits bound what callers of the hooks can make Start's server hold.
// The hooks' port is reachable by whatever the network lets through
// (deploy/extension.yaml's NetworkPolicy admits only Cluster API's
// controllers) and Cluster API's client authenticates nobody, so these
// hold for any caller: together they cap the memory requests can pin at
// about MaxConcurrent × MaxRequestBytes (each body is buffered once by
// Cluster API's handler, then decoded) plus a few KiB per open connection.
// They apply to Start only; a server of your own fed with Handlers has its
// own limits.
type HTTPLimits struct {
	// MaxRequestBytes is the largest request body read; a body announced
	// larger is answered 413 before any of it is read, a chunked or longer
	// one 413 once this much is read (default DefaultMaxRequestBytes).
	MaxRequestBytes int64
	// MaxConcurrent is how many requests are handled at once; more are
	// answered 429 Too Many Requests, Retry-After: 1, which Cluster API
	// retries (default DefaultMaxConcurrentRequests).
	MaxConcurrent int
	// MaxHeaderBytes bounds a request's header block
	// (http.Server.MaxHeaderBytes; default DefaultMaxHeaderBytes).
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the TLS handshake and reading a request's
	// header (default DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included: a body
	// trickled in slower is cut and the connection closed (default
	// DefaultReadTimeout).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its header to the end
	// of its answer: reading the body, the handler and writing the
	// answer (default DefaultWriteTimeout; at least the longest handler
	// timeout announced in discovery plus ReadTimeout).
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request (default DefaultIdleTimeout).
	IdleTimeout time.Duration
}

// The defaults of HTTPLimits.
const (
	// DefaultMaxRequestBytes is 2 MiB: a CanUpdateMachine request
	// carrying the current and desired Machine, infrastructure machine
	// and KubeadmConfig, with 40 files of 4 KiB (certificates, manifests,
	// scripts), 40 commands, 5 users with SSH keys and 20 API server
	// arguments in each KubeadmConfig, is 360 KiB
	// (TestMaxRequestBytesFitsBigKubeadmConfigs measures it): more than
	// five times that fits. Cluster API's own handler reads up to 20 MiB.
	DefaultMaxRequestBytes = 2 << 20
	// DefaultMaxConcurrentRequests is 16: more hook calls at once than
	// Cluster API's controllers make in practice (a 429 is retried), and
	// 16 bodies of DefaultMaxRequestBytes, decoded, stay well inside the
	// Deployment's 256Mi.
	DefaultMaxConcurrentRequests = 16
	// DefaultMaxHeaderBytes is 32 KiB; Cluster API's requests send a few
	// hundred bytes of header.
	DefaultMaxHeaderBytes = 32 << 10
	// DefaultReadHeaderTimeout is 10 seconds.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout is 10 seconds, Cluster API's default handler
	// timeout: a body that takes longer to arrive has no one waiting for
	// its answer.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout is 45 seconds: UpdateMachine's 30 second
	// handler timeout (capi.HandlerTimeoutUpdateMachine) after a body
	// read within DefaultReadTimeout, and 5 seconds to answer.
	DefaultWriteTimeout = 45 * time.Second
	// DefaultIdleTimeout is 60 seconds.
	DefaultIdleTimeout = 60 * time.Second
)

// DefaultHTTPLimits are the limits Start serves with unless WithHTTPLimits
// changes them.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		MaxRequestBytes:   DefaultMaxRequestBytes,
		MaxConcurrent:     DefaultMaxConcurrentRequests,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
	}
}

// WithHTTPLimits sets the limits of Start's server; a zero field keeps its
// default (there is no "unlimited"), a negative one is refused.
func WithHTTPLimits(l HTTPLimits) Option {
	return func(c *config) {
		d := DefaultHTTPLimits()
		c.limits = HTTPLimits{
			MaxRequestBytes:   orDefault(l.MaxRequestBytes, d.MaxRequestBytes),
			MaxConcurrent:     orDefault(l.MaxConcurrent, d.MaxConcurrent),
			MaxHeaderBytes:    orDefault(l.MaxHeaderBytes, d.MaxHeaderBytes),
			ReadHeaderTimeout: orDefault(l.ReadHeaderTimeout, d.ReadHeaderTimeout),
			ReadTimeout:       orDefault(l.ReadTimeout, d.ReadTimeout),
			WriteTimeout:      orDefault(l.WriteTimeout, d.WriteTimeout),
			IdleTimeout:       orDefault(l.IdleTimeout, d.IdleTimeout),
		}
	}
}

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v == 0 {
		return d
	}
	return v
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
// version not listed is answered with a Failure at CanUpdate*
// (capi.ExtensionOptions.Images, capi.ErrVersionNotConfigured): Cluster API
// waits and asks again, and goes on in place once the version is listed.
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
// bundle need not carry their component; SkippableSteps lists which. With
// bundle checksums (WithBundleChecksums, WithBundleChecksumsDir), which
// list what each version's bundle carries, a step that is not skipped
// and whose binary or tree a bundle lacks (etcd-snapshot without
// etcd/etcdctl, containerd without a containerd/ tree, cni-plugins
// without a cni-plugins/ tree) is refused at start-up.
func WithSkipSteps(steps ...string) Option {
	return func(c *config) { c.skip = append(c.skip, steps...) }
}

// WithIgnorePreflightErrors names kubeadm preflight checks every
// `kubeadm upgrade` may fail (kubeadm.Config.IgnorePreflightErrors): for
// example SystemVerification on cgroup v1 nodes, which kubeadm >= v1.35
// refuses even when the kubelet allows cgroup v1. "all" is refused.
func WithIgnorePreflightErrors(checks ...string) Option {
	return func(c *config) { c.ignorePreflight = append(c.ignorePreflight, checks...) }
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

// WithWorkloadUnreachableTimeout sets how long UpdateMachine answers "in
// progress" while it cannot reach the machine's workload cluster (its
// kubeconfig secret unreadable or missing, its API server not answering)
// before it answers Failure naming why (default
// capi.DefaultWorkloadUnreachableTimeout; 0: no deadline; see
// capi.UpdaterOptions.WorkloadUnreachableTimeout).
func WithWorkloadUnreachableTimeout(d time.Duration) Option {
	return func(c *config) { c.unreachable = d }
}

// WithRetryAfter sets the seconds Cluster API waits between UpdateMachine
// calls while a node upgrades (default DefaultRetryAfter; 1 to 86400).
func WithRetryAfter(seconds int) Option { return func(c *config) { c.retryAfter = seconds } }

// WithScheme sets the scheme of the workload cluster clients (default:
// client-go's).
func WithScheme(s *runtime.Scheme) Option { return func(c *config) { c.scheme = s } }

// WithEventRecorder records Events in the management cluster, such as a
// controller-runtime manager's GetEventRecorder gives: the update's
// progress on each Machine, and, so that `kubectl describe` of the
// MachineDeployment or KubeadmControlPlane says why a rollout stopped,
// failures on those too: a failed update (capi.UpdaterOptions.EventRecorder) and a
// CanUpdate* Failure, such as an unknown ExtensionConfig setting
// (capi.ExtensionOptions.EventRecorder). Both need New's management cluster
// reader; without one (DecideOnly with a nil reader) none are recorded.
func WithEventRecorder(r events.EventRecorder) Option { return func(c *config) { c.recorder = r } }

// WithLogger sets the logger of the hooks and the server (default: none).
func WithLogger(l logr.Logger) Option { return func(c *config) { c.log = l } }

// WithMetrics sets the Prometheus metrics (default: capi.NewMetrics on
// controller-runtime's registry, which a manager's metrics server serves).
func WithMetrics(m *capi.Metrics) Option { return func(c *config) { c.metrics = m } }

// WithGates asks gates before each in-place update starts, before
// anything is done to the node (capi.UpdaterOptions.Gates): gates.Concurrency,
// SoakGate, WorkloadsGate, ControlPlaneGate, BreakerGate, AlertGate,
// PodBlockerGate, strategy.MaintenanceWindow, or your own. A nil gate is
// refused; with DecideOnly there is no update to gate, so gates are
// refused too.
func WithGates(gates ...strategy.Gate) Option {
	return func(c *config) { c.gates = append(c.gates, gates...) }
}

// WithChecks adds feasibility checks to CanUpdate*, after the built-in
// ones (capi.ExtensionOptions.Checks). With a management cluster reader,
// capi.ControlPlaneSkewCheck is always one of them.
func WithChecks(checks ...capi.Check) Option {
	return func(c *config) { c.checks = append(c.checks, checks...) }
}
