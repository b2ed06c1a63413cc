package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// DefaultAlertQuery is the PromQL Alert asks by default: every firing
// alert, as kured's --prometheus-url blocks on.
const DefaultAlertQuery = `ALERTS{alertstate="firing"}`

// DefaultBlockerRetry is how long a blocker's Wait asks the caller to wait
// before asking again.
const DefaultBlockerRetry = time.Minute

// Alert holds updates while query, an instant PromQL query through
// Prometheus's HTTP API (client from github.com/prometheus/client_golang/api,
// pointed at your Prometheus), returns any sample: with the default query,
// while any alert fires. The Wait names the alerts (their alertname label,
// else the series). A query that fails (Prometheus unreachable, a bad
// query) answers Wait with the error: an update never starts blind.
func Alert(c promapi.Client, query string) (strategy.Gate, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: gates.Alert: nil Prometheus client", capi.ErrInvalidOption)
	}
	if strings.TrimSpace(query) == "" {
		query = DefaultAlertQuery
	}
	api := promv1.NewAPI(c)
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		res := strategy.GateResult{Gate: "alerts", RetryAfter: DefaultBlockerRetry}
		v, _, err := api.Query(ctx, query, req.Now)
		if err != nil {
			res.Verdict, res.Reason, res.Err = strategy.VerdictWait, "asking Prometheus "+errtext.Quote(query)+": "+errtext.Clip(err.Error()), err
			return res
		}
		var firing []string
		switch r := v.(type) {
		case model.Vector:
			for _, s := range r {
				firing = append(firing, seriesName(s.Metric))
			}
		case model.Matrix:
			for _, s := range r {
				firing = append(firing, seriesName(s.Metric))
			}
		case *model.Scalar:
			if r.Value != 0 {
				firing = append(firing, "scalar "+r.Value.String())
			}
		}
		if len(firing) == 0 {
			return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: res.Gate}
		}
		slices.Sort(firing)
		firing = slices.Compact(firing)
		res.Verdict = strategy.VerdictWait
		res.Reason = fmt.Sprintf("%s returns %d series: %s", errtext.Quote(query), len(firing), strings.Join(capList(firing), ", "))
		return res
	}), nil
}

// seriesName is a series' alertname, else its labels.
func seriesName(m model.Metric) string {
	if n, ok := m["alertname"]; ok {
		return string(n)
	}
	return m.String()
}

// capList keeps ten names and says how many more.
func capList(names []string) []string {
	if len(names) <= 10 {
		return names
	}
	return append(names[:10:10], fmt.Sprintf("and %d more", len(names)-10))
}

// PodBlockers holds updates while the workload cluster runs a pod
// matching selector (not finished, not being deleted), as kured's
// --blocking-pod-selector does: a backup job, a migration, anything that
// must not meet a drain. It reads Pods through workload; a read that fails
// answers Wait with the error.
func PodBlockers(workload workload.Client, selector labels.Selector) (strategy.Gate, error) {
	switch {
	case workload == nil:
		return nil, fmt.Errorf("%w: gates.PodBlockers: nil workload client", capi.ErrInvalidOption)
	case selector == nil || selector.Empty():
		return nil, fmt.Errorf("%w: gates.PodBlockers: an empty selector would match every pod", capi.ErrInvalidOption)
	}
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		res := strategy.GateResult{Gate: "blocking-pods", RetryAfter: DefaultBlockerRetry}
		c, bad := workloadOf(ctx, workload, res.Gate, req)
		if bad != nil {
			return *bad
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			res.Verdict, res.Reason, res.Err = strategy.VerdictWait, "reading the workload cluster's pods: "+errtext.Clip(err.Error()), err
			return res
		}
		var blocking []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			blocking = append(blocking, p.Namespace+"/"+p.Name)
		}
		if len(blocking) == 0 {
			return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: res.Gate}
		}
		slices.Sort(blocking)
		res.Verdict = strategy.VerdictWait
		res.Reason = fmt.Sprintf("pods matching %s run: %s", errtext.Quote(selector.String()), strings.Join(capList(blocking), ", "))
		return res
	}), nil
}
