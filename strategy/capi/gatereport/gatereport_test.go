package gatereport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

// peeker answers from a table by machine and records who was asked.
type peeker struct {
	answers map[string][]strategy.GateResult
	asked   []string
}

func (p *peeker) PeekGates(_ context.Context, m *clusterv1.Machine) []strategy.GateResult {
	p.asked = append(p.asked, m.Name)
	return p.answers[m.Name]
}

func machine(cluster, name, node string) *clusterv1.Machine {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: clusterv1.MachineSpec{ClusterName: cluster}}
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	return m
}

func mgmt(t *testing.T) client.Client {
	s := runtime.NewScheme()
	require.NoError(t, clusterv1.AddToScheme(s))
	return crfake.NewClientBuilder().WithScheme(s).WithObjects(
		machine("demo", "demo-cp-0", "node-cp-0"), machine("demo", "demo-md-0", "node-md-0"), machine("other", "other-md-0", "node-o")).Build()
}

func TestReport(t *testing.T) {
	p := &peeker{answers: map[string][]strategy.GateResult{
		"demo-cp-0": {{Verdict: strategy.VerdictAllow, Gate: "concurrency", Reason: "1 of 1 slots free"}},
		"demo-md-0": {
			{Verdict: strategy.VerdictWait, Gate: "nightly", Reason: "outside the window", RetryAfter: 3 * time.Hour},
			{Verdict: strategy.VerdictStop, Gate: "breaker", Reason: "tripped"},
			{Verdict: strategy.VerdictWait, Gate: "alerts", Reason: "cannot tell", Err: context.DeadlineExceeded, RetryAfter: 300 * time.Millisecond},
		},
	}}
	srv := httptest.NewServer(gatereport.NewHandler(mgmt(t), p, logr.Discard()))
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL)
	require.NoError(t, err)

	rep, err := gatereport.Post(t.Context(), srv.Client(), base, &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: "default", Name: "demo"},
		Machines: []string{"demo-cp-0", "demo-md-0", "other-md-0", "gone"}})
	require.NoError(t, err)
	want := []gatereport.MachineReport{
		{Name: "demo-cp-0", Node: "node-cp-0", Verdict: strategy.VerdictAllow, Gates: []gatereport.Answer{{Gate: "concurrency", Verdict: strategy.VerdictAllow, Reason: "1 of 1 slots free"}}},
		{Name: "demo-md-0", Node: "node-md-0", Verdict: strategy.VerdictStop, Gates: []gatereport.Answer{
			{Gate: "nightly", Verdict: strategy.VerdictWait, Reason: "outside the window", RetryAfter: &metav1.Duration{Duration: 3 * time.Hour}},
			{Gate: "breaker", Verdict: strategy.VerdictStop, Reason: "tripped"},
			// Whole seconds, at least one.
			{Gate: "alerts", Verdict: strategy.VerdictWait, Reason: "cannot tell", Error: "context deadline exceeded", RetryAfter: &metav1.Duration{Duration: time.Second}},
		}},
		// Another cluster's machine reads as a missing one: the report
		// tells nothing about other clusters.
		{Name: "other-md-0", Gates: []gatereport.Answer{}, Error: "no Machine default/other-md-0 of cluster demo"},
		{Name: "gone", Gates: []gatereport.Answer{}, Error: "no Machine default/gone of cluster demo"},
	}
	require.Empty(t, cmp.Diff(want, rep.Machines))
	require.Equal(t, []string{"demo-cp-0", "demo-md-0"}, p.asked, "a machine of another cluster, or none, is not asked about")

	t.Run("the wire shape", func(t *testing.T) {
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		s := string(b)
		require.Contains(t, s, `"kind":"GateReport","apiVersion":"gates.upgradekit.io/v1alpha1"`)
		require.Contains(t, s, `"retryAfter":"3h0m0s"`)
		require.Contains(t, s, `"gates":[]`)
		require.NotContains(t, s, "null")
	})
}

func TestReportRefuses(t *testing.T) {
	p := &peeker{}
	h := gatereport.NewHandler(mgmt(t), p, logr.Discard())
	valid := `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReportRequest","cluster":{"namespace":"default","name":"demo"},"machines":["demo-cp-0"]}`
	many := make([]string, gatereport.MaxMachines+1)
	require.Equal(t, 250, gatereport.MaxMachines)
	for i := range many {
		many[i] = `"m-` + strings.Repeat("a", i%5+1) + `-` + string(rune('a'+i%26)) + `"`
	}
	for _, tc := range []struct {
		name, method, body string
		code               int
		want               string
	}{
		{"a GET", http.MethodGet, "", http.StatusMethodNotAllowed, "POST a GateReportRequest"},
		{"not JSON", http.MethodPost, "machines: [a]", http.StatusBadRequest, "invalid gate report request"},
		{"an unknown field", http.MethodPost, strings.Replace(valid, `"machines"`, `"nodes":[],"machines"`, 1), http.StatusBadRequest, `unknown field "nodes"`},
		{"another kind", http.MethodPost, strings.Replace(valid, "GateReportRequest", "GateReport", 1), http.StatusBadRequest, `kind "GateReport": want gates.upgradekit.io/v1alpha1, GateReportRequest`},
		{"a bad namespace", http.MethodPost, strings.Replace(valid, `"namespace":"default"`, `"namespace":"Default/x"`, 1), http.StatusBadRequest, `cluster.namespace "Default/x"`},
		{"no cluster name", http.MethodPost, strings.Replace(valid, `"name":"demo"`, `"name":""`, 1), http.StatusBadRequest, `cluster.name ""`},
		{"no machine", http.MethodPost, strings.Replace(valid, `["demo-cp-0"]`, `[]`, 1), http.StatusBadRequest, "machines: empty"},
		{"a bad machine name", http.MethodPost, strings.Replace(valid, `["demo-cp-0"]`, `["demo-cp-0","../etc"]`, 1), http.StatusBadRequest, `machines[1] "../etc"`},
		{"a machine twice", http.MethodPost, strings.Replace(valid, `["demo-cp-0"]`, `["demo-cp-0","demo-cp-0"]`, 1), http.StatusBadRequest, `machines[1] "demo-cp-0": named twice`},
		{"too many machines", http.MethodPost, strings.Replace(valid, `["demo-cp-0"]`, "["+strings.Join(many, ",")+"]", 1), http.StatusBadRequest, "machines: 251, at most 250"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, gatereport.Path, strings.NewReader(tc.body)))
			require.Equal(t, tc.code, w.Code, w.Body.String())
			require.Contains(t, w.Body.String(), tc.want)
		})
	}
	require.Empty(t, p.asked, "no refused request asks a gate")

	w := httptest.NewRecorder()
	gatereport.NewHandler(nil, p, logr.Discard()).ServeHTTP(w, httptest.NewRequest(http.MethodPost, gatereport.Path, strings.NewReader(valid)))
	require.Equal(t, http.StatusInternalServerError, w.Code)
}

func TestPostChecksTheAnswer(t *testing.T) {
	req := &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: "default", Name: "demo"}, Machines: []string{"a", "b"}}
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string
		is     error
	}{
		{"no report served", http.StatusNotFound, "404 page not found", "HTTP 404", gatereport.ErrNotServed},
		{"a failure", http.StatusServiceUnavailable, "read Machine default/a: timeout", "HTTP status 503: read Machine default/a: timeout", nil},
		{"not JSON", http.StatusOK, "<html>", "decode the gate report", nil},
		{"another kind", http.StatusOK, `{"apiVersion":"v1","kind":"Status","cluster":{"namespace":"default","name":"demo"},"machines":[]}`, "does not answer the request", nil},
		{"a machine missing", http.StatusOK, `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReport","cluster":{"namespace":"default","name":"demo"},"machines":[{"name":"a","gates":[]}]}`, "1 machines for 2 asked", nil},
		{"machines swapped", http.StatusOK, `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReport","cluster":{"namespace":"default","name":"demo"},"machines":[{"name":"b","gates":[]},{"name":"a","gates":[]}]}`, `machines[0]: is "b", asked "a"`, nil},
		{"no verdict", http.StatusOK, `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReport","cluster":{"namespace":"default","name":"demo"},"machines":[{"name":"a","verdict":"Allow","gates":[{"gate":"w","verdict":"Maybe"}]},{"name":"b","verdict":"Allow","gates":[]}]}`, `gates[0] answers "Maybe", which is no verdict`, nil},
		{"a verdict its gates do not give", http.StatusOK, `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReport","cluster":{"namespace":"default","name":"demo"},"machines":[{"name":"a","verdict":"Allow","gates":[{"gate":"w","verdict":"Wait"},{"gate":"b","verdict":"Stop"}]},{"name":"b","verdict":"Allow","gates":[]}]}`, `verdict "Allow", its gates say Stop`, nil},
		{"an error with a verdict", http.StatusOK, `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReport","cluster":{"namespace":"default","name":"demo"},"machines":[{"name":"a","verdict":"Allow","gates":[],"error":"gone"},{"name":"b","verdict":"Allow","gates":[]}]}`, `an error with a verdict`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/prefix"+gatereport.Path {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			base, err := url.Parse(srv.URL + "/prefix/")
			require.NoError(t, err)
			_, err = gatereport.Post(t.Context(), srv.Client(), base, req)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
	_, err := gatereport.Post(t.Context(), http.DefaultClient, &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, &gatereport.Request{})
	require.ErrorIs(t, err, gatereport.ErrInvalidRequest)
}

// FuzzHandler: whatever the body, the handler answers 200 or 400 and
// never panics; only a valid request asks a gate.
func FuzzHandler(f *testing.F) {
	f.Add(`{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReportRequest","cluster":{"namespace":"default","name":"demo"},"machines":["demo-cp-0","gone"]}`)
	f.Add(`{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReportRequest","cluster":{"namespace":"default","name":"demo"},"machines":null}`)
	f.Add(`{}`)
	f.Add(`[`)
	s := runtime.NewScheme()
	if err := clusterv1.AddToScheme(s); err != nil {
		f.Fatal(err)
	}
	c := crfake.NewClientBuilder().WithScheme(s).WithObjects(machine("demo", "demo-cp-0", "n")).Build()
	f.Fuzz(func(t *testing.T, body string) {
		p := &peeker{}
		w := httptest.NewRecorder()
		gatereport.NewHandler(c, p, logr.Discard()).ServeHTTP(w, httptest.NewRequest(http.MethodPost, gatereport.Path, strings.NewReader(body)))
		switch w.Code {
		case http.StatusOK:
			var rep gatereport.Report
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rep))
			require.NotEmpty(t, rep.Machines)
		case http.StatusBadRequest:
			require.Empty(t, p.asked)
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}

// slowPeeker answers after its gate blocks until released, so reports can
// be held open.
type slowPeeker struct {
	started chan string
	release chan struct{}
}

func (p *slowPeeker) PeekGates(ctx context.Context, m *clusterv1.Machine) []strategy.GateResult {
	p.started <- m.Name
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return []strategy.GateResult{{Verdict: strategy.VerdictAllow, Gate: "slow"}}
}

// TestReportsAtOnce: two reports at once are made, a third is answered
// 429 until one ends, so reports cannot crowd out the hooks.
func TestReportsAtOnce(t *testing.T) {
	p := &slowPeeker{started: make(chan string, 3), release: make(chan struct{})}
	h := gatereport.NewHandler(mgmt(t), p, logr.Discard())
	body := `{"apiVersion":"gates.upgradekit.io/v1alpha1","kind":"GateReportRequest","cluster":{"namespace":"default","name":"demo"},"machines":["demo-cp-0"]}`
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, gatereport.Path, strings.NewReader(body)))
			codes <- w.Code
		}()
	}
	<-p.started
	<-p.started // both are inside
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, gatereport.Path, strings.NewReader(body)))
	require.Equal(t, http.StatusTooManyRequests, w.Code, w.Body.String())
	require.Equal(t, "5", w.Header().Get("Retry-After"))
	close(p.release)
	require.Equal(t, http.StatusOK, <-codes)
	require.Equal(t, http.StatusOK, <-codes)
}

// TestReportOutOfTime: machines left when the report's time is up (here
// the caller's context) are reported as not asked, not dropped.
func TestReportOutOfTime(t *testing.T) {
	p := &peeker{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := gatereport.Build(ctx, mgmt(t), p, &gatereport.Request{Cluster: gatereport.ClusterRef{Namespace: "default", Name: "demo"}, Machines: []string{"demo-cp-0", "demo-md-0"}})
	require.NoError(t, err)
	for _, mr := range rep.Machines {
		require.Equal(t, "not asked: the report ran out of its 20s", mr.Error, mr.Name)
	}
	require.Empty(t, p.asked)
	_, err = gatereport.Build(t.Context(), nil, p, &gatereport.Request{})
	require.ErrorIs(t, err, gatereport.ErrInvalidRequest)
}
