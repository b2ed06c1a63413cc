package extensionserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// SkippableSteps are the kubeadm plan steps Options.SkipSteps may leave out
// (kubeadm.Config's Skip* fields): containerd, the CNI plugins and the etcd
// snapshot. The bundle image then need not carry what they install or use.
func SkippableSteps() []string {
	return []string{kubeadm.StepContainerd, kubeadm.StepCNIPlugins, kubeadm.StepEtcdSnapshot}
}

func capiKubeadmCategories() []diff.Category { return strategy.KubeadmCategories() }

// Server is a ready Cluster API in-place update runtime extension:
// CanUpdateMachine and CanUpdateMachineSet (capi.Extension) accepting only
// what UpdateMachine (capi.MachineUpdater) applies and verifies, and, unless
// DecideOnly, UpdateMachine itself with drain, an upgrader pod per node, a
// namespace for it and the checks of every request against the management
// cluster. Start serves them over TLS; Handlers gives them to a server of
// your own.
type Server struct {
	cfg       config
	handlers  []server.ExtensionHandler
	extension *capi.Extension
	// gateReport serves gatereport.Path (nil with DecideOnly), from
	// updater's gates read through mgmt.
	gateReport http.Handler
	updater    *capi.MachineUpdater
	mgmt       client.Reader
	// listening is the address the hooks are served on while Start
	// serves them (nil before and after).
	listening atomic.Pointer[string]
}

// New builds the extension. mgmt reads the management cluster: the
// <cluster>-kubeconfig Secrets of the workload clusters, Machines (every
// UpdateMachine request is checked against the live Machine before
// anything is done) and control plane versions (capi.ControlPlaneSkewCheck).
// A mgmt that is a client.Client also writes: the removal of
// KubeadmControlPlane's certificate expiry annotation after a renewal, and
// the dry runs of capi.ExtensionOptions.InfrastructureDryRun (an accepted
// infrastructure template change tried on the MachineSet's infrastructure
// machines first). It may be nil only with DecideOnly. Every option is checked here, so a
// mistake fails at start-up, not at the first update; the errors match
// capi.ErrInvalidOption, are *capi.OptionError and name the field.
func New(mgmt client.Reader, opts Options) (*Server, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	if mgmt == nil && !cfg.DecideOnly {
		return nil, &capi.OptionError{Option: "New", Detail: "nil management cluster reader (needed by UpdateMachine; use Options.DecideOnly to serve only CanUpdate*)"}
	}
	if cfg.Scheme == nil {
		cfg.Scheme = clientgoscheme.Scheme
	}
	if cfg.Metrics == nil {
		if cfg.Metrics, err = capi.NewMetrics(nil, capi.MetricsOptions{}); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg}
	if err := s.cfg.loadChecksums(); err != nil {
		return nil, err
	}
	if s.handlers, err = s.buildHandlers(mgmt); err != nil {
		return nil, err
	}
	return s, nil
}

// Validate checks options as New does, without a cluster: a command can
// refuse its flags before it connects anywhere.
func Validate(opts Options) error {
	_, err := build(opts)
	return err
}

func build(opts Options) (config, error) {
	cfg := opts.config()
	if err := opts.validate(); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

func invalid(option, format string, args ...any) error {
	return &capi.OptionError{Option: option, Detail: fmt.Sprintf(format, args...)}
}

func (c *config) validate() error {
	if c.Port < 1 || c.Port > 65535 {
		return invalid("Options.Port", "port %d: must be between 1 and 65535", c.Port)
	}
	if err := c.HTTPLimits.validate(); err != nil {
		return err
	}
	if err := c.validateCategories(); err != nil {
		return err
	}
	if c.DecideOnly {
		return nil
	}
	switch {
	case c.UpgraderImage != "" && c.Images != nil:
		return invalid("Options.UpgraderImage", "and UpdaterOptions.Images are both set: set one")
	case c.Images != nil:
		if err := c.Images.Validate(); err != nil {
			return &capi.OptionError{Option: "UpdaterOptions.Images", Err: err}
		}
	case strings.TrimSpace(c.UpgraderImage) == "":
		return invalid("Options.UpgraderImage", "required (or UpdaterOptions.Images, or Options.DecideOnly)")
	}
	if err := c.validateSupplyChain(); err != nil {
		return err
	}
	switch c.UpgraderMode {
	case nodepod.ModeInitContainers:
	case nodepod.ModeSingleContainer:
		if len(c.UpgraderCommand) == 0 {
			return invalid("Options.UpgraderMode", "%s needs a runner command (Options.UpgraderCommand; default %q)", c.UpgraderMode, strings.Join(DefaultUpgraderCommand(), " "))
		}
	default:
		return invalid("Options.UpgraderMode", "%s: want %s or %s", errtext.Quote(string(c.UpgraderMode)), nodepod.ModeInitContainers, nodepod.ModeSingleContainer)
	}
	for i, a := range c.UpgraderCommand {
		if a == "" {
			return invalid("Options.UpgraderCommand", "argument %d is empty", i)
		}
	}
	if c.StageFrom != "" && (!path.IsAbs(c.StageFrom) || path.Clean(c.StageFrom) == "/") {
		return invalid("Options.StageFrom", "%s: must be an absolute directory of the upgrader image other than / (default %q)", errtext.Quote(c.StageFrom), DefaultStageFrom)
	}
	for _, s := range c.SkipSteps {
		if !slices.Contains(SkippableSteps(), s) {
			return invalid("Options.SkipSteps", "%s cannot be skipped; only %s can", errtext.Quote(s), strings.Join(SkippableSteps(), ", "))
		}
	}
	if err := kubeadm.ValidatePreflightErrors("checks", c.IgnorePreflightErrors); err != nil {
		return &capi.OptionError{Option: "Options.IgnorePreflightErrors", Err: err}
	}
	// The updater's options are checked as NewMachineUpdater checks them,
	// now rather than at the first UpdateMachine: whatever nodepod refuses
	// (a namespace that is not a DNS label, say) included. The workload
	// client is not called.
	noCluster := func(context.Context, types.NamespacedName) (client.Client, error) {
		return nil, errors.New("no cluster while validating")
	}
	if _, err := capi.NewMachineUpdater(noCluster, c.updaterOptions(nil)); err != nil {
		return err
	}
	return nil
}

// validateCategories: known names only, and with UpdateMachine served
// here only what it applies and verifies, or Cluster API would mark a
// machine up to date that the node never got.
func (c *config) validateCategories() error {
	builtin := diff.BuiltinCategories()
	for _, cat := range c.Categories {
		if !slices.Contains(builtin, cat) {
			return invalid("Options.Categories", "unknown category %s (categories: %s)", errtext.Quote(string(cat)), joinCategories(builtin))
		}
	}
	if c.DecideOnly {
		return nil
	}
	applied := strategy.KubeadmCategories()
	for _, cat := range c.Categories {
		if !slices.Contains(applied, cat) {
			return invalid("Options.Categories", "%q has no executor here (UpdateMachine applies and verifies only %s): it would be accepted and never applied; use Options.DecideOnly if another extension applies it", cat, joinCategories(applied))
		}
	}
	return nil
}

func (l HTTPLimits) validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxRequestBytes", l.MaxRequestBytes},
		{"MaxConcurrent", int64(l.MaxConcurrent)},
		{"MaxHeaderBytes", int64(l.MaxHeaderBytes)},
		{"ReadHeaderTimeout", int64(l.ReadHeaderTimeout)},
		{"ReadTimeout", int64(l.ReadTimeout)},
		{"WriteTimeout", int64(l.WriteTimeout)},
		{"IdleTimeout", int64(l.IdleTimeout)},
	} {
		if f.v <= 0 {
			return invalid("Options.HTTPLimits", "%s %d: must not be negative (0 keeps the default)", f.name, f.v)
		}
	}
	return nil
}

func joinCategories(cats []diff.Category) string {
	names := make([]string, len(cats))
	for i, c := range cats {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// podOptions are the options of every upgrader pod.
func (c *config) podOptions() []nodepod.Option {
	img := c.UpgraderImage
	if len(c.Images) > 0 {
		// The first by version: the probe build needs one, and
		// capi.UpdaterOptions.Images sets each update's own.
		img = c.Images[slices.Sorted(maps.Keys(c.Images))[0]]
	}
	opts := []nodepod.Option{
		nodepod.WithImage(img),
		nodepod.WithNamespace(c.UpgraderNamespace),
		nodepod.WithMode(c.UpgraderMode),
	}
	if len(c.UpgraderCommand) > 0 {
		opts = append(opts, nodepod.WithRunnerCommand(c.UpgraderCommand...))
	}
	if c.StageFrom != "" {
		opts = append(opts, nodepod.WithStageFrom(c.StageFrom))
	}
	return append(opts, c.PodOptions...)
}

// updaterOptions are the options of the server's MachineUpdater: the
// embedded UpdaterOptions, with the server's pod options before theirs,
// the server's plan configuration before their PlanConfig, and the
// defaults that reach the workload clusters through mgmt.
func (c *config) updaterOptions(mgmt client.Reader) capi.UpdaterOptions {
	o := c.UpdaterOptions
	o.PodOptions = c.podOptions()
	o.PlanConfig = c.planConfig
	if o.Clientset == nil {
		o.Clientset = workload.KubeconfigClientset(mgmt)
	}
	// Every request is checked against the live Machine before anything
	// is done, and Events attach to it.
	o.ManagementReader = mgmt
	return o
}

// PodOptions are the nodepod options of every upgrader pod the server
// creates (the target version's image replaces WithImage's when
// UpdaterOptions.Images is used). A nil Server has none.
func (s *Server) PodOptions() []nodepod.Option {
	if s == nil {
		return nil
	}
	return s.cfg.podOptions()
}

// PlanConfig adjusts each node's kubeadm plan as UpdateMachine does: the
// target version's bundle checksums are set and required (unless
// Options.AllowUnverifiedBundles), the steps of Options.SkipSteps are left out, a skip
// MachineUpdater already decided (no etcd snapshot when etcd is external)
// is kept, the checks of Options.IgnorePreflightErrors are ignored, and
// then UpdaterOptions.PlanConfig, if any, runs. The staging directory
// stays kubeadm.DefaultStagingDir, where the stage container puts the
// binaries. A nil Server or Config changes nothing.
func (s *Server) PlanConfig(c *kubeadm.Config) {
	if s == nil || c == nil {
		return
	}
	s.cfg.planConfig(c)
}

// planConfig is PlanConfig.
func (c *config) planConfig(k *kubeadm.Config) {
	c.planChecksums(k)
	c.applySkips(k)
	k.IgnorePreflightErrors = append(k.IgnorePreflightErrors, c.IgnorePreflightErrors...)
	if c.PlanConfig != nil {
		c.PlanConfig(k)
	}
}

// Metrics are the server's Prometheus metrics (nil, which records nothing,
// for a nil Server).
func (s *Server) Metrics() *capi.Metrics {
	if s == nil {
		return nil
	}
	return s.cfg.Metrics
}

// Handlers are the hook handlers, for a runtime extension server of your
// own (sigs.k8s.io/cluster-api/exp/runtime/server): CanUpdateMachine,
// CanUpdateMachineSet and, unless DecideOnly, UpdateMachine. A nil Server
// has none.
func (s *Server) Handlers() []server.ExtensionHandler {
	if s == nil {
		return nil
	}
	return slices.Clone(s.handlers)
}

// Extension is the CanUpdate* side of the server, the decision its hooks
// answer with: what strategy/capi/preview asks to predict what this
// extension will do (nil on a nil Server).
func (s *Server) Extension() *capi.Extension {
	if s == nil {
		return nil
	}
	return s.extension
}

func (s *Server) buildHandlers(mgmt client.Reader) ([]server.ExtensionHandler, error) {
	c := s.cfg
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", c.Categories...)
	if err != nil {
		return nil, err
	}
	// One image map for both sides: CanUpdate* refuses a version
	// UpdateMachine has no image for.
	extOpts := capi.ExtensionOptions{Metrics: c.Metrics, Logger: c.Logger, Images: c.Images}
	checks := slices.Clone(c.Checks)
	if chk := c.checksumsCheck(); chk != nil {
		checks = append(checks, chk)
	}
	if w, ok := mgmt.(client.Client); ok {
		// An accepted infrastructure template change is tried on the
		// MachineSet's infrastructure machines (a dry run of Cluster API's
		// write) first: a provider that refuses it gets a decline, not a
		// Machine stuck between its MachineSets.
		extOpts.InfrastructureDryRun = w
	}
	if mgmt != nil {
		// No kubelet newer than its control plane: declined, never stranded.
		// Before it, a cluster whose kubeconfig secret the extension cannot
		// read (a namespace without its RoleBindings) or whose API server
		// refuses it is declined: in place, UpdateMachine could not reach
		// it. Nothing else about such a cluster can be read anyway. (Only
		// where this server's UpdateMachine is the one that must reach it.)
		first := []capi.Check{capi.ControlPlaneSkewCheck(mgmt)}
		if !c.DecideOnly {
			first = append([]capi.Check{capi.WorkloadReachableCheck(workload.KubeconfigClient(mgmt, c.Scheme), capi.ReachableOptions{})}, first...)
		}
		checks = append(first, checks...)
	}
	extOpts.Checks = checks
	if c.EventRecorder != nil && mgmt != nil {
		// A CanUpdate* Failure where `kubectl describe` shows it.
		extOpts.EventRecorder, extOpts.ManagementReader = c.EventRecorder, mgmt
	}
	updaters := []strategy.Updater{kubeadmUpdater}
	if !c.DecideOnly {
		// UpdateMachine applies the kubelet's extra arguments with every
		// update, the static pods' configuration on control planes and the
		// KubeadmConfig's inline files, and verifies them on the node.
		for _, p := range []struct {
			name  string
			paths []string
		}{
			{"kubelet-args", strategy.KubeletExtraArgsPaths()},
			{"control-plane-config", strategy.ControlPlaneConfigPaths()},
			{"files", strategy.FilesPaths()},
		} {
			u, err := strategy.ForPaths(p.name, p.paths...)
			if err != nil {
				return nil, err
			}
			updaters = append(updaters, u)
		}
	}
	ext, err := capi.NewExtension(strategy.Updaters(updaters...), extOpts)
	if err != nil {
		return nil, err
	}
	s.extension = ext
	hs := ext.Handlers(c.HandlerPrefix)
	if c.DecideOnly {
		return hs, nil
	}
	opts := s.cfg.updaterOptions(mgmt)
	workload := workload.KubeconfigClient(mgmt, c.Scheme)
	if !c.SkipNamespaceCreation {
		workload = EnsureNamespace(workload, c.UpgraderNamespace)
	}
	updater, err := capi.NewMachineUpdater(workload, opts)
	if err != nil {
		return nil, err
	}
	s.gateReport, s.updater, s.mgmt = gatereport.NewHandler(mgmt, updater, c.Logger), updater, mgmt
	return append(hs, updater.Handler(c.HandlerPrefix)), nil
}

// ReportGates says what the gates of UpdaterOptions.Gates would answer now about
// machines of cluster, taking nothing: the report Start serves at
// gatereport.Path, made in process (for a preview of an extension not
// deployed yet). A Server with DecideOnly serves no UpdateMachine, so it
// has no gates to report: ErrInvalidOption.
func (s *Server) ReportGates(ctx context.Context, cluster client.ObjectKey, machines []string) (*gatereport.Report, error) {
	if s == nil || s.updater == nil {
		return nil, invalid("ReportGates", "a Server made by New without Options.DecideOnly")
	}
	return gatereport.Build(ctx, s.mgmt, s.updater, &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: cluster.Namespace, Name: cluster.Name}, Machines: machines})
}

// Start serves the hooks over TLS until ctx ends (it is a
// controller-runtime manager.Runnable: mgr.Add(s) runs it with the
// manager). HTTP/1.1 only, as Cluster API's own servers: HTTP/2's rapid
// reset (CVE-2023-44487) and stream multiplexing are of no use to a client
// that sends one request at a time. The hooks are Cluster API's runtime
// extension server's (discovery, decoding, answers), served by an
// http.Server with the limits of Options.HTTPLimits (body size, requests at
// once, header size, read, write and idle timeouts). Metrics are not
// served here: they are on the registry of UpdaterOptions.Metrics, by default
// controller-runtime's, which a manager's metrics server serves.
func (s *Server) Start(ctx context.Context) error {
	if s == nil || s.cfg.HandlerPrefix == "" {
		return invalid("Start", "a Server not made by New")
	}
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	tlsOpts := append([]func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}, s.cfg.TLSOptions...)
	srv, err := server.New(server.Options{Catalog: catalog, Host: s.cfg.Host, Port: s.cfg.Port, CertDir: s.cfg.CertDir, TLSOpts: tlsOpts})
	if err != nil {
		return err
	}
	// Cluster API's server registers the handlers on the embedded
	// controller-runtime server and starts it: ours serves its mux with
	// our limits.
	srv.Server = &hookServer{Server: srv.Server, limits: s.cfg.HTTPLimits, host: s.cfg.Host, port: s.cfg.Port, certDir: s.cfg.CertDir, tlsOpts: tlsOpts, log: s.cfg.Logger, listening: &s.listening}
	for _, h := range s.handlers {
		if err := srv.AddExtensionHandler(h); err != nil {
			return fmt.Errorf("handler %s: %w", h.Name, err)
		}
		s.cfg.Logger.Info("serving hook", "handler", h.Name)
	}
	if s.gateReport != nil {
		// What UpdateMachine's gates would answer now, for a preview.
		srv.Server.Register(gatereport.Path, s.gateReport)
		s.cfg.Logger.Info("serving the gate report", "path", gatereport.Path)
	}
	if err := srv.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
