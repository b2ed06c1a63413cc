// Command preview says, before you apply a change to a Cluster API
// cluster, which machines will be updated in place, which replaced and
// which will hold the rollout up, and why; with the waves they go in and
// how long it takes. It reads the cluster and asks exactly what Cluster
// API will ask of the in-place extension its ExtensionConfigs register
// (--mode extension, over HTTPS), or, with none registered, of upgradekit's
// decision in process, configured with the flags the deployed
// examples/inplace-extension runs with (--mode in-process); --mode auto, the
// default, picks the first that exists.
//
//	preview --cluster NAME [-n NAMESPACE] -f CHANGE.yaml [flags]
//
// Built as kubectl-upgradekit it is a kubectl plugin:
//
//	go build -o kubectl-upgradekit ./examples/preview
//	kubectl upgradekit preview -f change.yaml --cluster demo
//
// CHANGE.yaml holds the objects you are about to apply (what kubectl apply
// -f takes): a KubeadmControlPlane or MachineDeployment with a new version,
// new templates and the MachineDeployments pointing at them, a Cluster with
// a new spec.topology.version. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/examples/cli/gateflags"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// Exit codes, as in every example (examples/README.md): 0 every machine
// is updated in place or left alone, 1 an error, 2 a usage error, 3 some
// machines will be replaced, 4 some machines will hold the rollout up.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitReplaced = 3
	exitBlocked  = 4
)

// usageError is a command line that cannot run.
type usageError struct {
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Findings: not failures.
var (
	errReplaced = errors.New("machines will be replaced")
	errBlocked  = errors.New("machines will hold the rollout up")
)

// command is what the user typed to run preview: it installs as the
// kubectl plugin kubectl-upgradekit.
const command = "kubectl upgradekit preview"

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil), os.Stderr))
}

// exitCode prints err once and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil || errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.Is(err, errBlocked):
		return exitBlocked
	case errors.Is(err, errReplaced):
		return exitReplaced
	case errors.As(err, &ue):
		cli.PrintUsageError(stderr, command, err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", command, err)
	return exitError
}

type options struct {
	version                                               bool // --version: print it, preview nothing
	cluster, namespace, file, kubeconfig, context, output string
	categories, upgraderImage, upgraderImages             string
	extensionConfig, mode                                 string
	timeline, timingsFlag                                 string
	noUpdate, workload, serverDryRun                      bool
	timings                                               preview.Timings
	gateFlags                                             gateflags.Flags // the extension's gates, asked in process
	cats                                                  []diff.Category
	images                                                capi.ImagesByVersion
}

func usage(err error) error { return usageError{err: err} }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	// kubectl runs a plugin kubectl-upgradekit with the rest of its
	// command line: "kubectl upgradekit preview ..." arrives as "preview ...".
	if len(args) > 0 && args[0] == "preview" {
		args = args[1:]
	}
	var o options
	fs := cli.NewFlagSet(command)
	fs.Usage = func() {
		cli.WriteHelp(stderr, fs, "usage: "+command+" --cluster NAME [-n NAMESPACE] -f CHANGE.yaml [flags]",
			"exit: 0 in place or unchanged, 1 error, 2 usage, 3 machines replaced, 4 machines blocked")
	}
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.cluster, "cluster", "", "name of the Cluster (required)")
	fs.StringVarP(&o.namespace, "namespace", "n", "default", "namespace of the Cluster")
	fs.StringVarP(&o.file, "filename", "f", "", `the change: YAML or JSON objects as kubectl apply -f takes them ("-": standard input; none: what Cluster API would do now)`)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context to use")
	cli.OutputFlag(fs, &o.output, cli.Table, cli.JSON, cli.YAML)
	fs.StringVar(&o.categories, "in-place", defaultCategories(), "the extension's --in-place: diff categories it accepts in place")
	fs.StringVar(&o.upgraderImage, "upgrader-image", "", "the extension's --upgrader-image (one image, any version)")
	fs.StringVar(&o.upgraderImages, "upgrader-images", "", "the extension's --upgrader-images, version=image,...: a version not listed is answered with a Failure (Cluster API waits)")
	fs.BoolVar(&o.noUpdate, "no-update-machine", false, "the extension runs with --no-update-machine (it then accepts Kubernetes versions only)")
	fs.StringVar(&o.mode, "mode", modeAuto, "who answers Cluster API's hooks: extension (the in-place extension the cluster's ExtensionConfigs register, asked over HTTPS, its gates too), in-process (upgradekit's decision configured by --in-place, --upgrader-image(s), --no-update-machine, --extension-config, and the gates of --maintenance-window, --soak and --blocking-pod-selector) or auto (extension when one is registered, else in-process)")
	fs.StringVar(&o.extensionConfig, "extension-config", "", "ExtensionConfig whose settings Cluster API sends with each request (upgradekit.io/ignore, upgradekit.io/disabled)")
	fs.BoolVar(&o.workload, "workload", true, "read the workload cluster (Nodes, Pods, PodDisruptionBudgets) through its <cluster>-kubeconfig Secret, to find drain blockers")
	fs.StringVar(&o.timeline, "timeline", "", "also write the prediction as an HTML/SVG timeline to this file (estimated time; the groups side by side)")
	fs.StringVar(&o.timingsFlag, "timings", "", "your own figures for the estimates, name=duration,...: drain, replace, other (an updater without its own figure) and updater names (kubeadm, kubelet-args, control-plane-config, files); the rest keep their defaults: "+defaultTimings())
	o.gateFlags.Add(fs) // the extension's gate flags, for the in-process answer
	fs.BoolVar(&o.serverDryRun, "server-dry-run", true, "send the change and the desired control plane objects as server-side dry runs, so Cluster API's webhooks default and validate them (needs the patch verb; nothing is stored)")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, cli.ErrHelp) {
			return o, err
		}
		return o, usageError{err: err}
	}
	if o.version {
		return o, nil
	}
	switch {
	case fs.NArg() > 0:
		return o, usage(fmt.Errorf("unexpected arguments %q", fs.Args()))
	case o.cluster == "":
		return o, usage(errors.New("--cluster is required"))
	case cli.CheckOutput(o.output, cli.Table, cli.JSON, cli.YAML) != nil:
		return o, usage(cli.CheckOutput(o.output, cli.Table, cli.JSON, cli.YAML))
	case o.mode != modeAuto && o.mode != preview.ModeExtension && o.mode != preview.ModeInProcess:
		return o, usage(fmt.Errorf("--mode %q: want auto, extension or in-process", o.mode))
	case o.upgraderImage != "" && o.upgraderImages != "":
		return o, usage(errors.New("--upgrader-image and --upgrader-images: set one"))
	}
	for _, c := range strings.Split(o.categories, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.cats = append(o.cats, diff.Category(c))
		}
	}
	if strings.TrimSpace(o.upgraderImages) != "" {
		o.images = capi.ImagesByVersion{}
		for _, kv := range strings.Split(o.upgraderImages, ",") {
			v, img, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || v == "" || img == "" {
				return o, usage(fmt.Errorf("--upgrader-images: %q is not version=image", kv))
			}
			o.images[v] = img
		}
	}
	if err := o.gateFlags.Check(); err != nil {
		return o, usage(err)
	}
	if o.noUpdate && o.gateFlags.Set() {
		return o, usage(errors.New("--maintenance-window, --soak and --blocking-pod-selector gate UpdateMachine, which --no-update-machine does not serve"))
	}
	timings, err := parseTimings(o.timingsFlag)
	if err != nil {
		return o, usage(err)
	}
	o.timings = timings
	if err := extensionserver.Validate(o.extensionOptions()); err != nil {
		return o, usage(fmt.Errorf("the extension's flags: %w", err))
	}
	return o, nil
}

func defaultCategories() string {
	var names []string
	for _, c := range strategy.KubeadmCategories() {
		names = append(names, string(c))
	}
	return strings.Join(names, ",")
}

// extensionOptions configure the decision side as the deployed
// examples/inplace-extension is configured. Its UpdateMachine is never
// served here: the image only decides which versions are declined.
func (o options) extensionOptions() extensionserver.Options {
	opts := extensionserver.Options{Categories: o.cats}
	switch {
	case o.noUpdate:
		opts.DecideOnly = true
	case o.images != nil:
		opts.Images = o.images
	case o.upgraderImage != "":
		opts.UpgraderImage = o.upgraderImage
	default:
		// Which image is irrelevant to a decision; one is needed for the
		// server to build the updaters UpdateMachine applies.
		opts.UpgraderImage = "preview.invalid/upgrader:any"
	}
	if !o.noUpdate {
		// Nothing is pulled or run here: the image's digest and the
		// bundle's checksums matter to UpdateMachine, not to a decision
		// (a version without checksums, which the extension declines, is
		// not predicted).
		opts.AllowMutableUpgraderImages, opts.AllowUnverifiedBundles = true, true
	}
	return opts
}

// deps are what run reaches the outside through; tests give an envtest
// client instead of a kubeconfig.
type deps struct {
	mgmt client.Client
	// cfg reaches an extension behind a Service through the API server's
	// service proxy (nil: called directly).
	cfg *rest.Config
}

// modeAuto: the deployed extension when one is registered, else in process.
const modeAuto = "auto"

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, d *deps) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Version("kubectl-upgradekit"))
		return err
	}
	var change []*unstructured.Unstructured
	switch o.file {
	case "":
	case "-":
		if change, err = preview.ParseChange(stdin); err != nil {
			return usage(fmt.Errorf("-f -: %w", err))
		}
	default:
		f, err := os.Open(o.file)
		if err != nil {
			return usage(fmt.Errorf("-f: %w", err))
		}
		change, err = preview.ParseChange(f)
		_ = f.Close()
		if err != nil {
			return usage(fmt.Errorf("-f %s: %w", o.file, err))
		}
	}
	if d == nil {
		cfg, err := restConfig(o.kubeconfig, o.context)
		if err != nil {
			return err
		}
		scheme, err := newScheme()
		if err != nil {
			return err
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("management cluster client: %w", err)
		}
		d = &deps{mgmt: c}
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			// Outside the cluster a Service's name does not resolve:
			// reach it as kubectl does, through the API server.
			d.cfg = cfg
		}
	}
	key := client.ObjectKey{Namespace: o.namespace, Name: o.cluster}
	popts := []preview.Option{preview.WithTimings(o.timings)}
	if o.serverDryRun {
		popts = append(popts, preview.WithServerDryRun())
	}
	ans, err := answerer(ctx, o, d)
	if err != nil {
		return err
	}
	if o.extensionConfig != "" && ans == nil {
		var ec runtimev1.ExtensionConfig
		if err := d.mgmt.Get(ctx, client.ObjectKey{Name: o.extensionConfig}, &ec); err != nil {
			if apierrors.IsNotFound(err) {
				return usage(fmt.Errorf("--extension-config: no ExtensionConfig %q", o.extensionConfig))
			}
			return fmt.Errorf("read ExtensionConfig %s: %w", o.extensionConfig, err)
		}
		popts = append(popts, preview.WithSettings(ec.Spec.Settings))
	}
	if ans != nil && o.gateFlags.Set() {
		fmt.Fprintf(stderr, "%s: note: --maintenance-window, --soak and --blocking-pod-selector configure the in-process answer; the deployed extension's own gates answer\n", command)
	}
	if ans == nil {
		// Built again over the cluster as it will be at each step of a
		// managed topology's upgrade (preview.InProcess).
		ip, err := preview.NewInProcess(d.mgmt, func(mgmt client.Reader) (preview.Answerer, error) {
			srv, err := extensionserver.New(mgmt, o.extensionOptions())
			if err != nil {
				return nil, err
			}
			return srv.Extension(), nil
		})
		if err != nil {
			return usage(err)
		}
		ans = ip
		if o.gateFlags.Set() {
			// The gates the extension will ask, asked now, taking nothing.
			gates, err := o.gateFlags.Gates(workload.KubeconfigClient(d.mgmt, d.mgmt.Scheme()))
			if err != nil {
				return usage(err)
			}
			eo := o.extensionOptions()
			eo.Gates = gates
			srv, err := extensionserver.New(d.mgmt, eo)
			if err != nil {
				return usage(err)
			}
			popts = append(popts, preview.WithGateReporter(srv))
		}
	}
	var ropts []preview.ReadOption
	if o.workload {
		scheme := d.mgmt.Scheme()
		ropts = append(ropts, preview.WithWorkload(func(ctx context.Context, key client.ObjectKey) (client.Client, error) {
			return workload.KubeconfigClient(d.mgmt, scheme)(ctx, key)
		}))
	}
	start := time.Now()
	// On a terminal only: reading a large cluster takes a while.
	prog := cli.NewProgress(stderr, command)
	defer prog.Done()
	prog.Printf("reading Cluster %s and its machines...", key)
	snap, err := preview.Read(ctx, d.mgmt, key, ropts...)
	prog.Printf("asking the extension about Cluster %s...", key)
	if err != nil {
		if errors.Is(err, preview.ErrNotFound) {
			return usage(fmt.Errorf("--cluster: no Cluster %s", key))
		}
		return err
	}
	pr, err := preview.Predict(ctx, d.mgmt, snap, change, ans, popts...)
	if err != nil {
		if errors.Is(err, preview.ErrInvalidChange) {
			return usage(fmt.Errorf("-f %s: %w", o.file, err))
		}
		return err
	}
	took := time.Since(start)
	prog.Done()
	switch o.output {
	case cli.JSON, cli.YAML:
		if err := cli.WriteObject(stdout, o.output, "Prediction", pr); err != nil {
			return err
		}
	default:
		if err := pr.WriteTable(stdout); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "read and predicted %d machines in %s\n", len(pr.Machines), took.Round(time.Millisecond))
	}
	if o.timeline != "" {
		f, err := os.Create(o.timeline)
		if err != nil {
			return fmt.Errorf("--timeline: %w", err)
		}
		err = writeTimeline(f, pr, o.timings)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--timeline: %w", err)
		}
		fmt.Fprintf(stderr, "timeline written to %s\n", o.timeline)
	}
	count := pr.Count()
	switch {
	case count[strategy.MethodBlocked] > 0:
		return errBlocked
	case count[strategy.MethodReplace] > 0:
		return errReplaced
	}
	return nil
}

// answerer is the deployed extension for --mode extension, and for auto
// when one is registered; nil for the in-process answer.
func answerer(ctx context.Context, o options, d *deps) (preview.Answerer, error) {
	if o.mode == preview.ModeInProcess {
		return nil, nil
	}
	var dopts []preview.DeployedOption
	if d.cfg != nil {
		dopts = append(dopts, preview.ThroughServiceProxy(d.cfg))
	}
	dep, err := preview.FindDeployed(ctx, d.mgmt, o.namespace, dopts...)
	switch {
	case err == nil:
		return dep, nil
	case errors.Is(err, preview.ErrNoExtension) && o.mode == modeAuto:
		return nil, nil
	}
	return nil, fmt.Errorf("--mode %s: %w", o.mode, err)
}

// restConfig is the management cluster's config: --kubeconfig, else
// $KUBECONFIG or ~/.kube/config, else the in-cluster config, through
// client-go's loading rules, with --context.
func restConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("management cluster config (--kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster): %w", err)
	}
	return cfg, nil
}

// newScheme knows the kinds the preview reads: Kubernetes' own, Cluster
// API's core, kubeadm bootstrap and control plane, and ExtensionConfig.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme, runtimev1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// defaultTimings lists preview.DefaultTimings as --timings would set them.
func defaultTimings() string {
	t := preview.DefaultTimings()
	parts := []string{"drain=" + t.Drain.String(), "replace=" + t.Replace.String(), "other=" + t.Updater.String()}
	for _, u := range slices.Sorted(maps.Keys(t.Updaters)) {
		parts = append(parts, u+"="+t.Updaters[u].String())
	}
	return strings.Join(parts, ",")
}

// parseTimings applies --timings over preview.DefaultTimings.
func parseTimings(s string) (preview.Timings, error) {
	t := preview.DefaultTimings()
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	known := map[string]bool{"drain": true, "replace": true, "other": true}
	for u := range t.Updaters {
		known[u] = true
	}
	for _, kv := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return t, fmt.Errorf("--timings: %q is not name=duration", kv)
		}
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return t, fmt.Errorf("--timings: %s: %q is not a duration", name, val)
		}
		switch name {
		case "drain":
			t.Drain = d
		case "replace":
			t.Replace = d
		case "other":
			t.Updater = d
		default:
			if !known[name] {
				return t, fmt.Errorf("--timings: no updater %q (want drain, replace, other or one of %s)", name, strings.Join(slices.Sorted(maps.Keys(t.Updaters)), ", "))
			}
			t.Updaters[name] = d
		}
	}
	return t, nil
}
