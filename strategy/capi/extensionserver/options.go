package extensionserver

import (
	"crypto/tls"
	"maps"
	"reflect"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// Options configure New and Validate. The zero value of every field is its
// default, so Options{UpgraderImage: ..., BundleChecksumsDir: ...} is a
// complete configuration. The embedded capi.UpdaterOptions configure
// UpdateMachine, and some of them CanUpdate* too:
//
//   - Images (an upgrader image per Kubernetes version, instead of
//     UpgraderImage) is given once and used by both sides: CanUpdate*
//     answers a version without an image with a Failure
//     (capi.ErrVersionNotConfigured), UpdateMachine runs each update with
//     its target version's image;
//   - Logger, EventRecorder and Metrics serve both sides (Metrics default:
//     capi.NewMetrics on controller-runtime's registry, which a manager's
//     metrics server serves);
//   - PodOptions are added to every upgrader pod after the ones the
//     upgrader fields here make (image, namespace, mode, runner, staging):
//     tolerations, image pull secrets, resources, a priority class;
//   - PlanConfig runs after the server's own adjustments (Server.PlanConfig);
//   - Clientset defaults to the workload clusters' kubeconfig secrets read
//     through New's management reader (workload.KubeconfigClientset);
//   - ManagementReader must stay nil: it is New's mgmt.
//
// With DecideOnly, only Images, Logger, EventRecorder and Metrics of the
// embedded options may be set; the others configure an UpdateMachine the
// server does not serve, and are refused.
type Options struct {
	// Host is the address the hooks are served on ("": all addresses).
	Host string
	// Port is the port the hooks are served on (default DefaultPort).
	Port int
	// CertDir holds tls.crt and tls.key (default DefaultCertDir).
	CertDir string
	// TLSOptions adjust the server's TLS configuration, after the server's
	// own. HTTP/2 stays off: "h2" is taken out of NextProtos after them.
	TLSOptions []func(*tls.Config)
	// HTTPLimits bound what callers can make Start's server hold; a zero
	// field keeps its default (DefaultHTTPLimits; there is no
	// "unlimited"), a negative one is refused.
	HTTPLimits HTTPLimits
	// HandlerPrefix prefixes the handler names (default
	// DefaultHandlerPrefix); Cluster API's ExtensionConfig lists them as
	// <prefix>-can-update-machine.<extension config name> and so on.
	HandlerPrefix string

	// Categories are the diff categories accepted in place (default: the
	// Kubernetes version, strategy.KubeadmCategories). With UpdateMachine
	// served (the default) only categories it applies and verifies are
	// allowed; with DecideOnly any built-in category is. An unknown name
	// is an error: a misspelt category would decline every change and
	// have Cluster API replace every machine.
	Categories []diff.Category
	// DecideOnly serves only CanUpdateMachine and CanUpdateMachineSet:
	// another extension answers UpdateMachine and applies what these
	// accept. New then needs no management cluster reader and no upgrader
	// image.
	DecideOnly bool
	// Checks are feasibility checks added to CanUpdate*, after the
	// built-in ones (capi.ExtensionOptions.Checks). With a management
	// cluster reader, capi.ControlPlaneSkewCheck is always one of them.
	Checks []capi.Check
	// Scheme is the scheme of the workload cluster clients (default:
	// client-go's).
	Scheme *runtime.Scheme

	// UpgraderImage is the image of every upgrader pod: a bundle with the
	// target version's kubeadm, kubelet and kubectl under StageFrom. Set
	// it or Images, not both. The reference must name the image by digest
	// ("registry.example/upgrader@sha256:<64 hex>", a tag before the
	// digest allowed) unless AllowMutableUpgraderImages: a tag can be
	// moved to other content after the extension was configured. Required
	// unless Images or DecideOnly.
	UpgraderImage string
	// AllowMutableUpgraderImages accepts upgrader image references without
	// a digest (a tag such as ":v1.31.1" or ":latest"). Whoever can push
	// that tag then chooses what runs as root on every node; New logs a
	// warning through Logger. Meant for development clusters only.
	AllowMutableUpgraderImages bool
	// UpgraderNamespace is the namespace of the upgrader pods in the
	// workload clusters (default nodepod.DefaultNamespace).
	UpgraderNamespace string
	// SkipNamespaceCreation leaves the upgrader namespace to the workload
	// cluster's owner: by default a missing one is created, labelled for
	// the privileged Pod Security Standard the upgrader pod needs
	// (EnsureNamespace).
	SkipNamespaceCreation bool
	// UpgraderCommand is the runner command in the upgrader image (default
	// DefaultUpgraderCommand), which reads the plan from the pod's
	// UPGRADEKIT_* environment.
	UpgraderCommand []string
	// NoUpgraderCommand runs each step's argv through nsenter instead of
	// a runner (no journal, retries or rollback); UpgraderCommand must
	// then be empty.
	NoUpgraderCommand bool
	// UpgraderMode is the upgrader pod's layout (default
	// nodepod.ModeInitContainers).
	UpgraderMode nodepod.Mode
	// StageFrom is the directory of the upgrader image that the pod's
	// stage container copies to the node's staging directory before the
	// first step (default DefaultStageFrom).
	StageFrom string
	// NoStaging stages nothing: the nodes have the binaries in the staging
	// directory already. StageFrom must then be empty.
	NoStaging bool
	// SkipSteps are kubeadm plan steps left out of every update, so the
	// bundle need not carry their component; SkippableSteps lists which.
	// With bundle checksums, which list what each version's bundle
	// carries, a step that is not skipped and whose binary or tree a
	// bundle lacks (etcd-snapshot without etcd/etcdctl, containerd
	// without a containerd/ tree, cni-plugins without a cni-plugins/ tree)
	// is refused by New.
	SkipSteps []string
	// IgnorePreflightErrors names kubeadm preflight checks every `kubeadm
	// upgrade` may fail (kubeadm.Config.IgnorePreflightErrors): for
	// example SystemVerification on cgroup v1 nodes, which kubeadm >=
	// v1.35 refuses even when the kubelet allows cgroup v1. "all" is
	// refused.
	IgnorePreflightErrors []string

	// BundleChecksums are, per Kubernetes version, the SHA-256 of every
	// file the upgrader bundle stages (see kubeadm.Config.Checksums). Each
	// update's bundle step verifies its target version's on the node, with
	// sha256sum, before it runs anything staged or installs any tree; a
	// version change to a version without checksums is declined at
	// CanUpdate*. The checksums must come from your release process (the
	// SHA256SUMS the bundle's builder writes, kept apart from the image),
	// never from the image they check. They are also the list of what each
	// bundle carries: a version whose bundle lacks kubeadm, kubelet or
	// kubectl, or what a step not left out by SkipSteps needs (etcd/etcdctl
	// for the first control plane's etcd snapshot, a containerd/ or
	// cni-plugins/ tree), is refused, since its update would fail on a
	// drained node. hack/bundle.sh builds a bundle and its SHA256SUMS. Set
	// one of BundleChecksums, BundleChecksumsDir and AllowUnverifiedBundles
	// (unless DecideOnly).
	BundleChecksums ChecksumsByVersion
	// BundleChecksumsDir holds the checksums of BundleChecksums, read when
	// New runs: one file per version, named by the version ("v1.31.4"), in
	// sha256sum's format; other names (a mounted ConfigMap's "..data"
	// links, say) are ignored. Validate checks only that it is an absolute
	// path; New fails on a file it cannot read or parse, on an upgrader
	// image version (Images) without a file, and on a bundle that lacks
	// what the steps need. Restart the extension after adding a version.
	BundleChecksumsDir string
	// AllowUnverifiedBundles runs upgrader bundles without verifying their
	// content: the staged kubeadm, kubelet, kubectl and etcdctl run as
	// root on the node, and the containerd and CNI trees are copied onto
	// /, exactly as the image delivered them. New logs a warning through
	// Logger. Meant for development clusters only.
	AllowUnverifiedBundles bool

	// UpdaterOptions configure UpdateMachine (see the type's comment for
	// the fields CanUpdate* shares). Their deadlines keep capi's meaning:
	// zero is the default, negative is no deadline.
	capi.UpdaterOptions
}

// validate checks what config does not keep: the embedded options the
// server sets itself or that DecideOnly leaves unused, and the fields that
// exclude each other.
func (o Options) validate() error {
	switch {
	case o.ManagementReader != nil:
		return &capi.OptionError{Option: "UpdaterOptions.ManagementReader", Detail: "must be nil: New's management cluster reader is the one used"}
	case o.NoUpgraderCommand && len(o.UpgraderCommand) > 0:
		return &capi.OptionError{Option: "Options.NoUpgraderCommand", Detail: "and Options.UpgraderCommand are both set: set one"}
	case o.NoStaging && o.StageFrom != "":
		return &capi.OptionError{Option: "Options.NoStaging", Detail: "and Options.StageFrom are both set: set one"}
	}
	if o.DecideOnly {
		if f := updateOnlyField(o.UpdaterOptions); f != "" {
			return &capi.OptionError{Option: "UpdaterOptions." + f, Detail: "configures UpdateMachine, which Options.DecideOnly does not serve"}
		}
	}
	return nil
}

// updateOnlyField names the first field of u that is set and that only
// UpdateMachine uses ("" if none).
func updateOnlyField(u capi.UpdaterOptions) string {
	v := reflect.ValueOf(u)
	for i := range v.NumField() {
		switch name := v.Type().Field(i).Name; name {
		case "Images", "Logger", "EventRecorder", "Metrics":
		default:
			if !v.Field(i).IsZero() {
				return name
			}
		}
	}
	return ""
}

// config is what New works from: Options with their defaults applied
// (Options.config), and the bundle checksums, given or read from
// BundleChecksumsDir (loadChecksums).
type config struct {
	Options
	checksums ChecksumsByVersion
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
	// DefaultRetryAfter is how long Cluster API waits between
	// UpdateMachine calls while a node upgrades.
	DefaultRetryAfter = 15 * time.Second
)

// DefaultUpgraderCommand is the runner command in the upgrader image.
func DefaultUpgraderCommand() []string { return []string{"/upgrader", "run"} }

// config applies o's defaults. The slices and maps are copies: a caller
// changing its Options after New changes nothing.
func (o Options) config() config {
	c := o
	c.Port = or(o.Port, DefaultPort)
	c.CertDir = or(o.CertDir, DefaultCertDir)
	c.HandlerPrefix = or(o.HandlerPrefix, DefaultHandlerPrefix)
	c.TLSOptions = slices.Clone(o.TLSOptions)
	c.HTTPLimits = o.HTTPLimits.withDefaults()
	c.Categories = slices.Clone(o.Categories)
	if len(c.Categories) == 0 {
		c.Categories = capiKubeadmCategories()
	}
	c.Checks = slices.Clone(o.Checks)
	c.Images = maps.Clone(o.Images)
	c.UpgraderNamespace = or(o.UpgraderNamespace, nodepod.DefaultNamespace)
	c.UpgraderMode = or(o.UpgraderMode, nodepod.ModeInitContainers)
	switch {
	case o.NoUpgraderCommand:
		c.UpgraderCommand = nil
	case len(o.UpgraderCommand) == 0:
		c.UpgraderCommand = DefaultUpgraderCommand()
	default:
		c.UpgraderCommand = slices.Clone(o.UpgraderCommand)
	}
	c.StageFrom = or(o.StageFrom, DefaultStageFrom)
	if o.NoStaging {
		c.StageFrom = ""
	}
	c.SkipSteps = slices.Clone(o.SkipSteps)
	c.IgnorePreflightErrors = slices.Clone(o.IgnorePreflightErrors)
	c.Gates = slices.Clone(o.Gates)
	c.PodOptions = slices.Clone(o.PodOptions)
	c.RetryAfter = or(o.RetryAfter, DefaultRetryAfter)
	cfg := config{Options: c}
	if o.BundleChecksums != nil {
		cfg.checksums = make(ChecksumsByVersion, len(o.BundleChecksums))
		for v, m := range o.BundleChecksums {
			cfg.checksums[v] = maps.Clone(m)
		}
	}
	return cfg
}

// or gives v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
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

// DefaultHTTPLimits are the limits Start serves with unless Options.HTTPLimits
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

// withDefaults gives l with DefaultHTTPLimits' value for every zero field.
func (l HTTPLimits) withDefaults() HTTPLimits {
	d := DefaultHTTPLimits()
	return HTTPLimits{
		MaxRequestBytes:   orDefault(l.MaxRequestBytes, d.MaxRequestBytes),
		MaxConcurrent:     orDefault(l.MaxConcurrent, d.MaxConcurrent),
		MaxHeaderBytes:    orDefault(l.MaxHeaderBytes, d.MaxHeaderBytes),
		ReadHeaderTimeout: orDefault(l.ReadHeaderTimeout, d.ReadHeaderTimeout),
		ReadTimeout:       orDefault(l.ReadTimeout, d.ReadTimeout),
		WriteTimeout:      orDefault(l.WriteTimeout, d.WriteTimeout),
		IdleTimeout:       orDefault(l.IdleTimeout, d.IdleTimeout),
	}
}

func orDefault[T int | int64 | time.Duration](v, d T) T {
	if v == 0 {
		return d
	}
	return v
}
