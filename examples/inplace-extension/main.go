// Command inplace-extension is a Cluster API runtime extension that updates
// machines in place with upgradekit: CanUpdateMachine and
// CanUpdateMachineSet decide (and answer with patches), UpdateMachine
// drains the node, upgrades it with a kubeadm plan run by an upgrader pod,
// and uncordons it. Progress shows as a Node condition, Events on the
// Machine, Prometheus metrics (-metrics-bind-address) and logs.
//
//	inplace-extension -cert-dir /tmp/k8s-webhook-server/serving-certs \
//	    -upgrader-image registry.example/upgradekit-upgrader:v1.31.1
//
// The upgrader pod runs examples/upgrader's image: by default every step's
// init container runs "/upgrader run" (-upgrader-command), which reads the
// plan from the pod's UPGRADEKIT_* environment, and a first init container
// copies the image's /staging (-stage-from; the Dockerfile's bundle target
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
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
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
// Kubernetes binaries under /staging, which the pod's stage container
// copies to <staging host path>/staging on the node, where the kubeadm
// plan installs them from.
const (
	defaultUpgraderCommand = "/upgrader run"
	defaultStageFrom       = "/staging"
)

// skippableSteps are the kubeadm plan steps -skip-steps may leave out
// (kubeadm.Config's Skip* fields); the bundle image then need not carry
// what they install or use.
var skippableSteps = []string{kubeadm.StepContainerd, kubeadm.StepCNIPlugins, kubeadm.StepEtcdSnapshot}

// errInvalidFlag is wrapped by every flag validation error.
var errInvalidFlag = errors.New("invalid flag")

// printedUsageError is a flag the flag package refused and printed.
type printedUsageError struct{ err error }

func (e printedUsageError) Error() string { return e.err.Error() }
func (e printedUsageError) Unwrap() error { return errInvalidFlag }

// Exit codes, as in every example (examples/README.md): 0 stopped cleanly
// (or -h), 1 an error, 2 a usage error.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// exitCode prints err once and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var printed printedUsageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &printed):
		return exitUsage
	case errors.Is(err, errInvalidFlag):
		fmt.Fprintln(stderr, "inplace-extension:", err)
		return exitUsage
	}
	fmt.Fprintln(stderr, "inplace-extension:", err)
	return exitError
}

// restConfig is the management cluster's config: -kubeconfig, else
// $KUBECONFIG or ~/.kube/config, else the in-cluster config, through
// client-go's loading rules (no log lines, no stack traces).
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("management cluster config (-kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster): %w", err)
	}
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
	metricsAddr                           string

	// The upgrader pod (see podOptions) and the plan it runs (planConfig).
	upgraderImage, upgraderNamespace, upgraderCommand, upgraderMode, stageFrom, skipSteps string
	upgraderImages                                                                        string
	// images is -upgrader-images parsed; nil without it.
	images capi.ImagesByVersion
	// Parsed from the strings above by parseFlags.
	cats       []diff.Category
	runnerArgv []string
	mode       nodepod.Mode
	skip       map[string]bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("inplace-extension", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config)")
	fs.StringVar(&o.host, "host", "", "address to listen on (default: all)")
	fs.IntVar(&o.port, "port", 9443, "port to serve the hooks on")
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with tls.crt and tls.key")
	fs.StringVar(&o.namePrefix, "name", "upgradekit", "prefix of the handler names in the ExtensionConfig")
	fs.StringVar(&o.categories, "in-place", defaultCategories(), "comma-separated diff categories accepted in place; anything else makes CAPI replace the machine. With UpdateMachine served here, only what it applies: "+defaultCategories())
	fs.StringVar(&o.upgraderImage, "upgrader-image", "", "image of the node upgrader pod: examples/upgrader's bundle image with the target version's kubeadm/kubelet/kubectl under /staging; required unless -no-update-machine")
	fs.StringVar(&o.upgraderImage, "updater-image", "", "old name of -upgrader-image")
	fs.StringVar(&o.upgraderImages, "upgrader-images", "", "upgrader image per Kubernetes version, version=image,... (e.g. v1.31.1=registry.example/upgrader:v1.31.1): each update runs its target version's bundle, and a version change to a version not listed is declined at CanUpdate*; instead of -upgrader-image")
	fs.StringVar(&o.upgraderNamespace, "upgrader-namespace", nodepod.DefaultNamespace, "namespace of the upgrader pods in workload clusters")
	fs.StringVar(&o.upgraderNamespace, "updater-namespace", nodepod.DefaultNamespace, "old name of -upgrader-namespace")
	fs.BoolVar(&o.createNamespace, "create-upgrader-namespace", true, "create the upgrader namespace in a workload cluster that lacks it, labelled for the privileged Pod Security Standard the upgrader pod needs (an existing namespace is left as it is)")
	fs.StringVar(&o.upgraderCommand, "upgrader-command", defaultUpgraderCommand, `runner command in the upgrader image, split at spaces (it reads the plan from the UPGRADEKIT_* environment); "" runs each step's argv through nsenter instead (raw layout: no journal, retries or rollback)`)
	fs.StringVar(&o.upgraderMode, "upgrader-mode", string(nodepod.ModeInitContainers), "upgrader pod layout: InitContainers (a container per step) or SingleContainer (one container runs the plan)")
	fs.StringVar(&o.stageFrom, "stage-from", defaultStageFrom, `directory of the upgrader image copied to /var/lib/upgradekit/staging on the node before the first step; "" when the nodes have the binaries there already`)
	fs.StringVar(&o.skipSteps, "skip-steps", "", "comma-separated kubeadm plan steps to leave out, so the bundle need not carry their component: "+strings.Join(skippableSteps, ", "))
	fs.IntVar(&o.retryAfter, "retry-after", 15, "seconds CAPI waits between UpdateMachine calls while a node upgrades")
	fs.BoolVar(&o.noUpdate, "no-update-machine", false, "serve only CanUpdateMachine/CanUpdateMachineSet (decide, do not update)")
	fs.BoolVar(&o.drain, "drain", true, "cordon and drain each node (Eviction API, PDBs respected) before upgrading it, uncordon after")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", capi.DefaultDrainTimeout, "how long a drain may stay unfinished before UpdateMachine answers Failure naming the blocking PDBs (0: no deadline)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus /metrics endpoint (plain HTTP); "0" disables it`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, printedUsageError{err}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errInvalidFlag, fs.Args())
	}
	if o.drainTimeout < 0 {
		return o, fmt.Errorf("%w: -drain-timeout %s: must not be negative", errInvalidFlag, o.drainTimeout)
	}
	// CAPI's RetryAfterSeconds is an int32; a day is already longer than
	// anyone wants between two looks at an upgrading node.
	if o.retryAfter < 1 || o.retryAfter > 86400 {
		return o, fmt.Errorf("%w: -retry-after %d: must be between 1 and 86400 seconds", errInvalidFlag, o.retryAfter)
	}
	if err := o.parseCategories(); err != nil {
		return o, err
	}
	if o.noUpdate {
		return o, nil
	}
	if err := o.parseImages(); err != nil {
		return o, err
	}
	if o.upgraderImage == "" && o.images == nil {
		return o, fmt.Errorf("%w: -upgrader-image or -upgrader-images is required (or -no-update-machine)", errInvalidFlag)
	}
	if err := o.parseUpgrader(); err != nil {
		return o, err
	}
	return o, nil
}

// parseCategories fills cats from -in-place. With UpdateMachine served
// here, only the categories its kubeadm plan applies and verifies may be
// accepted (strategy.KubeadmCategories): accepting anything else would let
// Cluster API mark a machine up to date that the node never got. With
// -no-update-machine another extension applies the changes, so any
// built-in category goes; an unknown name is refused either way.
func (o *options) parseCategories() error {
	o.cats = nil
	for _, c := range strings.Split(o.categories, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.cats = append(o.cats, diff.Category(c))
		}
	}
	if len(o.cats) == 0 {
		return fmt.Errorf("%w: -in-place %q: name at least one diff category", errInvalidFlag, o.categories)
	}
	// A misspelt category would decline every change and have Cluster API
	// replace every machine; refuse it, with or without UpdateMachine.
	builtin := diff.BuiltinCategories()
	for _, c := range o.cats {
		if !slices.Contains(builtin, c) {
			names := make([]string, len(builtin))
			for i, b := range builtin {
				names[i] = string(b)
			}
			return fmt.Errorf("%w: -in-place: unknown category %q (categories: %s)", errInvalidFlag, c, strings.Join(names, ", "))
		}
	}
	if o.noUpdate {
		return nil
	}
	applied := strategy.KubeadmCategories()
	for _, c := range o.cats {
		if !slices.Contains(applied, c) {
			return fmt.Errorf("%w: -in-place: %q has no executor here (UpdateMachine applies and verifies only %s): it would be accepted and never applied; use -no-update-machine if another extension applies it", errInvalidFlag, c, defaultCategories())
		}
	}
	return nil
}

// parseImages fills images from -upgrader-images.
func (o *options) parseImages() error {
	if strings.TrimSpace(o.upgraderImages) == "" {
		return nil
	}
	if o.upgraderImage != "" {
		return fmt.Errorf("%w: -upgrader-image and -upgrader-images: set one", errInvalidFlag)
	}
	o.images = capi.ImagesByVersion{}
	for _, kv := range strings.Split(o.upgraderImages, ",") {
		v, img, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" || img == "" {
			return fmt.Errorf("%w: -upgrader-images: %q is not version=image", errInvalidFlag, kv)
		}
		if _, dup := o.images[v]; dup {
			return fmt.Errorf("%w: -upgrader-images: version %s twice", errInvalidFlag, v)
		}
		o.images[v] = img
	}
	if err := o.images.Validate(); err != nil {
		return fmt.Errorf("%w: -upgrader-images: %w", errInvalidFlag, err)
	}
	return nil
}

// parseUpgrader checks the upgrader pod flags and fills runnerArgv, mode
// and skip. It finishes by building a pod for a one-step plan with
// podOptions, so whatever nodepod refuses (a namespace that is not a DNS
// label, say) is refused at startup rather than at the first UpdateMachine.
func (o *options) parseUpgrader() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errInvalidFlag, fmt.Sprintf(format, args...))
	}
	if strings.ContainsAny(o.upgraderCommand, `"'\`) {
		return bad("-upgrader-command %q: no quotes or escapes, the command is split at spaces", o.upgraderCommand)
	}
	o.runnerArgv = strings.Fields(o.upgraderCommand)
	if argv := o.runnerArgv; len(argv) > 0 && path.Base(argv[0]) == "upgrader" {
		// examples/upgrader: the pod must run the plan, through nsenter.
		if len(argv) < 2 || argv[1] != "run" {
			return bad("-upgrader-command %q: the upgrader pod runs plans, so the upgrader's command must be \"run\" (%q)", o.upgraderCommand, defaultUpgraderCommand)
		}
		for _, a := range argv[2:] {
			if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); name == "direct" && strings.HasPrefix(a, "-") {
				return bad("-upgrader-command %q: %s would run host steps inside the container instead of through nsenter", o.upgraderCommand, a)
			}
		}
	}
	switch o.mode = nodepod.Mode(o.upgraderMode); o.mode {
	case nodepod.ModeInitContainers:
	case nodepod.ModeSingleContainer:
		if len(o.runnerArgv) == 0 {
			return bad("-upgrader-mode %s needs a runner: set -upgrader-command (default %q)", o.mode, defaultUpgraderCommand)
		}
	default:
		return bad("-upgrader-mode %q: want %s or %s", o.upgraderMode, nodepod.ModeInitContainers, nodepod.ModeSingleContainer)
	}
	if o.stageFrom != "" && (!path.IsAbs(o.stageFrom) || path.Clean(o.stageFrom) == "/") {
		return bad("-stage-from %q: must be an absolute directory of the upgrader image other than / (default %q)", o.stageFrom, defaultStageFrom)
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(o.skipSteps, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(skippableSteps, s) {
			return bad("-skip-steps: %q cannot be skipped; only %s can", s, strings.Join(skippableSteps, ", "))
		}
		o.skip[s] = true
	}
	probe := nodeexec.Plan{Name: "probe", Node: "probe", Steps: []nodeexec.Step{{Name: "probe", Argv: []string{"true"}}}}
	if _, err := nodepod.Build(probe, o.podOptions()...); err != nil {
		return fmt.Errorf("%w: upgrader pod: %w", errInvalidFlag, err)
	}
	return nil
}

// podOptions are the options of every upgrader pod the extension creates.
func (o options) podOptions() []nodepod.Option {
	img := o.upgraderImage
	if o.images != nil {
		// Any of them: the probe build needs one, and WithVersionImages
		// sets each update's own.
		for _, i := range o.images {
			img = i
			break
		}
	}
	opts := []nodepod.Option{
		nodepod.WithImage(img),
		nodepod.WithNamespace(o.upgraderNamespace),
		nodepod.WithMode(o.mode),
	}
	if len(o.runnerArgv) > 0 {
		opts = append(opts, nodepod.WithRunnerCommand(o.runnerArgv...))
	}
	if o.stageFrom != "" {
		opts = append(opts, nodepod.WithStageFrom(o.stageFrom))
	}
	return opts
}

// planConfig adjusts each node's kubeadm plan (capi.WithPlanConfig).
// The staging directory stays kubeadm.DefaultStagingDir, which is where
// the stage container of a pod built with podOptions puts the binaries.
//
// A skip MachineUpdater already decided (no etcd snapshot when etcd is
// external) is kept: -skip-steps only adds skips.
func (o options) planConfig(c *kubeadm.Config) {
	c.SkipContainerd = c.SkipContainerd || o.skip[kubeadm.StepContainerd]
	c.SkipCNIPlugins = c.SkipCNIPlugins || o.skip[kubeadm.StepCNIPlugins]
	c.SkipEtcdSnapshot = c.SkipEtcdSnapshot || o.skip[kubeadm.StepEtcdSnapshot]
}

// deps are what the handlers use besides the flags.
type deps struct {
	// mgmt reads the <cluster>-kubeconfig secrets (nil with -no-update-machine).
	mgmt     client.Reader
	scheme   *runtime.Scheme
	recorder events.EventRecorder // Events on Machines; nil records none
	metrics  *capi.Metrics
}

// handlers builds the extension's hook handlers.
func handlers(o options, d deps) ([]server.ExtensionHandler, error) {
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", o.cats...)
	if err != nil {
		return nil, err
	}
	extOpts := []capi.ExtensionOption{capi.WithMetrics(d.metrics)}
	if o.images != nil {
		extOpts = append(extOpts, capi.WithUpgraderImages(o.images))
	}
	if d.mgmt != nil {
		// No kubelet newer than its control plane: declined, never stranded.
		extOpts = append(extOpts, capi.WithChecks(capi.ControlPlaneSkewCheck(d.mgmt)))
	}
	updaters := []strategy.Updater{kubeadmUpdater}
	if !o.noUpdate {
		// UpdateMachine (served here) applies the kubelet's extra
		// arguments with every update and verifies them on the node.
		kubeletArgs, err := strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...)
		if err != nil {
			return nil, err
		}
		// And, on control planes, the static pods' configuration.
		cpConfig, err := strategy.ForPaths("control-plane-config", strategy.ControlPlaneConfigPaths()...)
		if err != nil {
			return nil, err
		}
		// And the KubeadmConfig's files it can write (inline content).
		files, err := strategy.ForPaths("files", strategy.FilesPaths()...)
		if err != nil {
			return nil, err
		}
		updaters = append(updaters, kubeletArgs, cpConfig, files)
	}
	ext, err := capi.NewExtension(strategy.Updaters(updaters...), extOpts...)
	if err != nil {
		return nil, err
	}
	hs := ext.Handlers(o.namePrefix)
	if o.noUpdate {
		return hs, nil
	}
	opts := []capi.MachineUpdaterOption{
		capi.WithRetryAfter(int32(o.retryAfter)),
		capi.WithPodOptions(o.podOptions()...),
		capi.WithPlanConfig(o.planConfig),
		capi.WithWorkloadClientset(capi.KubeconfigSecretClientsets(d.mgmt)),
		capi.WithDrainTimeout(o.drainTimeout),
		capi.WithUpdaterMetrics(d.metrics),
	}
	if !o.drain {
		opts = append(opts, capi.WithoutDrain())
	}
	if o.images != nil {
		opts = append(opts, capi.WithVersionImages(o.images))
	}
	if d.recorder != nil {
		opts = append(opts, capi.WithEventRecorder(d.recorder))
	}
	// Every request is checked against the live Machine before anything is
	// done, and Events attach to it.
	opts = append(opts, capi.WithManagementReader(d.mgmt))
	workload := capi.KubeconfigSecretClients(d.mgmt, d.scheme)
	if o.createNamespace {
		workload = withNamespace(workload, o.upgraderNamespace)
	}
	updater, err := capi.NewMachineUpdater(workload, opts...)
	if err != nil {
		return nil, err
	}
	return append(hs, updater.Handler(o.namePrefix)), nil
}

// podSecurityEnforce is the Pod Security admission label of a namespace.
const podSecurityEnforce = "pod-security.kubernetes.io/enforce"

// withNamespace makes sure each workload cluster has the namespace the
// upgrader pods go to, once per cluster and process, before the first
// client for that cluster is handed out: without it UpdateMachine could
// drain a node and then fail to create its upgrader pod. A missing
// namespace is created with the privileged Pod Security level (the pod
// uses hostPID, a hostPath and added capabilities); an existing one is
// not changed. Until that succeeds the cluster has no client, so
// UpdateMachine keeps answering "waiting for the workload cluster" with
// the error, and nothing is drained.
func withNamespace(get capi.WorkloadClient, namespace string) capi.WorkloadClient {
	var mu sync.Mutex
	ready := map[types.NamespacedName]bool{}
	return func(ctx context.Context, cluster types.NamespacedName) (client.Client, error) {
		c, err := get(ctx, cluster)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if ready[cluster] {
			return c, nil
		}
		// Get first: an identity that may not create namespaces is fine
		// as long as the namespace exists.
		err = c.Get(ctx, types.NamespacedName{Name: namespace}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
				podSecurityEnforce:     "privileged",
				nodepod.LabelManagedBy: nodepod.ManagedByValue,
			}}})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("namespace %s for the upgrader pods in cluster %s: %w", namespace, cluster, err)
		}
		ready[cluster] = true
		return c, nil
	}
}

// serve runs the runtime extension server, and the metrics server unless
// -metrics-bind-address is "0", until ctx ends. The metrics are registered
// on controller-runtime's registry, which the metrics server serves.
func serve(ctx context.Context, o options, d deps, log logr.Logger) error {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	// HTTP/1.1 only, as Cluster API's own servers: HTTP/2's rapid reset
	// (CVE-2023-44487) and stream multiplexing are of no use to a client
	// that sends one request at a time.
	srv, err := server.New(server.Options{Catalog: catalog, Host: o.host, Port: o.port, CertDir: o.certDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}})
	if err != nil {
		return err
	}
	if d.metrics == nil {
		if d.metrics, err = capi.NewMetrics(nil); err != nil {
			return err
		}
	}
	hs, err := handlers(o, d)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := srv.AddExtensionHandler(h); err != nil {
			return err
		}
		log.Info("serving hook", "handler", h.Name)
	}
	// Plain HTTP, like a controller-runtime manager's default; put it
	// behind kube-rbac-proxy or use SecureServing if scrapes must be
	// authenticated.
	ms, err := metricsserver.NewServer(metricsserver.Options{BindAddress: o.metricsAddr}, nil, nil)
	if err != nil {
		return err
	}
	if ms == nil { // "0": disabled
		return srv.Start(ctx)
	}
	// Whichever server stops first (an error, or ctx ending) stops the other.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- ms.Start(ctx) }()
	go func() { done <- srv.Start(ctx) }()
	first := <-done
	cancel()
	return errors.Join(first, <-done)
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := zap.New(zap.WriteTo(stderr))
	ctrllog.SetLogger(log)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return err
	}
	d := deps{scheme: scheme}
	if !o.noUpdate {
		cfg, err := restConfig(o.kubeconfig)
		if err != nil {
			return err
		}
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
	return serve(ctx, o, d, log)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := exitCode(run(ctx, os.Args[1:], os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}
