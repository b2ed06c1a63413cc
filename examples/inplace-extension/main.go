// Command inplace-extension is a Cluster API runtime extension that updates
// machines in place with upgradekit: CanUpdateMachine and
// CanUpdateMachineSet decide (and answer with patches), UpdateMachine
// drains the node, upgrades it with a kubeadm plan run by an upgrader pod,
// and uncordons it. Progress shows as a Node condition, Events on the
// Machine, Prometheus metrics (-metrics-bind-address) and logs.
//
//	inplace-extension -cert-dir /tmp/k8s-webhook-server/serving-certs \
//	    -updater-image registry.example/upgradekit-upgrader:v1.31.1
//
// See README.md for deploying it next to Cluster API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
)

// defaultCategories are the changes kubeadm can apply to a running node.
func defaultCategories() string {
	var names []string
	for _, c := range strategy.KubeadmCategories() {
		names = append(names, string(c))
	}
	return strings.Join(names, ",")
}

type options struct {
	host, certDir, namePrefix, updaterImage, categories, namespace string
	port                                                           int
	retryAfter                                                     int
	noUpdate                                                       bool
	drain                                                          bool
	drainTimeout                                                   time.Duration
	metricsAddr                                                    string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("inplace-extension", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.host, "host", "", "address to listen on (default: all)")
	fs.IntVar(&o.port, "port", 9443, "port to serve the hooks on")
	fs.StringVar(&o.certDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with tls.crt and tls.key")
	fs.StringVar(&o.namePrefix, "name", "upgradekit", "prefix of the handler names in the ExtensionConfig")
	fs.StringVar(&o.categories, "in-place", defaultCategories(), "comma-separated diff categories applied in place; anything else makes CAPI replace the machine")
	fs.StringVar(&o.updaterImage, "updater-image", "", "image of the node upgrader pod (it carries the kubeadm/kubelet/kubectl binaries); required unless -no-update-machine")
	fs.StringVar(&o.namespace, "updater-namespace", nodepod.DefaultNamespace, "namespace of the upgrader pods in workload clusters")
	fs.IntVar(&o.retryAfter, "retry-after", 15, "seconds CAPI waits between UpdateMachine calls while a node upgrades")
	fs.BoolVar(&o.noUpdate, "no-update-machine", false, "serve only CanUpdateMachine/CanUpdateMachineSet (decide, do not update)")
	fs.BoolVar(&o.drain, "drain", true, "cordon and drain each node (Eviction API, PDBs respected) before upgrading it, uncordon after")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", strategy.DefaultDrainTimeout, "how long a drain may stay unfinished before UpdateMachine answers Failure naming the blocking PDBs (0: no deadline)")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus /metrics endpoint (plain HTTP); "0" disables it`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if !o.noUpdate && o.updaterImage == "" {
		return o, errors.New("-updater-image is required (or -no-update-machine)")
	}
	if o.drainTimeout < 0 {
		return o, fmt.Errorf("-drain-timeout %s: must not be negative", o.drainTimeout)
	}
	return o, nil
}

// deps are what the handlers use besides the flags.
type deps struct {
	// mgmt reads the <cluster>-kubeconfig secrets (nil with -no-update-machine).
	mgmt     client.Reader
	scheme   *runtime.Scheme
	recorder events.EventRecorder // Events on Machines; nil records none
	metrics  *strategy.Metrics
}

// handlers builds the extension's hook handlers.
func handlers(o options, d deps) ([]server.ExtensionHandler, error) {
	var cats []diff.Category
	for _, c := range strings.Split(o.categories, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cats = append(cats, diff.Category(c))
		}
	}
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", cats...)
	if err != nil {
		return nil, err
	}
	ext, err := strategy.NewExtension(strategy.Updaters(kubeadmUpdater), strategy.WithMetrics(d.metrics))
	if err != nil {
		return nil, err
	}
	hs := ext.Handlers(o.namePrefix)
	if o.noUpdate {
		return hs, nil
	}
	opts := []strategy.MachineUpdaterOption{
		strategy.WithRetryAfter(int32(o.retryAfter)),
		strategy.WithPodOptions(nodepod.WithImage(o.updaterImage), nodepod.WithNamespace(o.namespace)),
		strategy.WithWorkloadClientset(strategy.KubeconfigSecretClientsets(d.mgmt)),
		strategy.WithDrainTimeout(o.drainTimeout),
		strategy.WithUpdaterMetrics(d.metrics),
	}
	if !o.drain {
		opts = append(opts, strategy.WithoutDrain())
	}
	if d.recorder != nil {
		opts = append(opts, strategy.WithEventRecorder(d.recorder))
	}
	updater, err := strategy.NewMachineUpdater(strategy.KubeconfigSecretClients(d.mgmt, d.scheme), opts...)
	if err != nil {
		return nil, err
	}
	return append(hs, updater.Handler(o.namePrefix)), nil
}

// serve runs the runtime extension server, and the metrics server unless
// -metrics-bind-address is "0", until ctx ends. The metrics are registered
// on controller-runtime's registry, which the metrics server serves.
func serve(ctx context.Context, o options, d deps, log logr.Logger) error {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	srv, err := server.New(server.Options{Catalog: catalog, Host: o.host, Port: o.port, CertDir: o.certDir})
	if err != nil {
		return err
	}
	if d.metrics == nil {
		if d.metrics, err = strategy.NewMetrics(nil); err != nil {
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
		cfg, err := config.GetConfig()
		if err != nil {
			return fmt.Errorf("management cluster config: %w", err)
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
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "inplace-extension:", err)
		os.Exit(1)
	}
}
