// Command inplace-extension is a Cluster API runtime extension that updates
// machines in place with upgradekit: CanUpdateMachine and
// CanUpdateMachineSet decide (and answer with patches), UpdateMachine
// upgrades the node with a kubeadm plan run by an upgrader pod.
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

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if !o.noUpdate && o.updaterImage == "" {
		return o, errors.New("-updater-image is required (or -no-update-machine)")
	}
	return o, nil
}

// handlers builds the extension's hook handlers.
func handlers(o options, mgmt client.Reader, scheme *runtime.Scheme) ([]server.ExtensionHandler, error) {
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
	ext, err := strategy.NewExtension(strategy.Updaters(kubeadmUpdater))
	if err != nil {
		return nil, err
	}
	hs := ext.Handlers(o.namePrefix)
	if o.noUpdate {
		return hs, nil
	}
	updater, err := strategy.NewMachineUpdater(strategy.KubeconfigSecretClients(mgmt, scheme),
		strategy.WithRetryAfter(int32(o.retryAfter)),
		strategy.WithPodOptions(nodepod.WithImage(o.updaterImage), nodepod.WithNamespace(o.namespace)))
	if err != nil {
		return nil, err
	}
	return append(hs, updater.Handler(o.namePrefix)), nil
}

// serve runs the runtime extension server until ctx ends.
func serve(ctx context.Context, o options, mgmt client.Reader, scheme *runtime.Scheme, log logr.Logger) error {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	srv, err := server.New(server.Options{Catalog: catalog, Host: o.host, Port: o.port, CertDir: o.certDir})
	if err != nil {
		return err
	}
	hs, err := handlers(o, mgmt, scheme)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := srv.AddExtensionHandler(h); err != nil {
			return err
		}
		log.Info("serving hook", "handler", h.Name)
	}
	return srv.Start(ctx)
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
	var mgmt client.Reader
	if !o.noUpdate {
		cfg, err := config.GetConfig()
		if err != nil {
			return fmt.Errorf("management cluster config: %w", err)
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		mgmt = c
	}
	return serve(ctx, o, mgmt, scheme, log)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "inplace-extension:", err)
		os.Exit(1)
	}
}
