package preview

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

// Modes a Prediction says it was answered in (Prediction.Mode).
const (
	// ModeExtension: the deployed extension answered each hook over
	// HTTPS, found through the ExtensionConfigs Cluster API uses
	// (FindDeployed).
	ModeExtension = "extension"
	// ModeInProcess: an Answerer inside the preview's own process (for
	// example extensionserver.Server.Extension built from flags) answered.
	ModeInProcess = "in-process"
)

// ErrNoExtension is matched by FindDeployed's error when no ExtensionConfig
// registers a CanUpdateMachine or CanUpdateMachineSet handler for the
// cluster's namespace: Cluster API then updates nothing in place.
var ErrNoExtension = errors.New("no in-place extension registered")

// ErrSeveralExtensions is matched by a *SeveralExtensionsError.
var ErrSeveralExtensions = errors.New("several in-place extensions registered")

// SeveralExtensionsError is FindDeployed's error when more than one
// handler of an in-place hook (CanUpdateMachine, CanUpdateMachineSet,
// UpdateMachine) is registered for the cluster's namespace. Cluster API
// v1.14 supports one: it then fails every reconcile that asks the hook
// ("found multiple ... hooks: only one hook is supported"), so nothing is
// updated in place and no rollout proceeds.
type SeveralExtensionsError struct {
	// Hook is the hook with several handlers.
	Hook string
	// Handlers are the registered handler names (handler.ExtensionConfig).
	Handlers []string
	// ExtensionConfigs are the ExtensionConfigs they come from.
	ExtensionConfigs []string
}

// Error names the hook, the handlers and their ExtensionConfigs, and what
// to do.
func (e *SeveralExtensionsError) Error() string {
	return fmt.Sprintf("%v: ExtensionConfigs %s register %s handlers (%s) for this namespace; Cluster API supports one and fails every reconcile that asks it, so no machine is updated in place and the rollout does not proceed: remove all but one, or narrow their spec.namespaceSelector",
		ErrSeveralExtensions, strings.Join(e.ExtensionConfigs, ", "), e.Hook, strings.Join(e.Handlers, ","))
}

// Is makes errors.Is(err, ErrSeveralExtensions) true.
func (e *SeveralExtensionsError) Is(target error) bool { return target == ErrSeveralExtensions }

// DeployedOption configures FindDeployed.
type DeployedOption func(*deployedOptions)

type deployedOptions struct {
	proxy *rest.Config
}

// ThroughServiceProxy reaches an extension whose ExtensionConfig names a
// Service (spec.clientConfig.service) through the API server's service
// proxy (POST /api/v1/namespaces/NS/services/https:NAME:PORT/proxy/PATH),
// as kubectl reaches services from outside the cluster: a name such as
// NAME.NS.svc resolves only inside it. cfg is the management cluster's
// config; the caller needs the create verb on services/proxy in the
// Service's namespace. The API server opens the TLS connection to the
// extension and does not check its certificate against
// spec.clientConfig.caBundle; the preview checks the API server's. Without
// this option a Service is called directly at https://NAME.NS.svc:PORT,
// verified with the caBundle, as Cluster API calls it (for a preview
// running in the cluster). An ExtensionConfig with spec.clientConfig.url is
// always called directly.
func ThroughServiceProxy(cfg *rest.Config) DeployedOption {
	return func(o *deployedOptions) { o.proxy = cfg }
}

// in-place hooks, by name.
const (
	hookCanUpdateMachine    = "CanUpdateMachine"
	hookCanUpdateMachineSet = "CanUpdateMachineSet"
	hookUpdateMachine       = "UpdateMachine"
)

// handler is one registered handler, as Cluster API's registry holds it.
type handler struct {
	name          string // registered name: handler.ExtensionConfig
	short         string // the name in the URL path
	config        string // ExtensionConfig name
	gvh           runtimecatalog.GroupVersionHook
	client        runtimev1.ClientConfig
	settings      map[string]string
	timeout       time.Duration
	failurePolicy runtimev1.FailurePolicy
}

// Deployed is the Answerer that asks the in-place extension Cluster API
// will ask: the CanUpdateMachine and CanUpdateMachineSet handlers an
// ExtensionConfig registers for the cluster's namespace, called over HTTPS
// with the request Predict builds (the shape Cluster API sends), the
// ExtensionConfig's settings merged in and its handler's timeout, as
// Cluster API's runtime client calls them. It works for any extension,
// not only upgradekit's. These hooks have no side effects. An answer with
// patches is an accept (Predict verifies it with capi.VerifyCanUpdate*),
// one without is a decline; a Failure, or a call that fails under the
// handler's FailurePolicy Fail, leaves the machines Blocked (Cluster API
// retries the reconcile); under FailurePolicy Ignore a failed call is an
// empty answer, so a decline, as Cluster API treats it.
//
// Build it with FindDeployed.
type Deployed struct {
	handlers map[string]handler // by hook name
	update   *handler           // UpdateMachine's, whose gates ReportGates asks
	configs  []string
	catalog  *runtimecatalog.Catalog
	opts     deployedOptions
	mu       sync.Mutex
	http     map[string]*http.Client // by ExtensionConfig, "proxy" for the API server's
}

// FindDeployed reads the ExtensionConfigs (runtime.cluster.x-k8s.io
// v1beta2) and picks, for objects in namespace, the handlers Cluster API
// would call: those in status.handlers whose ExtensionConfig's
// spec.namespaceSelector matches the namespace's labels (no selector
// matches none, as in Cluster API's registry; its webhook defaults it to
// all). It returns an error matching ErrNoExtension when none registers
// CanUpdateMachine or CanUpdateMachineSet, a *SeveralExtensionsError when
// an in-place hook has more than one handler, and one matching
// ErrInvalidArgument for a nil reader or an empty namespace. c needs list
// on extensionconfigs and get on namespaces.
func FindDeployed(ctx context.Context, c client.Reader, namespace string, opts ...DeployedOption) (*Deployed, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidArgument)
	}
	if namespace == "" {
		return nil, fmt.Errorf("%w: empty namespace", ErrInvalidArgument)
	}
	d := &Deployed{handlers: map[string]handler{}, catalog: runtimecatalog.New(), http: map[string]*http.Client{}}
	for _, f := range opts {
		if f != nil {
			f(&d.opts)
		}
	}
	if err := runtimehooksv1.AddToCatalog(d.catalog); err != nil {
		return nil, fmt.Errorf("preview: Cluster API's hook catalog: %w", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(runtimev1.GroupVersion.WithKind("ExtensionConfigList"))
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("preview: list ExtensionConfigs: %w", err)
	}
	var nsLabels labels.Set
	nsRead := false
	byHook := map[string][]handler{}
	for i := range list.Items {
		var ec runtimev1.ExtensionConfig
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &ec); err != nil {
			return nil, fmt.Errorf("preview: ExtensionConfig %s: %w", errtext.Quote(list.Items[i].GetName()), err)
		}
		sel, err := metav1.LabelSelectorAsSelector(ec.Spec.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("preview: ExtensionConfig %s: spec.namespaceSelector: %w", errtext.Quote(ec.Name), err)
		}
		if !sel.Empty() {
			if !nsRead {
				ns := &unstructured.Unstructured{}
				ns.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
				if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
					return nil, fmt.Errorf("preview: namespace %s (ExtensionConfig %s has a spec.namespaceSelector): %w", errtext.Quote(namespace), errtext.Quote(ec.Name), err)
				}
				nsLabels, nsRead = ns.GetLabels(), true
			}
			if !sel.Matches(nsLabels) {
				continue
			}
		}
		for _, h := range ec.Status.Handlers {
			gv, err := schema.ParseGroupVersion(h.RequestHook.APIVersion)
			if err != nil || gv.Group != runtimehooksv1.GroupVersion.Group {
				continue
			}
			switch h.RequestHook.Hook {
			case hookCanUpdateMachine, hookCanUpdateMachineSet, hookUpdateMachine:
			default:
				continue
			}
			timeout := time.Duration(runtimehooksv1.DefaultHandlersTimeoutSeconds) * time.Second
			if h.TimeoutSeconds > 0 {
				timeout = time.Duration(h.TimeoutSeconds) * time.Second
			}
			byHook[h.RequestHook.Hook] = append(byHook[h.RequestHook.Hook], handler{
				name: h.Name, short: strings.TrimSuffix(h.Name, "."+ec.Name), config: ec.Name,
				gvh:    runtimecatalog.GroupVersionHook{Group: gv.Group, Version: gv.Version, Hook: h.RequestHook.Hook},
				client: ec.Spec.ClientConfig, settings: ec.Spec.Settings, timeout: timeout, failurePolicy: h.FailurePolicy,
			})
		}
	}
	for _, hook := range []string{hookCanUpdateMachine, hookCanUpdateMachineSet, hookUpdateMachine} {
		hs := byHook[hook]
		if len(hs) > 1 {
			e := &SeveralExtensionsError{Hook: hook}
			for _, h := range hs {
				e.Handlers = append(e.Handlers, h.name)
				if !slices.Contains(e.ExtensionConfigs, h.config) {
					e.ExtensionConfigs = append(e.ExtensionConfigs, h.config)
				}
			}
			return nil, e
		}
		if len(hs) == 1 && hook == hookUpdateMachine {
			d.update = &hs[0]
		}
		if len(hs) == 1 && hook != hookUpdateMachine {
			d.handlers[hook] = hs[0]
			if !slices.Contains(d.configs, hs[0].config) {
				d.configs = append(d.configs, hs[0].config)
			}
		}
	}
	if len(d.handlers) == 0 {
		return nil, fmt.Errorf("%w: no ExtensionConfig registers CanUpdateMachine or CanUpdateMachineSet for namespace %s", ErrNoExtension, errtext.Quote(namespace))
	}
	slices.Sort(d.configs)
	return d, nil
}

// ExtensionConfigs names the ExtensionConfigs whose handlers answer.
func (d *Deployed) ExtensionConfigs() []string {
	if d == nil {
		return nil
	}
	return slices.Clone(d.configs)
}

// AnswerCanUpdateMachine calls the CanUpdateMachine handler; with none
// registered the answer is a decline (Cluster API then rolls the machine
// out).
func (d *Deployed) AnswerCanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest) (capi.Answer, error) {
	if d == nil || req == nil {
		return capi.Answer{}, fmt.Errorf("%w: nil Deployed or request", ErrInvalidArgument)
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	h, ok := d.handlers[hookCanUpdateMachine]
	if !ok {
		return capi.Answer{Message: "no CanUpdateMachine handler is registered"}, nil
	}
	ignored, err := d.call(ctx, h, req, resp)
	if err != nil {
		return capi.Answer{}, err
	}
	return answerOf(h, ignored, resp.Message, resp.MachinePatch, resp.BootstrapConfigPatch, resp.InfrastructureMachinePatch), nil
}

// AnswerCanUpdateMachineSet calls the CanUpdateMachineSet handler; with
// none registered the answer is a decline (Cluster API then rolls the
// machines out).
func (d *Deployed) AnswerCanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest) (capi.Answer, error) {
	if d == nil || req == nil {
		return capi.Answer{}, fmt.Errorf("%w: nil Deployed or request", ErrInvalidArgument)
	}
	resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
	h, ok := d.handlers[hookCanUpdateMachineSet]
	if !ok {
		return capi.Answer{Message: "no CanUpdateMachineSet handler is registered"}, nil
	}
	ignored, err := d.call(ctx, h, req, resp)
	if err != nil {
		return capi.Answer{}, err
	}
	return answerOf(h, ignored, resp.Message, resp.MachineSetPatch, resp.BootstrapConfigTemplatePatch, resp.InfrastructureMachineTemplatePatch), nil
}

// answerOf turns a wire answer into an Answer: patches make an accept
// (Cluster API then compares), none a decline.
func answerOf(h handler, ignored error, msg string, patches ...runtimehooksv1.Patch) capi.Answer {
	a := capi.Answer{Message: msg}
	for i, p := range patches {
		if p.IsDefined() {
			a.Accept = true
			switch i {
			case 0:
				a.MachinePatch = p
			case 1:
				a.BootstrapPatch = p
			default:
				a.InfrastructurePatch = p
			}
		}
	}
	if ignored != nil {
		a.Message = "the call failed and its FailurePolicy is Ignore, so Cluster API takes it as no patches: " + ignored.Error()
	}
	if a.Message == "" {
		a.Message = "no message"
	}
	a.Message += " (handler " + h.name + ")"
	return a
}

// maxResponseBytes bounds an extension's answer.
const maxResponseBytes = 64 << 20

// call posts req to h and decodes its answer into resp, as Cluster API's
// runtime client does: settings merged (the request's win), timeout in
// the query and on the context, a non-Success status an error. ignored is
// the failed call's error under FailurePolicy Ignore (resp then empty).
func (d *Deployed) call(ctx context.Context, h handler, req runtimehooksv1.RequestObject, resp runtimehooksv1.ResponseObject) (ignored, err error) {
	fail := func(err error) (error, error) {
		err = fmt.Errorf("call extension handler %s (ExtensionConfig %s): %w", errtext.Quote(h.name), errtext.Quote(h.config), err)
		if h.failurePolicy == runtimev1.FailurePolicyIgnore {
			return err, nil
		}
		return nil, err
	}
	if h.gvh.Version != runtimehooksv1.GroupVersion.Version {
		return nil, fmt.Errorf("extension handler %s (ExtensionConfig %s) serves %s, and the preview speaks %s only", errtext.Quote(h.name), errtext.Quote(h.config), h.gvh, runtimehooksv1.GroupVersion)
	}
	req = req.DeepCopyObject().(runtimehooksv1.RequestObject)
	settings := map[string]string{}
	for k, v := range h.settings {
		settings[k] = v
	}
	for k, v := range req.GetSettings() {
		settings[k] = v
	}
	req.SetSettings(settings)
	gvk, err := d.catalog.Request(h.gvh)
	if err != nil {
		return nil, fmt.Errorf("extension handler %s: %w", errtext.Quote(h.name), err)
	}
	req.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("extension handler %s: marshal request: %w", errtext.Quote(h.name), err)
	}
	httpc, u, err := d.target(h, runtimecatalog.GVHToPath(h.gvh, h.short))
	if err != nil {
		return nil, fmt.Errorf("extension handler %s (ExtensionConfig %s): %w", errtext.Quote(h.name), errtext.Quote(h.config), err)
	}
	q := u.Query()
	q.Set("timeout", h.timeout.String())
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("extension handler %s: %w", errtext.Quote(h.name), err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := httpc.Do(hreq)
	if err != nil {
		return fail(err)
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes+1))
	if err != nil {
		return fail(fmt.Errorf("read the answer: %w", err))
	}
	if hresp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("HTTP status %d: %s", hresp.StatusCode, errtext.Clip(string(data))))
	}
	if len(data) > maxResponseBytes {
		return fail(fmt.Errorf("answer larger than %d bytes", maxResponseBytes))
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fail(fmt.Errorf("decode the answer: %w", err))
	}
	if st := resp.GetStatus(); st != runtimehooksv1.ResponseStatusSuccess {
		return nil, fmt.Errorf("extension handler %s (ExtensionConfig %s) answers %s: %s", errtext.Quote(h.name), errtext.Quote(h.config), st, errtext.Clip(resp.GetMessage()))
	}
	return nil, nil
}

// target is the HTTP client and URL of hookPath on h's extension: the API
// server's service proxy for a Service with ThroughServiceProxy, the
// extension itself otherwise (TLS verified with the caBundle, the host
// name as server name).
func (d *Deployed) target(h handler, hookPath string) (*http.Client, *url.URL, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cc := h.client
	if cc.Service.IsDefined() && d.opts.proxy != nil {
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		httpc, ok := d.http["proxy"]
		if !ok {
			var err error
			if httpc, err = rest.HTTPClientFor(d.opts.proxy); err != nil {
				return nil, nil, fmt.Errorf("the API server's client: %w", err)
			}
			d.http["proxy"] = httpc
		}
		base, err := url.Parse(d.opts.proxy.Host)
		if err != nil || base.Host == "" {
			// A host without a scheme, as rest.Config allows.
			base = &url.URL{Scheme: "https", Host: strings.TrimSuffix(d.opts.proxy.Host, "/")}
		}
		base.Path = path.Join(base.Path, d.opts.proxy.APIPath, "/api/v1/namespaces", cc.Service.Namespace, "services",
			"https:"+cc.Service.Name+":"+strconv.Itoa(int(port)), "proxy", cc.Service.Path, hookPath)
		return httpc, base, nil
	}
	var u *url.URL
	switch {
	case cc.Service.IsDefined():
		host := cc.Service.Name + "." + cc.Service.Namespace + ".svc"
		if cc.Service.Port != nil {
			host = net.JoinHostPort(host, strconv.Itoa(int(*cc.Service.Port)))
		}
		u = &url.URL{Scheme: "https", Host: host, Path: cc.Service.Path}
	case cc.URL != "":
		var err error
		if u, err = url.Parse(cc.URL); err != nil {
			return nil, nil, fmt.Errorf("spec.clientConfig.url: %w", err)
		}
		if u.Scheme != "https" {
			return nil, nil, fmt.Errorf("spec.clientConfig.url: scheme %s, want https", errtext.Quote(u.Scheme))
		}
	default:
		return nil, nil, errors.New("spec.clientConfig has neither service nor url")
	}
	u.Path = path.Join(u.Path, hookPath)
	httpc, ok := d.http[h.config]
	if !ok {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
		if len(cc.CABundle) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(cc.CABundle) {
				return nil, nil, errors.New("spec.clientConfig.caBundle holds no PEM certificate")
			}
			tc.RootCAs = pool
		}
		httpc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
		d.http[h.config] = httpc
	}
	return httpc, u, nil
}

// ErrNoGateReport is matched by ReportGates' error when no gate report
// can be asked: no UpdateMachine handler is registered for the namespace,
// or its extension serves none (not upgradekit's, or an older one; then
// the error also matches gatereport.ErrNotServed).
var ErrNoGateReport = errors.New("no gate report")

// ReportGates asks the extension whose handler Cluster API calls for
// UpdateMachine what its gates (a maintenance window, a soak, a
// concurrency limit, blockers) would answer now about machines of
// cluster, taking nothing (gatereport). It is called like the hooks:
// through the service proxy with ThroughServiceProxy, the handler's
// timeout. The answer is for now: the gates are asked again when Cluster
// API calls UpdateMachine.
func (d *Deployed) ReportGates(ctx context.Context, cluster client.ObjectKey, machines []string) (*gatereport.Report, error) {
	if d == nil || d.update == nil {
		return nil, fmt.Errorf("%w: no ExtensionConfig registers an UpdateMachine handler for this namespace", ErrNoGateReport)
	}
	h := *d.update
	httpc, u, err := d.target(h, "/")
	if err != nil {
		return nil, fmt.Errorf("extension handler %s (ExtensionConfig %s): %w", errtext.Quote(h.name), errtext.Quote(h.config), err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	rep, err := gatereport.Post(ctx, httpc, u, &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: cluster.Namespace, Name: cluster.Name}, Machines: machines})
	if errors.Is(err, gatereport.ErrNotServed) {
		return nil, fmt.Errorf("%w: ExtensionConfig %s: %w", ErrNoGateReport, errtext.Quote(h.config), err)
	}
	if err != nil {
		return nil, fmt.Errorf("gate report of ExtensionConfig %s: %w", errtext.Quote(h.config), err)
	}
	return rep, nil
}
