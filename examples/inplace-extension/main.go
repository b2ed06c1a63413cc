// Command inplace-extension is a Cluster API runtime extension that updates
// machines in place with upgradekit: CanUpdateMachine and
// CanUpdateMachineSet decide (and answer with patches), UpdateMachine
// drains the node, upgrades it with a kubeadm plan run by an upgrader pod,
// and uncordons it. Progress shows as a Node condition, Events on the
// Machine, Prometheus metrics (--metrics-bind-address, over HTTPS for
// scrapers the management cluster's RBAC allows to get /metrics) and logs
// (-v, --logging-format: Kubernetes' logging flags). Liveness and
// readiness are served on their own port (--health-addr: /healthz,
// /readyz); --version prints the build's version.
//
//	inplace-extension --cert-dir /tmp/k8s-webhook-server/serving-certs \
//	    --upgrader-image registry.example/upgradekit-upgrader:v1.36.3
//
// The upgrader pod runs examples/upgrader's image: by default every step's
// init container runs "/upgrader run" (--upgrader-command), which reads the
// plan from the pod's UPGRADEKIT_* environment, and a first init container
// copies the image's /staging (--stage-from; the Dockerfile's bundle target
// puts the Kubernetes binaries there) to /var/lib/upgradekit/staging on the
// node, where the kubeadm plan installs them from. The runner writes a
// summary to the termination log, which UpdateMachine reads back through
// the pod's status (nodepod.ReadStatus).
//
// See README.md for deploying it next to Cluster API.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/examples/cli/gateflags"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// defaultCategories are the changes this extension's UpdateMachine applies
// to a running node and verifies (strategy.KubeadmCategories).
func defaultCategories() string {
	var names []string
	for _, c := range strategy.KubeadmCategories() {
		names = append(names, string(c))
	}
	return strings.Join(names, ",")
}

// The upgrader pod's defaults fit the image examples/upgrader builds (the
// bundle target of its Dockerfile): the runner binary at /upgrader, and the
// Kubernetes binaries under /staging.
var defaultUpgraderCommand = strings.Join(extensionserver.DefaultUpgraderCommand(), " ")

// errInvalidFlag is wrapped by every flag validation error.
var errInvalidFlag = errors.New("invalid flag")

// parseError is a command line the flag parser refused.
type parseError struct{ err error }

func (e parseError) Error() string { return e.err.Error() }
func (e parseError) Unwrap() error { return errInvalidFlag }

// Exit codes, as in every example (examples/README.md): 0 stopped cleanly
// (or -h), 1 an error, 2 a usage error.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// exitCode prints err once and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil || errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.Is(err, errInvalidFlag):
		cli.PrintUsageError(stderr, "inplace-extension", err)
		return exitUsage
	}
	fmt.Fprintln(stderr, "inplace-extension:", err)
	return exitError
}

// The management cluster client's default rate limit: Cluster API's
// managers' (--kube-api-qps, --kube-api-burst). client-go's own default (5
// per second, bursts of 10), shared by every hook call, made UpdateMachine
// wait seconds once ten machines updated at once (make e2e-scale).
const (
	defaultKubeAPIQPS   = 20
	defaultKubeAPIBurst = 30
)

// restConfig is the management cluster's config: --kubeconfig, else
// $KUBECONFIG or ~/.kube/config, else the in-cluster config, through
// client-go's loading rules (no log lines, no stack traces).
// Its client-side rate limit is qps and burst (--kube-api-qps,
// --kube-api-burst).
func restConfig(kubeconfig string, qps float32, burst int) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("management cluster config (--kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster): %w", err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, nil
}

type options struct {
	kubeconfig                            string
	host, certDir, namePrefix, categories string
	port                                  int
	retryAfter                            int
	noUpdate                              bool
	createNamespace                       bool
	drain                                 bool
	drainTimeout                          time.Duration
	workloadUnreachable                   time.Duration
	metricsAddr                           string
	metricsSecure                         bool
	healthAddr                            string
	profilerAddr                          string
	// Kubernetes' logging flags (-v, --logging-format, ...), applied by run.
	logging *logsv1.LoggingConfiguration
	// flagValues are every flag's value, logged at -v=1.
	flagValues []string
	version    bool // --version: print it, serve nothing
	// Limits of the hooks' server (extensionserver.HTTPLimits).
	maxRequestBytes       int64
	maxConcurrentRequests int
	kubeAPIQPS            float64
	kubeAPIBurst          int
	readTimeout           time.Duration

	// The upgrader pod and the plan it runs.
	upgraderImage, upgraderNamespace, upgraderCommand, upgraderMode, stageFrom, skipSteps, ignorePreflight string
	upgraderImages                                                                                         string
	// Supply chain: images by digest, bundle checksums.
	allowMutableImages, allowUnverifiedBundles bool
	bundleChecksumsDir                         string
	// Gates asked before each update starts (the preview takes the same
	// flags for its in-process answer).
	gateFlags gateflags.Flags
	// Parsed from the strings above by parseFlags.
	cats         []diff.Category
	images       capi.ImagesByVersion // nil without --upgrader-images
	runnerArgv   []string
	skip         []string
	ignoreChecks []string
}

// flagOf names the flag behind each extensionserver option (the fields of
// extensionserver.Options and of its embedded capi.UpdaterOptions, as
// capi.OptionError names them), so that its errors speak of flags.
var flagOf = map[string]string{
	"Options.Port":                  "--port",
	"Options.CertDir":               "--cert-dir",
	"Options.HandlerPrefix":         "--name",
	"Options.Categories":            "--in-place",
	"Options.UpgraderImage":         "--upgrader-image",
	"UpdaterOptions.Images":         "--upgrader-images",
	"Options.BundleChecksums":       "--bundle-checksums-dir",
	"Options.BundleChecksumsDir":    "--bundle-checksums-dir",
	"Options.UpgraderNamespace":     "--upgrader-namespace",
	"Options.UpgraderCommand":       "--upgrader-command",
	"Options.NoUpgraderCommand":     "--upgrader-command",
	"Options.UpgraderMode":          "--upgrader-mode",
	"Options.StageFrom":             "--stage-from",
	"Options.NoStaging":             "--stage-from",
	"Options.SkipSteps":             "--skip-steps",
	"Options.IgnorePreflightErrors": "--ignore-preflight-errors",
	"UpdaterOptions.DrainTimeout":   "--drain-timeout",
	"UpdaterOptions.RetryAfter":     "--retry-after",
	// The upgrader pod is made of several flags (image, namespace, mode,
	// runner, staging): its errors name the pod (the option error's
	// detail: the upgrader or the pre-pull pod) and nodepod's the value.
	"UpdaterOptions.PodOptions": "upgrader pod",
	"Options.HTTPLimits":        "--max-request-bytes/--max-concurrent-requests/--read-timeout",

	"UpdaterOptions.WorkloadUnreachableTimeout": "--workload-unreachable-timeout",
}

// optionNamesAsFlags rewrites the option names a detail suggests as the
// flags that set them.
var optionNamesAsFlags = strings.NewReplacer(
	"required (or Options.BundleChecksumsDir)", "required",
	"Options.BundleChecksums, Options.BundleChecksumsDir and Options.AllowUnverifiedBundles: set one", "--bundle-checksums-dir and --allow-unverified-bundles: set one",
	"Options.AllowMutableUpgraderImages", "--allow-mutable-upgrader-images",
	"Options.AllowUnverifiedBundles", "--allow-unverified-bundles",
	"Options.BundleChecksumsDir", "--bundle-checksums-dir",
	"Options.SkipSteps", "--skip-steps",
	"Options.UpgraderCommand", "--upgrader-command",
	"Options.UpgraderImage", "--upgrader-image",
	"UpdaterOptions.Images", "--upgrader-images",
	"Options.DecideOnly", "--no-update-machine",
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("inplace-extension")
	fs.Usage = func() {
		cli.WriteHelp(stderr, fs, "usage: inplace-extension --upgrader-image IMAGE@sha256:... [flags]",
			"exit: 0 stopped cleanly, 1 error, 2 usage")
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config)")
	fs.StringVar(&o.host, "host", "", "address to listen on (default: all)")
	fs.IntVar(&o.port, "port", extensionserver.DefaultPort, "port to serve the hooks on")
	fs.StringVar(&o.certDir, "cert-dir", extensionserver.DefaultCertDir, "directory with tls.crt and tls.key")
	fs.StringVar(&o.namePrefix, "name", extensionserver.DefaultHandlerPrefix, "prefix of the handler names in the ExtensionConfig")
	fs.StringVar(&o.categories, "in-place", defaultCategories(), "comma-separated diff categories accepted in place; anything else makes CAPI replace the machine. With UpdateMachine served here, only what it applies: "+defaultCategories())
	fs.StringVar(&o.upgraderImage, "upgrader-image", "", "image of the node upgrader pod, by digest (image@sha256:...): examples/upgrader's bundle image with the target version's kubeadm/kubelet/kubectl under /staging; required unless --no-update-machine")
	fs.StringVar(&o.upgraderImage, "updater-image", "", "old name of --upgrader-image")
	fs.StringVar(&o.upgraderImages, "upgrader-images", "", "upgrader image per Kubernetes version, by digest, version=image,... (e.g. v1.36.3=registry.example/upgrader@sha256:...): each update runs its target version's bundle, and a version change to a version not listed is answered with a Failure at CanUpdate* (Cluster API asks again once it is listed); instead of --upgrader-image")
	fs.BoolVar(&o.allowMutableImages, "allow-mutable-upgrader-images", false, "accept upgrader images by tag (whoever can push the tag then chooses what runs as root on the nodes; logged as a warning): development clusters only")
	fs.StringVar(&o.bundleChecksumsDir, "bundle-checksums-dir", "", "directory of one sha256sum file per Kubernetes version, named by the version (e.g. v1.36.3, a mounted ConfigMap): the SHA-256 of every file the upgrader bundle stages, relative to /staging, verified on the node before anything staged runs; required unless --allow-unverified-bundles")
	fs.BoolVar(&o.allowUnverifiedBundles, "allow-unverified-bundles", false, "run upgrader bundles without checksums (their binaries run as root unverified; logged as a warning): development clusters only")
	fs.StringVar(&o.upgraderNamespace, "upgrader-namespace", nodepod.DefaultNamespace, "namespace of the upgrader pods in workload clusters")
	fs.StringVar(&o.upgraderNamespace, "updater-namespace", nodepod.DefaultNamespace, "old name of --upgrader-namespace")
	fs.BoolVar(&o.createNamespace, "create-upgrader-namespace", true, "create the upgrader namespace in a workload cluster that lacks it, labelled for the privileged Pod Security Standard the upgrader pod needs (an existing namespace is left as it is)")
	fs.StringVar(&o.upgraderCommand, "upgrader-command", defaultUpgraderCommand, `runner command in the upgrader image, split at spaces (it reads the plan from the UPGRADEKIT_* environment); "" runs each step's argv through nsenter instead (raw layout: no journal, retries or rollback)`)
	fs.StringVar(&o.upgraderMode, "upgrader-mode", string(nodepod.ModeInitContainers), "upgrader pod layout: InitContainers (a container per step) or SingleContainer (one container runs the plan)")
	fs.StringVar(&o.stageFrom, "stage-from", extensionserver.DefaultStageFrom, `directory of the upgrader image copied to /var/lib/upgradekit/staging on the node before the first step; "" when the nodes have the binaries there already`)
	fs.StringVar(&o.skipSteps, "skip-steps", "", "comma-separated kubeadm plan steps to leave out, so the bundle need not carry their component: "+strings.Join(extensionserver.SkippableSteps(), ", "))
	fs.StringVar(&o.ignorePreflight, "ignore-preflight-errors", "", "comma-separated kubeadm preflight checks every kubeadm upgrade may fail, e.g. SystemVerification on cgroup v1 nodes (kubeadm >= v1.35 refuses cgroup v1); \"all\" is refused")
	fs.IntVar(&o.retryAfter, "retry-after", int(extensionserver.DefaultRetryAfter/time.Second), "seconds CAPI waits between UpdateMachine calls while a node upgrades")
	fs.BoolVar(&o.noUpdate, "no-update-machine", false, "serve only CanUpdateMachine/CanUpdateMachineSet (decide, do not update)")
	fs.BoolVar(&o.drain, "drain", true, "cordon and drain each node (Eviction API, PDBs respected) before upgrading it, uncordon after")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", capi.DefaultDrainTimeout, "how long a drain may stay unfinished before UpdateMachine answers Failure naming the blocking PDBs (0: no deadline)")
	fs.DurationVar(&o.workloadUnreachable, "workload-unreachable-timeout", capi.DefaultWorkloadUnreachableTimeout, "how long UpdateMachine waits for a workload cluster it cannot reach (kubeconfig secret unreadable, API server not answering), counted in the management cluster, before it answers Failure naming why (0: no deadline)")
	o.gateFlags.Add(fs)
	fs.Int64Var(&o.maxRequestBytes, "max-request-bytes", extensionserver.DefaultMaxRequestBytes, "largest hook request body read; larger ones are answered 413 (a CanUpdateMachine request with big KubeadmConfigs is a few hundred KiB)")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", defaultKubeAPIQPS, "requests per second to the management cluster's API server, client-side (Cluster API's managers' default); workload clusters are reached at 20/s, bursts of 30, as Cluster API reaches them")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", defaultKubeAPIBurst, "requests above --kube-api-qps allowed in a burst")
	fs.IntVar(&o.maxConcurrentRequests, "max-concurrent-requests", extensionserver.DefaultMaxConcurrentRequests, "hook requests handled at once; more are answered 429, which Cluster API retries")
	fs.DurationVar(&o.readTimeout, "read-timeout", extensionserver.DefaultReadTimeout, "how long a hook request, body included, may take to arrive before its connection is closed")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `address of the Prometheus /metrics endpoint; "0" disables it`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve /metrics over HTTPS (a self-signed certificate) to scrapers whose bearer token the management cluster authenticates (TokenReview) and allows to get the non-resource URL /metrics (SubjectAccessReview); false serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&o.healthAddr, "health-addr", ":9440", `address of the health endpoints, plain HTTP: /healthz (the process answers) and /readyz (the hooks are served with the certificate of --cert-dir); "0" disables them`)
	fs.StringVar(&o.profilerAddr, "profiler-address", "", `address of Go's profiles (/debug/pprof/), plain HTTP and unauthenticated: bind it to loopback (e.g. "127.0.0.1:6060") and use kubectl port-forward; "" disables them`)
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	o.logging = logsv1.NewLoggingConfiguration()
	logsv1.AddFlags(o.logging, fs)
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, cli.ErrHelp) {
			return o, err
		}
		return o, parseError{err}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errInvalidFlag, fs.Args())
	}
	if o.version {
		return o, nil
	}
	if errs := logsv1.Validate(o.logging, nil, nil); len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", errInvalidFlag, errs.ToAggregate())
	}
	fs.VisitAll(func(f *pflag.Flag) { o.flagValues = append(o.flagValues, "--"+f.Name+"="+f.Value.String()) })
	o.cats = nil
	for _, c := range strings.Split(o.categories, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.cats = append(o.cats, diff.Category(c))
		}
	}
	if err := o.parseGates(); err != nil {
		return o, err
	}
	if !(o.kubeAPIQPS > 0) || o.kubeAPIQPS > math.MaxFloat32 || o.kubeAPIBurst < 1 {
		return o, fmt.Errorf("%w: --kube-api-qps/--kube-api-burst: %g/%d: both must be positive", errInvalidFlag, o.kubeAPIQPS, o.kubeAPIBurst)
	}
	if !o.noUpdate {
		if o.upgraderImage == "" && strings.TrimSpace(o.upgraderImages) == "" {
			return o, fmt.Errorf("%w: --upgrader-image or --upgrader-images is required (or --no-update-machine)", errInvalidFlag)
		}
		if o.upgraderImage != "" && strings.TrimSpace(o.upgraderImages) != "" {
			return o, fmt.Errorf("%w: --upgrader-image and --upgrader-images: set one", errInvalidFlag)
		}
		if err := o.parseImages(); err != nil {
			return o, err
		}
		if err := o.parseUpgrader(); err != nil {
			return o, err
		}
	}
	// The values the library would take for its defaults.
	if err := o.checkServing(); err != nil {
		return o, err
	}
	if !o.noUpdate {
		if err := o.checkUpdater(); err != nil {
			return o, err
		}
	}
	// The rest is checked by the library, as it checks any embedder's.
	if err := extensionserver.Validate(o.serverOptions(deps{})); err != nil {
		if ferr := flagError(err); ferr != nil {
			return o, ferr
		}
		return o, fmt.Errorf("%w: %w", errInvalidFlag, err)
	}
	return o, nil
}

// flagError speaks of the flag behind an extensionserver option error
// (capi.OptionError), as a usage error (exit 2); nil when err is about no
// option a flag sets.
func flagError(err error) error {
	var oe *capi.OptionError
	if !errors.As(err, &oe) {
		return nil
	}
	f, ok := flagOf[oe.Option]
	if !ok {
		return nil
	}
	msg := f
	switch {
	case oe.Option == "UpdaterOptions.PodOptions" && oe.Detail != "":
		msg = oe.Detail // the pod: "upgrader pod", "pre-pull pod"
	case oe.Detail != "":
		msg += ": " + optionNamesAsFlags.Replace(oe.Detail)
	}
	if oe.Err != nil {
		return fmt.Errorf("%w: %s: %w", errInvalidFlag, msg, oe.Err)
	}
	return fmt.Errorf("%w: %s", errInvalidFlag, msg)
}

// checkServing refuses the serving flags' values that the library would
// take as "the default" (a zero field of extensionserver.Options is its
// default), where the command has its own default and an empty or zero
// value is a mistake: --port 0, an empty --cert-dir, --name or --in-place.
func (o *options) checkServing() error {
	switch {
	case o.port == 0:
		return fmt.Errorf("%w: --port: port 0: must be between 1 and 65535", errInvalidFlag)
	case o.certDir == "":
		return fmt.Errorf("%w: --cert-dir: empty certificate directory", errInvalidFlag)
	case o.namePrefix == "":
		return fmt.Errorf("%w: --name: empty prefix", errInvalidFlag)
	case len(o.cats) == 0:
		return fmt.Errorf("%w: --in-place: name at least one diff category", errInvalidFlag)
	}
	return nil
}

// checkUpdater refuses the UpdateMachine flags whose meaning differs from
// the library's field: the deadlines' 0 is "no deadline" here (the
// library's default), --retry-after is whole seconds from 1 to 86400 (the
// library's 0 is its default), and an empty --upgrader-mode or
// --upgrader-namespace is a mistake, not the default.
func (o *options) checkUpdater() error {
	switch {
	case o.retryAfter < 1 || o.retryAfter > 86400:
		return fmt.Errorf("%w: --retry-after: %d: must be between 1 and 86400 seconds", errInvalidFlag, o.retryAfter)
	case o.drainTimeout < 0:
		return fmt.Errorf("%w: --drain-timeout: %s: must not be negative", errInvalidFlag, o.drainTimeout)
	case o.workloadUnreachable < 0:
		return fmt.Errorf("%w: --workload-unreachable-timeout: %s: must not be negative", errInvalidFlag, o.workloadUnreachable)
	case o.upgraderMode == "":
		return fmt.Errorf(`%w: --upgrader-mode: "": want %s or %s`, errInvalidFlag, nodepod.ModeInitContainers, nodepod.ModeSingleContainer)
	case o.upgraderNamespace == "":
		return fmt.Errorf("%w: --upgrader-namespace: empty namespace", errInvalidFlag)
	}
	return nil
}

// parseGates checks the gate flags; with --no-update-machine there is
// nothing to gate.
func (o *options) parseGates() error {
	if err := o.gateFlags.Check(); err != nil {
		return fmt.Errorf("%w: %w", errInvalidFlag, err)
	}
	if o.noUpdate && o.gateFlags.Set() {
		return fmt.Errorf("%w: --maintenance-window, --soak and --blocking-pod-selector gate UpdateMachine, which --no-update-machine does not serve", errInvalidFlag)
	}
	return nil
}

// gates are the gates the flags ask for, built on the management reader
// (only the window when there is none yet, as in Validate).
func (o options) gates(d deps) ([]strategy.Gate, error) {
	var clients workload.Client
	if d.mgmt != nil {
		clients = workload.KubeconfigClient(d.mgmt, d.scheme)
	}
	return o.gateFlags.Gates(clients)
}

// parseImages fills images from --upgrader-images (its syntax; the library
// checks the versions).
func (o *options) parseImages() error {
	if strings.TrimSpace(o.upgraderImages) == "" {
		return nil
	}
	o.images = capi.ImagesByVersion{}
	for _, kv := range strings.Split(o.upgraderImages, ",") {
		v, img, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" || img == "" {
			return fmt.Errorf("%w: --upgrader-images: %q is not version=image", errInvalidFlag, kv)
		}
		if _, dup := o.images[v]; dup {
			return fmt.Errorf("%w: --upgrader-images: version %s twice", errInvalidFlag, v)
		}
		o.images[v] = img
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseUpgrader splits --upgrader-command, --skip-steps and
// --ignore-preflight-errors, and checks that
// the command fits examples/upgrader when that is the runner.
func (o *options) parseUpgrader() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errInvalidFlag, fmt.Sprintf(format, args...))
	}
	if strings.ContainsAny(o.upgraderCommand, `"'\`) {
		return bad("--upgrader-command %q: no quotes or escapes, the command is split at spaces", o.upgraderCommand)
	}
	o.runnerArgv = strings.Fields(o.upgraderCommand)
	if argv := o.runnerArgv; len(argv) > 0 && path.Base(argv[0]) == "upgrader" {
		// examples/upgrader: the pod must run the plan, through nsenter.
		if len(argv) < 2 || argv[1] != "run" {
			return bad("--upgrader-command %q: the upgrader pod runs plans, so the upgrader's command must be \"run\" (%q)", o.upgraderCommand, defaultUpgraderCommand)
		}
		for _, a := range argv[2:] {
			if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "direct" && strings.HasPrefix(a, "-") {
				return bad("--upgrader-command %q: %s would run host steps inside the container instead of through nsenter", o.upgraderCommand, a)
			}
		}
	}
	o.skip = splitList(o.skipSteps)
	o.ignoreChecks = splitList(o.ignorePreflight)
	return nil
}

// deps are what the extension uses besides the flags.
type deps struct {
	// mgmt reads the <cluster>-kubeconfig secrets and Machines (nil with
	// --no-update-machine).
	mgmt client.Reader
	// cfg is the management cluster's config: the metrics server reviews
	// scrapers' tokens with it (nil serves no secure metrics).
	cfg      *rest.Config
	scheme   *runtime.Scheme
	recorder events.EventRecorder // Events on Machines; nil records none
	metrics  *capi.Metrics
	log      logr.Logger
}

// serverOptions are the extensionserver options the flags and d say.
func (o options) serverOptions(d deps) extensionserver.Options {
	opts := extensionserver.Options{
		Host: o.host, Port: o.port, CertDir: o.certDir,
		HandlerPrefix: o.namePrefix,
		Categories:    o.cats,
		HTTPLimits: extensionserver.HTTPLimits{
			MaxRequestBytes: o.maxRequestBytes, MaxConcurrent: o.maxConcurrentRequests, ReadTimeout: o.readTimeout},
		Scheme: d.scheme, // nil: client-go's
	}
	opts.Logger = d.log
	opts.Metrics = d.metrics // nil: the library's, on controller-runtime's registry
	if o.noUpdate {
		opts.DecideOnly = true
		return opts
	}
	if o.images != nil {
		opts.Images = o.images
	} else {
		opts.UpgraderImage = o.upgraderImage
	}
	opts.AllowMutableUpgraderImages = o.allowMutableImages
	opts.BundleChecksumsDir = o.bundleChecksumsDir
	opts.AllowUnverifiedBundles = o.allowUnverifiedBundles
	opts.UpgraderNamespace = o.upgraderNamespace
	opts.SkipNamespaceCreation = !o.createNamespace
	// --upgrader-command "": no runner, each step's argv through nsenter.
	opts.UpgraderCommand = o.runnerArgv
	opts.NoUpgraderCommand = len(o.runnerArgv) == 0
	opts.UpgraderMode = nodepod.Mode(o.upgraderMode)
	// --stage-from "": the nodes have the binaries already.
	opts.StageFrom = o.stageFrom
	opts.NoStaging = o.stageFrom == ""
	opts.SkipSteps = o.skip
	opts.IgnorePreflightErrors = o.ignoreChecks
	opts.RetryAfter = time.Duration(o.retryAfter) * time.Second
	opts.SkipDrain = !o.drain
	opts.DrainTimeout = noDeadlineAtZero(o.drainTimeout)
	opts.WorkloadUnreachableTimeout = noDeadlineAtZero(o.workloadUnreachable)
	opts.EventRecorder = d.recorder // nil records none
	return opts
}

// noDeadlineAtZero is a deadline flag's value as capi.UpdaterOptions takes
// it: the flags' 0 (no deadline) is the library's negative, since the
// library's 0 is its default.
func noDeadlineAtZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// serve runs the extension, the metrics server unless
// --metrics-bind-address is "0" and the health endpoints unless
// --health-addr is "0", until ctx ends or one of them fails. The metrics
// are registered on controller-runtime's registry, which the metrics
// server serves.
func serve(ctx context.Context, o options, d deps) error {
	opts := o.serverOptions(d)
	gates, err := o.gates(d)
	if err != nil {
		return err
	}
	if len(gates) > 0 {
		opts.Gates = gates
	}
	ext, err := extensionserver.New(d.mgmt, opts)
	if err != nil {
		// What New checks beyond Validate (the --bundle-checksums-dir files:
		// readable, and each bundle carrying what the steps need) is the
		// flags' fault too: exit 2, before serving anything.
		if ferr := flagError(err); ferr != nil {
			return ferr
		}
		return err
	}
	servers := []func(context.Context) error{ext.Start}
	ms, err := metricsServer(o, d)
	if err != nil {
		return err
	}
	if ms != nil { // nil: "0", disabled
		servers = append(servers, ms.Start)
	}
	if o.healthAddr != "0" {
		health, err := healthServer(o.healthAddr, ext.StartedChecker())
		if err != nil {
			return err
		}
		servers = append(servers, health)
	}
	if o.profilerAddr != "" {
		prof, err := profilerServer(o.profilerAddr)
		if err != nil {
			return err
		}
		servers = append(servers, prof)
	}
	// Whichever server stops first (an error, or ctx ending) stops the others.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, len(servers))
	for _, start := range servers {
		go func() { done <- start(ctx) }()
	}
	errs := []error{<-done}
	cancel()
	for range servers[1:] {
		errs = append(errs, <-done)
	}
	return errors.Join(errs...)
}

// metricsServer is controller-runtime's metrics server for
// --metrics-bind-address: with --metrics-secure, HTTPS with
// controller-runtime's authentication and authorization filter (the
// scraper's bearer token reviewed by the management cluster, TokenReview,
// and its permission to get /metrics checked, SubjectAccessReview, with
// d.cfg's identity), as Cluster API's managers serve theirs. Nil when
// disabled ("0").
func metricsServer(o options, d deps) (metricsserver.Server, error) {
	opts := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure && o.metricsAddr != "0" {
		if d.cfg == nil {
			return nil, errors.New("--metrics-secure: the management cluster's config is needed to review the scrapers' tokens")
		}
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	}
	var httpClient *http.Client
	if d.cfg != nil {
		c, err := rest.HTTPClientFor(d.cfg)
		if err != nil {
			return nil, err
		}
		httpClient = c
	}
	return metricsserver.NewServer(opts, d.cfg, httpClient)
}

// healthServer listens on addr now (so that a port in use is an error
// before anything is served) and returns the function that serves, until
// its context ends, /healthz (the process answers) and /readyz (ready:
// the hooks are served), as a controller-runtime manager's health probe
// server does.
func healthServer(addr string, ready healthz.Checker) (func(context.Context) error, error) {
	mux := http.NewServeMux()
	live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	readyz := &healthz.Handler{Checks: map[string]healthz.Checker{"hooks": ready}}
	mux.Handle("/healthz", http.StripPrefix("/healthz", live))
	mux.Handle("/healthz/", http.StripPrefix("/healthz", live))
	mux.Handle("/readyz", http.StripPrefix("/readyz", readyz))
	mux.Handle("/readyz/", http.StripPrefix("/readyz", readyz))
	return plainServer("--health-addr", addr, mux, 30*time.Second)
}

// profilerServer serves Go's profiles (net/http/pprof, under
// /debug/pprof/) on addr, as Cluster API's managers do with
// --profiler-address: plain HTTP without authentication, so bind it to
// loopback and reach it with kubectl port-forward. A CPU profile or trace
// may take up to two minutes.
func profilerServer(addr string) (func(context.Context) error, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return plainServer("--profiler-address", addr, mux, 2*time.Minute)
}

// plainServer listens on addr now (a port in use is an error naming flag
// before anything is served) and returns the function that serves mux
// over plain HTTP until its context ends.
func plainServer(flag, addr string, mux *http.ServeMux, write time.Duration) (func(context.Context) error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: write}
	return func(ctx context.Context) error {
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		<-stopped
		return nil
	}, nil
}

// version is what --version prints (examples/buildinfo): the module's
// version, the VCS revision the binary was built from and the Go version.
func version() string { return buildinfo.Version("inplace-extension") }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, version())
		return err
	}
	// Kubernetes' logging (-v, --logging-format), as Cluster API's managers
	// set it up; everything logs through its logr.Logger.
	if err := logsv1.ValidateAndApplyWithOptions(o.logging, &logsv1.LoggingOptions{ErrorStream: stderr, InfoStream: stderr}, nil); err != nil {
		return err
	}
	defer klog.Flush()
	log := klog.Background()
	ctrllog.SetLogger(log)
	log.Info("starting", "version", version())
	for _, f := range o.flagValues {
		log.V(1).Info("flag", "value", f)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return err
	}
	d := deps{scheme: scheme, log: log}
	if !o.noUpdate || (o.metricsSecure && o.metricsAddr != "0") {
		cfg, err := restConfig(o.kubeconfig, float32(o.kubeAPIQPS), o.kubeAPIBurst)
		if err != nil {
			return err
		}
		d.cfg = cfg
	}
	if !o.noUpdate {
		cfg := d.cfg
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		d.mgmt = c
		// Events on Machines in the management cluster (events.k8s.io/v1),
		// as a controller-runtime manager's GetEventRecorder would record.
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return err
		}
		defer b.Shutdown()
		d.recorder = b.NewRecorder(scheme, "upgradekit-inplace-extension")
	}
	return serve(ctx, o, d)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}
