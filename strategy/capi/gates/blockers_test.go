package gates_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// prometheusServer is an httptest server speaking Prometheus's HTTP API for
// instant queries: it answers body for /api/v1/query and records the
// query and time asked.
func prometheusServer(t *testing.T, status int, body string) (promapi.Client, *http.Request) {
	t.Helper()
	var last http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/query", r.URL.Path)
		require.NoError(t, r.ParseForm())
		last = *r
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := promapi.NewClient(promapi.Config{Address: srv.URL})
	require.NoError(t, err)
	return c, &last
}

func TestAlertGate(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req := strategy.GateRequest{Cluster: "default/demo", Machine: "m", Now: now}

	firing := `{"status":"success","data":{"resultType":"vector","result":[
{"metric":{"__name__":"ALERTS","alertname":"KubeNodeNotReady","alertstate":"firing","node":"w-3"},"value":[1795608000,"1"]},
{"metric":{"__name__":"ALERTS","alertname":"EtcdMembersDown","alertstate":"firing"},"value":[1795608000,"1"]},
{"metric":{"__name__":"ALERTS","alertname":"KubeNodeNotReady","alertstate":"firing","node":"w-4"},"value":[1795608000,"1"]}]}}`
	c, asked := prometheusServer(t, http.StatusOK, firing)
	gate, err := gates.Alert(c, "")
	require.NoError(t, err)
	r := gate.Check(ctx, req)
	require.Equal(t, strategy.VerdictWait, r.Verdict)
	require.Equal(t, `"ALERTS{alertstate=\"firing\"}" returns 2 series: EtcdMembersDown, KubeNodeNotReady`, r.Reason)
	require.Equal(t, gates.DefaultBlockerRetry, r.RetryAfter)
	require.Equal(t, gates.DefaultAlertQuery, asked.Form.Get("query"))
	require.Equal(t, "1795608000", asked.Form.Get("time"), "asked at the request's time")

	quiet, _ := prometheusServer(t, http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	gate, err = gates.Alert(quiet, `ALERTS{alertstate="firing",severity="critical"}`)
	require.NoError(t, err)
	require.Equal(t, strategy.VerdictAllow, gate.Check(ctx, req).Verdict)

	broken, _ := prometheusServer(t, http.StatusBadRequest, `{"status":"error","errorType":"bad_data","error":"parse error at char 7"}`)
	gate, err = gates.Alert(broken, "ALERTS{")
	require.NoError(t, err)
	r = gate.Check(ctx, req)
	require.Equal(t, strategy.VerdictWait, r.Verdict, "a failed query holds the update")
	require.Error(t, r.Err)
	require.Contains(t, r.Reason, "parse error")

	_, err = gates.Alert(nil, "")
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}

func TestPodBlockerGate(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: name, Labels: map[string]string{"upgradekit.io/blocks-upgrades": "true"}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	c := crfake.NewClientBuilder().WithScheme(s).WithObjects(pod("backup-0", corev1.PodRunning), pod("migrate-done", corev1.PodSucceeded),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "web"}}).Build()
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	sel, err := labels.Parse("upgradekit.io/blocks-upgrades=true")
	require.NoError(t, err)
	gate, err := gates.PodBlockers(workload, sel)
	require.NoError(t, err)
	req := strategy.GateRequest{Cluster: "default/demo", Machine: "m", Now: time.Now()}
	r := gate.Check(ctx, req)
	require.Equal(t, strategy.VerdictWait, r.Verdict)
	require.Equal(t, `pods matching "upgradekit.io/blocks-upgrades=true" run: ops/backup-0`, r.Reason, "finished pods and others do not block")

	require.NoError(t, c.Delete(ctx, pod("backup-0", corev1.PodRunning)))
	require.Equal(t, strategy.VerdictAllow, gate.Check(ctx, req).Verdict)

	_, err = gates.PodBlockers(workload, labels.Everything())
	require.ErrorIs(t, err, capi.ErrInvalidOption, "an empty selector would block on every pod")
	_, err = gates.PodBlockers(nil, sel)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}
