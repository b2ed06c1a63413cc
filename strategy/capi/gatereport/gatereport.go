package gatereport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
)

// APIVersion is the apiVersion of a Request and a Report.
const APIVersion = "gates.upgradekit.io/v1alpha1"

// Path is where an extension serves the report (POST), beside Cluster
// API's hooks and under the same spec.clientConfig.service.path.
const Path = "/" + APIVersion + "/report"

// MaxMachines bounds how many machines one Request may name.
const MaxMachines = 250

// Budget bounds the time one report takes: the machines not asked about
// when it runs out are reported with an Error saying so. It stays below
// the UpdateMachine handler's timeout, with which a preview asks.
const Budget = 20 * time.Second

// maxReports is how many reports a handler makes at once; more are
// answered 429. Reports read the workload clusters, as UpdateMachine does,
// and must not crowd out Cluster API's hooks on the same server.
const maxReports = 2

// maxBody bounds a Request's and a Report's size.
const maxBody = 4 << 20

// Request asks for the gates' answers about machines of one cluster.
type Request struct {
	metav1.TypeMeta `json:",inline"`
	// Cluster is the Cluster the machines belong to; the machines are in
	// its namespace.
	Cluster ClusterRef `json:"cluster"`
	// Machines are the Machines' names, at most MaxMachines.
	Machines []string `json:"machines"`
}

// ClusterRef names a Cluster.
type ClusterRef struct {
	// Namespace is the Cluster's namespace.
	Namespace string `json:"namespace"`
	// Name is the Cluster's name.
	Name string `json:"name"`
}

// Report is the answer: one MachineReport per machine asked, in the
// Request's order.
type Report struct {
	metav1.TypeMeta `json:",inline"`
	// Cluster is the Cluster asked about.
	Cluster ClusterRef `json:"cluster"`
	// Machines are the machines' reports.
	Machines []MachineReport `json:"machines"`
}

// MachineReport is what the gates say about one machine.
type MachineReport struct {
	// Name is the Machine's name.
	Name string `json:"name"`
	// Node is its Node's name, when it has one.
	Node string `json:"node,omitempty"`
	// Verdict is what UpdateMachine would do with the gates' answers:
	// Stop at the first Stop, else Wait at the first Wait, else Allow
	// (also with no gate); "" when Error is set.
	Verdict strategy.Verdict `json:"verdict,omitempty"`
	// Gates are each gate's answer, in the order the extension asks them:
	// empty when it has no gate.
	Gates []Answer `json:"gates"`
	// Error says why the machine was not asked about (not found, another
	// cluster's).
	Error string `json:"error,omitempty"`
}

// Answer is one gate's answer.
type Answer struct {
	// Gate names the gate.
	Gate string `json:"gate"`
	// Verdict is Allow, Wait or Stop.
	Verdict strategy.Verdict `json:"verdict"`
	// Reason says why.
	Reason string `json:"reason,omitempty"`
	// RetryAfter, for Wait, is when asking again can make sense, in whole
	// seconds.
	RetryAfter *metav1.Duration `json:"retryAfter,omitempty"`
	// Error is why the gate could not tell (it then answers Wait).
	Error string `json:"error,omitempty"`
}

// Peeker tells what the gates would answer about an update of a Machine
// now, each gate in order, taking nothing: capi.MachineUpdater's
// PeekGates.
type Peeker interface {
	PeekGates(ctx context.Context, m *clusterv1.Machine) []strategy.GateResult
}

// ErrNotServed is matched by Post's error when the extension serves no
// gate report (HTTP 404: not upgradekit's extension, or an older one).
var ErrNotServed = errors.New("the extension serves no gate report")

// ErrInvalidRequest is matched by the errors of a Request that is not
// one: wrong apiVersion or kind, an invalid name, too many machines.
var ErrInvalidRequest = errors.New("invalid gate report request")

// Validate checks r: its apiVersion and kind (GateReportRequest), the
// cluster's namespace and name, and each machine's name (at least one, at
// most MaxMachines, none twice). Errors match ErrInvalidRequest and name
// the field.
func (r *Request) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
	}
	switch {
	case r == nil:
		return bad("no request")
	case r.APIVersion != APIVersion || r.Kind != "GateReportRequest":
		return bad("apiVersion %s, kind %s: want %s, GateReportRequest", errtext.Quote(r.APIVersion), errtext.Quote(r.Kind), APIVersion)
	case len(validation.IsDNS1123Label(r.Cluster.Namespace)) > 0:
		return bad("cluster.namespace %s: %s", errtext.Quote(r.Cluster.Namespace), validation.IsDNS1123Label(r.Cluster.Namespace)[0])
	case len(validation.IsDNS1123Subdomain(r.Cluster.Name)) > 0:
		return bad("cluster.name %s: %s", errtext.Quote(r.Cluster.Name), validation.IsDNS1123Subdomain(r.Cluster.Name)[0])
	case len(r.Machines) == 0:
		return bad("machines: empty")
	case len(r.Machines) > MaxMachines:
		return bad("machines: %d, at most %d", len(r.Machines), MaxMachines)
	}
	seen := make(map[string]bool, len(r.Machines))
	for i, m := range r.Machines {
		if errs := validation.IsDNS1123Subdomain(m); len(errs) > 0 {
			return bad("machines[%d] %s: %s", i, errtext.Quote(m), errs[0])
		}
		if seen[m] {
			return bad("machines[%d] %s: named twice", i, errtext.Quote(m))
		}
		seen[m] = true
	}
	return nil
}

// NewHandler serves the report: a POST of a Request (JSON) is answered
// with a Report. Each machine is read from mgmt (get on machines) and must
// belong to the Request's cluster before p is asked about it; one that
// does not is reported with Error. A Request that is not valid is
// answered 400 with the reason, any method but POST 405, and more than two
// reports at once 429. Each report takes at most Budget. log gets one
// line per report at V(1).
//
// The report tells whoever reaches the server what the gates say (a
// window's schedule, the pods that block, the machines that hold
// concurrency slots), as UpdateMachine's answers tell Cluster API: serve
// it where only Cluster API's controllers and those you allow reach the
// hooks.
func NewHandler(mgmt client.Reader, p Peeker, log logr.Logger) http.Handler {
	slots := make(chan struct{}, maxReports)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed: POST a GateReportRequest", http.StatusMethodNotAllowed)
			return
		}
		if mgmt == nil || p == nil {
			http.Error(w, "gate report: handler built without a management client or gates", http.StatusInternalServerError)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "5")
			http.Error(w, "gate report: other reports are being made; try again", http.StatusTooManyRequests)
			return
		}
		var req Request
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, fmt.Sprintf("%v: %s", ErrInvalidRequest, errtext.Clip(err.Error())), http.StatusBadRequest)
			return
		}
		if err := req.Validate(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rep, err := Build(r.Context(), mgmt, p, &req)
		if err != nil {
			http.Error(w, errtext.Clip(err.Error()), http.StatusServiceUnavailable)
			return
		}
		log.V(1).Info("gate report", "cluster", req.Cluster.Namespace+"/"+req.Cluster.Name, "machines", len(req.Machines))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	})
}

// Build is the report NewHandler serves, made in process: req is
// validated (Request.Validate; its apiVersion and kind may be left empty),
// each machine is read from mgmt and must belong to req's cluster before
// p is asked about it. An error reading a Machine fails the report.
func Build(ctx context.Context, mgmt client.Reader, p Peeker, req *Request) (*Report, error) {
	if mgmt == nil || p == nil || req == nil {
		return nil, fmt.Errorf("%w: nil management client, peeker or request", ErrInvalidRequest)
	}
	if req.APIVersion == "" && req.Kind == "" {
		r := *req
		r.TypeMeta = metav1.TypeMeta{APIVersion: APIVersion, Kind: "GateReportRequest"}
		req = &r
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, Budget)
	defer cancel()
	rep := &Report{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: "GateReport"}, Cluster: req.Cluster, Machines: make([]MachineReport, 0, len(req.Machines))}
	for _, name := range req.Machines {
		mr := MachineReport{Name: name, Gates: []Answer{}}
		if ctx.Err() != nil {
			// Out of time: the rest is said to be not asked.
			mr.Error = fmt.Sprintf("not asked: the report ran out of its %s", Budget)
			rep.Machines = append(rep.Machines, mr)
			continue
		}
		var m clusterv1.Machine
		err := mgmt.Get(ctx, client.ObjectKey{Namespace: req.Cluster.Namespace, Name: name}, &m)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && m.Spec.ClusterName != req.Cluster.Name):
			// One answer for both: the report tells no more about other
			// clusters' machines than that they are not this one's.
			mr.Error = fmt.Sprintf("no Machine %s/%s of cluster %s", req.Cluster.Namespace, name, req.Cluster.Name)
		case err != nil && ctx.Err() != nil:
			mr.Error = fmt.Sprintf("not asked: the report ran out of its %s", Budget)
		case err != nil:
			return nil, fmt.Errorf("read Machine %s/%s: %w", req.Cluster.Namespace, name, err)
		default:
			mr.Node = m.Status.NodeRef.Name
			mr.Verdict = strategy.VerdictAllow
			for _, g := range p.PeekGates(ctx, &m) {
				mr.Gates = append(mr.Gates, answerOf(g))
				if mr.Verdict != strategy.VerdictStop && g.Verdict != strategy.VerdictAllow {
					mr.Verdict = strategy.VerdictWait
					if g.Verdict == strategy.VerdictStop {
						mr.Verdict = strategy.VerdictStop
					}
				}
			}
		}
		rep.Machines = append(rep.Machines, mr)
	}
	return rep, nil
}

func answerOf(g strategy.GateResult) Answer {
	a := Answer{Gate: g.Gate, Verdict: g.Verdict, Reason: g.Reason}
	if g.RetryAfter > 0 {
		// Whole seconds, as Cluster API's RetryAfterSeconds; at least one.
		a.RetryAfter = &metav1.Duration{Duration: max(g.RetryAfter.Round(time.Second), time.Second)}
	}
	if g.Err != nil {
		a.Error = errtext.Clip(g.Err.Error())
	}
	return a
}

// Post asks the extension at base (its URL up to, not including, Path:
// for a Service, https://host:port plus the ExtensionConfig's
// service.path) with hc, and checks the Report answers the Request: the
// same cluster, every machine once, in order. An extension that serves no
// report is ErrNotServed.
func Post(ctx context.Context, hc *http.Client, base *url.URL, req *Request) (*Report, error) {
	if hc == nil || base == nil || req == nil {
		return nil, fmt.Errorf("%w: nil HTTP client, URL or request", ErrInvalidRequest)
	}
	r := *req
	r.TypeMeta = metav1.TypeMeta{APIVersion: APIVersion, Kind: "GateReportRequest"}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(&r)
	if err != nil {
		return nil, err
	}
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + Path
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the report: %w", err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w (HTTP 404 at %s)", ErrNotServed, Path)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("gate report: HTTP status %d: %s", resp.StatusCode, errtext.Clip(strings.TrimSpace(string(data))))
	case len(data) > maxBody:
		return nil, fmt.Errorf("gate report larger than %d bytes", maxBody)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("decode the gate report: %w", err)
	}
	if rep.APIVersion != APIVersion || rep.Kind != "GateReport" || rep.Cluster != r.Cluster || len(rep.Machines) != len(r.Machines) {
		return nil, fmt.Errorf("the gate report does not answer the request (apiVersion %s, kind %s, cluster %s/%s, %d machines for %d asked)",
			errtext.Quote(rep.APIVersion), errtext.Quote(rep.Kind), rep.Cluster.Namespace, rep.Cluster.Name, len(rep.Machines), len(r.Machines))
	}
	for i := range rep.Machines {
		if err := rep.Machines[i].check(r.Machines[i]); err != nil {
			return nil, fmt.Errorf("the gate report's machines[%d]: %w", i, err)
		}
	}
	return &rep, nil
}

// check says whether mr answers for the machine named asked: the same
// name, verdicts that are verdicts, and its Verdict the one its gates give
// (none with an Error).
func (mr *MachineReport) check(asked string) error {
	if mr.Name != asked {
		return fmt.Errorf("is %s, asked %s", errtext.Quote(mr.Name), errtext.Quote(asked))
	}
	if mr.Error != "" {
		if mr.Verdict != "" || len(mr.Gates) > 0 {
			return fmt.Errorf("%s: an error with a verdict", errtext.Quote(mr.Name))
		}
		return nil
	}
	want := strategy.VerdictAllow
	for i, a := range mr.Gates {
		switch a.Verdict {
		case strategy.VerdictAllow:
		case strategy.VerdictStop:
			want = strategy.VerdictStop
		case strategy.VerdictWait:
			if want != strategy.VerdictStop {
				want = strategy.VerdictWait
			}
		default:
			return fmt.Errorf("%s: gates[%d] answers %s, which is no verdict", errtext.Quote(mr.Name), i, errtext.Quote(string(a.Verdict)))
		}
	}
	if mr.Verdict != want {
		return fmt.Errorf("%s: verdict %s, its gates say %s", errtext.Quote(mr.Name), errtext.Quote(string(mr.Verdict)), want)
	}
	return nil
}
