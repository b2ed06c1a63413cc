package capi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ErrMetricsRegistration is matched by NewMetrics' errors: a collector of
// another type or shape is already registered under one of the names.
var ErrMetricsRegistration = errors.New("cannot register upgradekit metrics")

// inProgressPhases are the phases observe.MetricMachinesInProgress always reports,
// zeros included, so dashboards see every series from the start.
var inProgressPhases = []string{observe.ReasonPending, observe.ReasonDraining, observe.ReasonDrainBlocked, observe.ReasonUpgrading, observe.ReasonWaitingForKubelet, observe.ReasonFailed}

// Metrics are the Prometheus metrics of Extension (ExtensionOptions.Metrics) and
// MachineUpdater (UpdaterOptions.Metrics). A nil *Metrics records nothing.
//
// Counters and the histogram are exact per process. The in-progress gauge
// is what this process last answered for each machine: Cluster API sends
// each call to any replica behind the extension's Service, so with several
// replicas each one reports the machines it happened to answer, a machine
// may be counted by more than one replica, and a machine whose update ended
// on another replica lingers here until MetricsOptions.StaleAfter forgets it. Use
// max() over replicas as a rough signal, or, for an exact count, the Nodes'
// observe.ConditionInPlaceUpdate (kube-state-metrics exports every node condition
// as kube_node_status_condition).
type Metrics struct {
	decisions *prometheus.CounterVec
	failures  *prometheus.CounterVec
	duration  prometheus.Histogram
	hooks     *prometheus.HistogramVec
	progress  *progressCollector
}

// MetricsOptions configure NewMetrics. The zero value of every field is
// its default.
type MetricsOptions struct {
	// StaleAfter is how long a machine counts in observe.MetricMachinesInProgress
	// after its last UpdateMachine call (default 15 minutes: longer than
	// any RetryAfterSeconds and than Cluster API's backoff after a few
	// failures; must not be negative).
	StaleAfter time.Duration
	// Clock ages the in-progress entries (default: the real clock; tests
	// use a fake one).
	Clock clock.PassiveClock
}

// NewMetrics creates the metrics and registers them on reg; a nil reg
// means controller-runtime's registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry),
// which a manager's metrics server serves. Calling it again with the same
// registry reuses the collectors already registered (opts of the later
// call are then ignored) instead of failing; a different collector under
// one of the names is an error matching ErrMetricsRegistration.
func NewMetrics(reg prometheus.Registerer, opts MetricsOptions) (*Metrics, error) {
	o := opts
	switch {
	case o.StaleAfter < 0:
		return nil, &OptionError{Option: "MetricsOptions.StaleAfter", Detail: fmt.Sprintf("%s: must not be negative", o.StaleAfter)}
	case o.StaleAfter == 0:
		o.StaleAfter = 15 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: observe.MetricDecisions,
			Help: "CanUpdateMachine and CanUpdateMachineSet answers, by hook and outcome (accept, decline, error).",
		}, []string{"hook", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: observe.MetricFailures,
			Help: "In-place updates that entered a failure, by reason.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    observe.MetricUpdateDuration,
			Help:    "Seconds from the start of an in-place update, as recorded on the Node, to done.",
			Buckets: []float64{30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200},
		}),
		hooks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    observe.MetricHookDuration,
			Help:    "Seconds the extension took to answer one hook call, by hook.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"hook"}),
		progress: &progressCollector{
			desc: prometheus.NewDesc(observe.MetricMachinesInProgress,
				"Machines whose last UpdateMachine answer from this process was in progress, by phase.", []string{"phase"}, nil),
			seen:       map[string]progressEntry{},
			staleAfter: o.StaleAfter,
			clock:      o.Clock,
		},
	}
	if err := register(reg, &m.decisions); err != nil {
		return nil, err
	}
	if err := register(reg, &m.failures); err != nil {
		return nil, err
	}
	if err := register(reg, &m.duration); err != nil {
		return nil, err
	}
	if err := register(reg, &m.hooks); err != nil {
		return nil, err
	}
	if err := register(reg, &m.progress); err != nil {
		return nil, err
	}
	for _, h := range []string{"CanUpdateMachine", "CanUpdateMachineSet", "UpdateMachine"} {
		m.hooks.WithLabelValues(h)
	}
	// Every series exists from the start, at zero.
	for _, h := range []string{"CanUpdateMachine", "CanUpdateMachineSet"} {
		for _, out := range []string{observe.HookAccept, observe.HookDecline, observe.HookError} {
			m.decisions.WithLabelValues(h, out)
		}
	}
	for _, r := range []string{observe.FailureInvalidMachine, observe.FailurePlanRejected, observe.FailurePodBuild, observe.FailurePodRejected, observe.FailureNodeGone,
		observe.FailureAmbiguousNode, observe.FailureNodeClaimed, observe.FailureUpdateTimeout, observe.FailureNodeNotReady, observe.FailureRequestMismatch, observe.FailureStepFailed, observe.FailureDrainTimeout} {
		m.failures.WithLabelValues(r)
	}
	return m, nil
}

// register registers *c, or replaces it with the collector of the same
// type already registered under its descriptors.
func register[T prometheus.Collector](reg prometheus.Registerer, c *T) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			*c = existing
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrMetricsRegistration, err)
}

func (m *Metrics) decision(hook, outcome string) {
	if m != nil {
		m.decisions.WithLabelValues(hook, outcome).Inc()
	}
}

func (m *Metrics) failure(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

// hookDone observes one hook call that started at start.
func (m *Metrics) hookDone(hook string, start time.Time) {
	if m != nil {
		m.hooks.WithLabelValues(hook).Observe(time.Since(start).Seconds())
	}
}

func (m *Metrics) updateDuration(d time.Duration) {
	if m != nil && d >= 0 {
		m.duration.Observe(d.Seconds())
	}
}

func (m *Metrics) track(machine, phase string) {
	if m != nil {
		m.progress.set(machine, phase)
	}
}

func (m *Metrics) untrack(machine string) {
	if m != nil {
		m.progress.remove(machine)
	}
}

type progressEntry struct {
	phase string
	seen  time.Time
}

// progressCollector computes observe.MetricMachinesInProgress when scraped, from
// the last phase answered per machine, forgetting stale entries.
type progressCollector struct {
	desc       *prometheus.Desc
	mu         sync.Mutex
	seen       map[string]progressEntry
	staleAfter time.Duration
	clock      clock.PassiveClock
}

func (p *progressCollector) set(machine, phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[machine] = progressEntry{phase: phase, seen: p.clock.Now()}
}

func (p *progressCollector) remove(machine string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, machine)
}

// Describe implements prometheus.Collector.
func (p *progressCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector.
func (p *progressCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	p.mu.Lock()
	now := p.clock.Now()
	for k, e := range p.seen {
		if now.Sub(e.seen) > p.staleAfter {
			delete(p.seen, k)
			continue
		}
		counts[e.phase]++
	}
	p.mu.Unlock()
	for _, phase := range inProgressPhases {
		if m, err := prometheus.NewConstMetric(p.desc, prometheus.GaugeValue, float64(counts[phase]), phase); err == nil {
			ch <- m
		}
	}
}

// conditionStatus is True while an update is under way.
func conditionStatus(reason string) corev1.ConditionStatus {
	if reason == observe.ReasonSucceeded || reason == observe.ReasonFailed {
		return corev1.ConditionFalse
	}
	return corev1.ConditionTrue
}

// maxConditionMessage keeps condition messages readable in kubectl.
const maxConditionMessage = 1024

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// patchCondition writes cond on the node's status with a strategic merge
// patch keyed by condition type: it touches only that condition, carries
// no resourceVersion (so it cannot conflict with the kubelet's own status
// patches) and leaves every other condition as the kubelet wrote it.
func patchCondition(ctx context.Context, c client.Client, node *corev1.Node, cond corev1.NodeCondition) error {
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	return c.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, data))
}

// readUpdateRecord returns the node's observe.UpdateRecord, nil when there is none
// or when the annotation does not hold one (it is then overwritten).
func readUpdateRecord(n *corev1.Node) (*observe.UpdateRecord, error) {
	raw, ok := n.Annotations[observe.AnnotationInPlaceUpdate]
	if !ok {
		return nil, nil
	}
	var r observe.UpdateRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Version == "" {
		return nil, fmt.Errorf("node %s: annotation %s is not an update record: %q", n.Name, observe.AnnotationInPlaceUpdate, raw)
	}
	return &r, nil
}

// encodeUpdateRecord returns the annotation value of r.
func encodeUpdateRecord(r *observe.UpdateRecord) (string, error) {
	b, err := json.Marshal(r)
	return string(b), err
}

// writeUpdateRecord sets (or, with nil, removes) the node's observe.UpdateRecord
// with a JSON merge patch of that one annotation. It returns the value
// written ("" when removed).
func writeUpdateRecord(ctx context.Context, c client.Client, node string, r *observe.UpdateRecord) (string, error) {
	var v any // null removes the key
	raw := ""
	if r != nil {
		var err error
		if raw, err = encodeUpdateRecord(r); err != nil {
			return "", err
		}
		v = raw
	}
	return raw, patchNodeAnnotation(ctx, c, node, observe.AnnotationInPlaceUpdate, v)
}

// swapUpdateRecord replaces the node's observe.UpdateRecord with r only if the
// annotation still holds old: a JSON patch whose "test" operation makes the
// API server refuse it when another writer (a replica, a later call) got
// there first. Unlike a resourceVersion precondition it does not fail on
// the kubelet's own writes to the Node.
func swapUpdateRecord(ctx context.Context, c client.Client, node, old string, r *observe.UpdateRecord) (string, error) {
	raw, err := encodeUpdateRecord(r)
	if err != nil {
		return "", err
	}
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(observe.AnnotationInPlaceUpdate)
	data, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": old},
		{"op": "replace", "path": path, "value": raw},
	})
	if err != nil {
		return "", err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return raw, c.Patch(ctx, n, client.RawPatch(types.JSONPatchType, data))
}
