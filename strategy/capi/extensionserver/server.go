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
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// ErrInvalidOption is matched by every error of New and Validate about
// their options; it is capi.ErrInvalidOption, so one errors.Is covers both
// packages. The message names the option.
var ErrInvalidOption = capi.ErrInvalidOption

// SkippableSteps are the kubeadm plan steps WithSkipSteps may leave out
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
// ErrInvalidOption and name the option.
func New(mgmt client.Reader, opts ...Option) (*Server, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	if mgmt == nil && !cfg.decideOnly {
		return nil, invalid("New", "nil management cluster reader (needed by UpdateMachine; use DecideOnly to serve only CanUpdate*)")
	}
	if cfg.scheme == nil {
		cfg.scheme = clientgoscheme.Scheme
	}
	if cfg.metrics == nil {
		if cfg.metrics, err = capi.NewMetrics(nil); err != nil {
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
func Validate(opts ...Option) error {
	_, err := build(opts)
	return err
}

func build(opts []Option) (config, error) {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg, cfg.validate()
}

// OptionError is New's and Validate's error about one option. It matches
// ErrInvalidOption, and Err too when there is one.
type OptionError struct {
	// Option is the option's name, such as "WithSkipSteps".
	Option string
	// Detail says what is wrong, starting with the offending value where
	// there is one.
	Detail string
	// Err is the underlying error, if any (nodepod's, capi's).
	Err error
}

// Error names the option and says what is wrong with it.
func (e *OptionError) Error() string {
	msg := "invalid option: " + e.Option
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + errtext.Cap(e.Err.Error())
	}
	return msg
}

// Unwrap gives ErrInvalidOption and Err.
func (e *OptionError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidOption}
	}
	return []error{ErrInvalidOption, e.Err}
}

func invalid(option, format string, args ...any) error {
	return &OptionError{Option: option, Detail: fmt.Sprintf(format, args...)}
}

func (c *config) validate() error {
	if c.port < 1 || c.port > 65535 {
		return invalid("WithServing", "port %d: must be between 1 and 65535", c.port)
	}
	if c.certDir == "" {
		return invalid("WithServing", "empty certificate directory")
	}
	if c.prefix == "" {
		return invalid("WithHandlerPrefix", "empty prefix")
	}
	if err := c.limits.validate(); err != nil {
		return err
	}
	if err := c.validateCategories(); err != nil {
		return err
	}
	for i, g := range c.gates {
		if g == nil {
			return invalid("WithGates", "gate %d is nil", i)
		}
	}
	if len(c.gates) > 0 && c.decideOnly {
		return invalid("WithGates", "DecideOnly serves no UpdateMachine to gate")
	}
	if c.decideOnly {
		return nil
	}
	if c.retryAfter < 1 || c.retryAfter > 86400 {
		return invalid("WithRetryAfter", "%d: must be between 1 and 86400 seconds", c.retryAfter)
	}
	if c.drainTimeout < 0 {
		return invalid("WithDrainTimeout", "%s: must not be negative", c.drainTimeout)
	}
	if c.unreachable < 0 {
		return invalid("WithWorkloadUnreachableTimeout", "%s: must not be negative", c.unreachable)
	}
	switch {
	case c.image != "" && c.images != nil:
		return invalid("WithUpgraderImage", "and WithUpgraderImages are both set: set one")
	case c.images != nil:
		if err := c.images.Validate(); err != nil {
			return &OptionError{Option: "WithUpgraderImages", Err: err}
		}
	case strings.TrimSpace(c.image) == "":
		return invalid("WithUpgraderImage", "required (or WithUpgraderImages, or DecideOnly)")
	}
	if err := c.validateSupplyChain(); err != nil {
		return err
	}
	switch c.mode {
	case nodepod.ModeInitContainers:
	case nodepod.ModeSingleContainer:
		if len(c.runner) == 0 {
			return invalid("WithUpgraderMode", "%s needs a runner command (WithUpgraderCommand; default %q)", c.mode, strings.Join(DefaultUpgraderCommand(), " "))
		}
	default:
		return invalid("WithUpgraderMode", "%s: want %s or %s", errtext.Quote(string(c.mode)), nodepod.ModeInitContainers, nodepod.ModeSingleContainer)
	}
	for i, a := range c.runner {
		if a == "" {
			return invalid("WithUpgraderCommand", "argument %d is empty", i)
		}
	}
	if c.stageFrom != "" && (!path.IsAbs(c.stageFrom) || path.Clean(c.stageFrom) == "/") {
		return invalid("WithStageFrom", "%s: must be an absolute directory of the upgrader image other than / (default %q)", errtext.Quote(c.stageFrom), DefaultStageFrom)
	}
	for _, s := range c.skip {
		if !slices.Contains(SkippableSteps(), s) {
			return invalid("WithSkipSteps", "%s cannot be skipped; only %s can", errtext.Quote(s), strings.Join(SkippableSteps(), ", "))
		}
	}
	if err := kubeadm.ValidatePreflightErrors("checks", c.ignorePreflight); err != nil {
		return &OptionError{Option: "WithIgnorePreflightErrors", Err: err}
	}
	// Whatever nodepod refuses (a namespace that is not a DNS label, say)
	// is refused now rather than at the first UpdateMachine.
	probe := nodeexec.Plan{Name: "probe", Node: "probe", Steps: []nodeexec.Step{{Name: "probe", Argv: []string{"true"}}}}
	if _, err := nodepod.Build(probe, c.podOptions()...); err != nil {
		return &OptionError{Option: "WithPodOptions", Err: err}
	}
	return nil
}

// validateCategories: known names only, and with UpdateMachine served
// here only what it applies and verifies, or Cluster API would mark a
// machine up to date that the node never got.
func (c *config) validateCategories() error {
	if len(c.cats) == 0 {
		return invalid("WithCategories", "name at least one diff category")
	}
	builtin := diff.BuiltinCategories()
	for _, cat := range c.cats {
		if !slices.Contains(builtin, cat) {
			return invalid("WithCategories", "unknown category %s (categories: %s)", errtext.Quote(string(cat)), joinCategories(builtin))
		}
	}
	if c.decideOnly {
		return nil
	}
	applied := strategy.KubeadmCategories()
	for _, cat := range c.cats {
		if !slices.Contains(applied, cat) {
			return invalid("WithCategories", "%q has no executor here (UpdateMachine applies and verifies only %s): it would be accepted and never applied; use DecideOnly if another extension applies it", cat, joinCategories(applied))
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
			return invalid("WithHTTPLimits", "%s %d: must be positive (0 keeps the default)", f.name, f.v)
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
	img := c.image
	if len(c.images) > 0 {
		// The first by version: the probe build needs one, and
		// capi.UpdaterOptions.Images sets each update's own.
		img = c.images[slices.Sorted(maps.Keys(c.images))[0]]
	}
	opts := []nodepod.Option{
		nodepod.WithImage(img),
		nodepod.WithNamespace(c.namespace),
		nodepod.WithMode(c.mode),
	}
	if len(c.runner) > 0 {
		opts = append(opts, nodepod.WithRunnerCommand(c.runner...))
	}
	if c.stageFrom != "" {
		opts = append(opts, nodepod.WithStageFrom(c.stageFrom))
	}
	return append(opts, c.extraPodOptions...)
}

// PodOptions are the nodepod options of every upgrader pod the server
// creates (the target version's image replaces WithImage's when
// WithUpgraderImages is used). A nil Server has none.
func (s *Server) PodOptions() []nodepod.Option {
	if s == nil {
		return nil
	}
	return s.cfg.podOptions()
}

// PlanConfig adjusts each node's kubeadm plan as UpdateMachine does: the
// target version's bundle checksums are set and required (unless
// WithoutBundleChecksums), the steps of WithSkipSteps are left out, a skip
// MachineUpdater already decided (no etcd snapshot when etcd is external)
// is kept, and the checks of WithIgnorePreflightErrors are ignored. The staging
// directory stays kubeadm.DefaultStagingDir, where the stage container puts
// the binaries. A nil Server or Config changes nothing.
func (s *Server) PlanConfig(c *kubeadm.Config) {
	if s == nil || c == nil {
		return
	}
	s.cfg.planChecksums(c)
	s.cfg.applySkips(c)
	c.IgnorePreflightErrors = append(c.IgnorePreflightErrors, s.cfg.ignorePreflight...)
}

// Metrics are the server's Prometheus metrics (nil, which records nothing,
// for a nil Server).
func (s *Server) Metrics() *capi.Metrics {
	if s == nil {
		return nil
	}
	return s.cfg.metrics
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
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", c.cats...)
	if err != nil {
		return nil, err
	}
	// One image map for both sides: CanUpdate* refuses a version
	// UpdateMachine has no image for.
	extOpts := capi.ExtensionOptions{Metrics: c.metrics, Logger: c.log, Images: c.images}
	checks := slices.Clone(c.checks)
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
		if !c.decideOnly {
			first = append([]capi.Check{capi.WorkloadReachableCheck(workload.KubeconfigClient(mgmt, c.scheme), capi.ReachableOptions{})}, first...)
		}
		checks = append(first, checks...)
	}
	extOpts.Checks = checks
	if c.recorder != nil && mgmt != nil {
		// A CanUpdate* Failure where `kubectl describe` shows it.
		extOpts.EventRecorder, extOpts.ManagementReader = c.recorder, mgmt
	}
	updaters := []strategy.Updater{kubeadmUpdater}
	if !c.decideOnly {
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
	hs := ext.Handlers(c.prefix)
	if c.decideOnly {
		return hs, nil
	}
	drainTimeout := c.drainTimeout
	if drainTimeout == 0 {
		drainTimeout = -1 // no deadline
	}
	unreachable := c.unreachable
	if unreachable == 0 {
		unreachable = -1 // no deadline
	}
	opts := capi.UpdaterOptions{
		RetryAfter:                 time.Duration(c.retryAfter) * time.Second,
		PodOptions:                 c.podOptions(),
		PlanConfig:                 s.PlanConfig,
		Clientset:                  workload.KubeconfigClientset(mgmt),
		SkipDrain:                  !c.drain,
		DrainTimeout:               drainTimeout,
		WorkloadUnreachableTimeout: unreachable,
		Metrics:                    c.metrics,
		Logger:                     c.log,
		// Every request is checked against the live Machine before
		// anything is done, and Events attach to it.
		ManagementReader: mgmt,
		Gates:            c.gates,
		Images:           c.images,
		EventRecorder:    c.recorder,
	}
	workload := workload.KubeconfigClient(mgmt, c.scheme)
	if c.createNamespace {
		workload = EnsureNamespace(workload, c.namespace)
	}
	updater, err := capi.NewMachineUpdater(workload, opts)
	if err != nil {
		return nil, err
	}
	s.gateReport, s.updater, s.mgmt = gatereport.NewHandler(mgmt, updater, c.log), updater, mgmt
	return append(hs, updater.Handler(c.prefix)), nil
}

// ReportGates says what the gates of WithGates would answer now about
// machines of cluster, taking nothing: the report Start serves at
// gatereport.Path, made in process (for a preview of an extension not
// deployed yet). A Server with DecideOnly serves no UpdateMachine, so it
// has no gates to report: ErrInvalidOption.
func (s *Server) ReportGates(ctx context.Context, cluster client.ObjectKey, machines []string) (*gatereport.Report, error) {
	if s == nil || s.updater == nil {
		return nil, invalid("ReportGates", "a Server made by New without DecideOnly")
	}
	return gatereport.Build(ctx, s.mgmt, s.updater, &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: cluster.Namespace, Name: cluster.Name}, Machines: machines})
}

// Start serves the hooks over TLS until ctx ends (it is a
// controller-runtime manager.Runnable: mgr.Add(s) runs it with the
// manager). HTTP/1.1 only, as Cluster API's own servers: HTTP/2's rapid
// reset (CVE-2023-44487) and stream multiplexing are of no use to a client
// that sends one request at a time. The hooks are Cluster API's runtime
// extension server's (discovery, decoding, answers), served by an
// http.Server with the limits of WithHTTPLimits (body size, requests at
// once, header size, read, write and idle timeouts). Metrics are not
// served here: they are on the registry of WithMetrics, by default
// controller-runtime's, which a manager's metrics server serves.
func (s *Server) Start(ctx context.Context) error {
	if s == nil || s.cfg.prefix == "" {
		return invalid("Start", "a Server not made by New")
	}
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return err
	}
	tlsOpts := append([]func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}, s.cfg.tlsOpts...)
	srv, err := server.New(server.Options{Catalog: catalog, Host: s.cfg.host, Port: s.cfg.port, CertDir: s.cfg.certDir, TLSOpts: tlsOpts})
	if err != nil {
		return err
	}
	// Cluster API's server registers the handlers on the embedded
	// controller-runtime server and starts it: ours serves its mux with
	// our limits.
	srv.Server = &hookServer{Server: srv.Server, limits: s.cfg.limits, host: s.cfg.host, port: s.cfg.port, certDir: s.cfg.certDir, tlsOpts: tlsOpts, log: s.cfg.log, listening: &s.listening}
	for _, h := range s.handlers {
		if err := srv.AddExtensionHandler(h); err != nil {
			return fmt.Errorf("handler %s: %w", h.Name, err)
		}
		s.cfg.log.Info("serving hook", "handler", h.Name)
	}
	if s.gateReport != nil {
		// What UpdateMachine's gates would answer now, for a preview.
		srv.Server.Register(gatereport.Path, s.gateReport)
		s.cfg.log.Info("serving the gate report", "path", gatereport.Path)
	}
	if err := srv.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
