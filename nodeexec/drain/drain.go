package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/upgradekit/upgradekit/internal/errtext"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	kdrain "k8s.io/kubectl/pkg/drain"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// DefaultOptOutAnnotation is Karpenter's per-pod opt-out of voluntary
// disruption; a pod carrying it with value "true" blocks the drain.
const DefaultOptOutAnnotation = "karpenter.sh/do-not-disrupt"

// Drain errors.
var (
	// ErrDrainTimeout: the drain did not finish within its timeout.
	ErrDrainTimeout = errors.New("drain timed out")
	// ErrDrainBlocked: pods cannot be evicted under the options given
	// (unmanaged pods without WithForce, DaemonSet pods, local storage).
	ErrDrainBlocked = errors.New("drain blocked")
	// ErrOptedOut: a pod opted out of disruption by annotation.
	ErrOptedOut = errors.New("pod opted out of disruption")
	// ErrEvictionFailed: an eviction or deletion failed for another reason
	// than a PodDisruptionBudget (the detail has the API error).
	ErrEvictionFailed = errors.New("eviction failed")
	// ErrInvalidNode: the node name is empty or not a valid Node name. An
	// empty name would select every unscheduled pod of the cluster (the
	// field selector spec.nodeName=""), so Drain, Diagnose, Cordon and
	// Uncordon refuse it before any request.
	ErrInvalidNode = errors.New("invalid node name")
	// ErrNoClient: the clientset is nil.
	ErrNoClient = errors.New("nil clientset")
)

// checkArgs refuses a nil clientset and a node name that is not a valid
// Node name, before any request.
func checkArgs(cs kubernetes.Interface, node string) error {
	if isNil(cs) {
		return fmt.Errorf("drain: node %s: %w", errtext.Quote(node), ErrNoClient)
	}
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		return fmt.Errorf("drain: node %s: %w: %s", errtext.Quote(node), ErrInvalidNode, strings.Join(msgs, "; "))
	}
	return nil
}

// isNil reports whether cs is nil, including a typed nil pointer in the
// interface (a nil *kubernetes.Clientset).
func isNil(cs kubernetes.Interface) bool {
	if cs == nil {
		return true
	}
	v := reflect.ValueOf(cs)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// PDBStatus is a PodDisruptionBudget as seen when diagnosing.
type PDBStatus struct {
	Namespace, Name    string
	DisruptionsAllowed int32
	CurrentHealthy     int32
	DesiredHealthy     int32
	ExpectedPods       int32
	// Stale is true when the disruption controller has not processed the
	// budget's latest spec (status.observedGeneration < generation); the
	// eviction API refuses evictions it covers until it has.
	Stale bool
}

// String describes the budget in one line, for logs and error messages.
func (p PDBStatus) String() string {
	s := fmt.Sprintf("PDB %s/%s (disruptionsAllowed=%d, healthy %d/%d, desired %d",
		p.Namespace, p.Name, p.DisruptionsAllowed, p.CurrentHealthy, p.ExpectedPods, p.DesiredHealthy)
	if p.Stale {
		s += ", status stale"
	}
	return s + ")"
}

// BlockedPod is a pod that kept the drain from finishing, and why.
type BlockedPod struct {
	Namespace, Name string
	Reason          string
	// WaitsForCompletion: the pod is never evicted, and the drain waits
	// until it has completed (Cluster API's drain rules,
	// WithClusterAPIRules).
	WaitsForCompletion bool
	// PDBs are the budgets that keep the pod from being evicted: those
	// that select it and allow no disruption or have a stale status, or,
	// when more than one selects it, all of them.
	PDBs []PDBStatus
}

// String describes the pod, the reason and the blocking budgets in one
// line of at most errtext.MaxMessage bytes (and a length): budgets past
// that are counted ("; and 9980 more PDB(s)"), not described, so its work
// grows with what it shows, not with the number of budgets.
func (b BlockedPod) String() string {
	var s strings.Builder
	s.WriteString(b.Namespace)
	s.WriteString("/")
	s.WriteString(b.Name)
	s.WriteString(": ")
	s.WriteString(b.Reason)
	for i, p := range b.PDBs {
		d := p.String()
		if i > 0 && s.Len()+len(d) > describeBudget {
			fmt.Fprintf(&s, "; and %d more PDB(s)", len(b.PDBs)-i)
			break
		}
		s.WriteString("; blocked by ")
		s.WriteString(d)
	}
	return errtext.Cap(s.String())
}

// describeBudget is how much of errtext.MaxMessage a list may fill before
// the rest is counted instead of described, leaving room for the count.
const describeBudget = errtext.MaxMessage - 64

// DrainError reports an unfinished drain with its diagnosis.
type DrainError struct {
	Node    string
	Blocked []BlockedPod
	Detail  string
	Err     error
}

// Error implements error.
func (e *DrainError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drain: node %s: %v", e.Node, e.Err)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if len(e.Blocked) > 0 {
		fmt.Fprintf(&b, "; %d pod(s) blocking:", len(e.Blocked))
		for i, p := range e.Blocked {
			d := p.String()
			if i > 0 && b.Len()+len(d) > describeBudget {
				// Cap would cut the rest: describing it is wasted work.
				fmt.Fprintf(&b, " [and %d more]", len(e.Blocked)-i)
				break
			}
			b.WriteString(" [")
			b.WriteString(d)
			b.WriteString("]")
		}
	}
	return errtext.Cap(b.String())
}

// Unwrap returns the sentinel.
func (e *DrainError) Unwrap() error { return e.Err }

// Report describes a finished drain.
type Report struct {
	Node string
	// Evicted lists "namespace/name" of pods evicted (or deleted).
	Evicted []string
	// Warnings is kubectl's warning text (for example the DaemonSet
	// pods it left alone, or the pods without a controller it evicted).
	Warnings string
	// Skipped lists "namespace/name (why)" of pods left alone by
	// Cluster API's drain label or a MachineDrainRule
	// (WithClusterAPIRules), and of pods waited for that had completed.
	Skipped []string
}

type options struct {
	timeout        time.Duration
	podSelector    string
	skip           labels.Selector
	skipNamespace  string
	gracePeriod    int
	deleteEmptyDir bool
	force          bool
	optOut         []string
	retryDelay     time.Duration
	log            logr.Logger
	capi           *ClusterAPIRules
	namespaces     map[string]labels.Set
}

// Option configures Drain.
type Option func(*options)

// WithTimeout bounds the whole drain (default 10 minutes; 0 means none).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithPodSelector only drains pods matching the label selector.
func WithPodSelector(sel string) Option { return func(o *options) { o.podSelector = sel } }

// WithSkip leaves pods matching sel alone (for example the upgrader pod
// itself: nodepod.Selector()). Labels are anyone's to set: combine it with
// WithSkipNamespace so that a pod elsewhere carrying the same labels is
// drained like any other.
func WithSkip(sel labels.Selector) Option { return func(o *options) { o.skip = sel } }

// WithSkipNamespace limits WithSkip to pods in namespace ns.
func WithSkipNamespace(ns string) Option { return func(o *options) { o.skipNamespace = ns } }

// WithGracePeriod overrides every pod's termination grace period, in
// seconds; negative (the default) uses each pod's own.
func WithGracePeriod(seconds int) Option { return func(o *options) { o.gracePeriod = seconds } }

// WithDeleteEmptyDirData evicts pods with emptyDir volumes (default true,
// as Cluster API does: their data does not survive the upgrade anyway).
func WithDeleteEmptyDirData(v bool) Option { return func(o *options) { o.deleteEmptyDir = v } }

// WithForce also deletes pods that no controller manages (default false:
// such pods block the drain and are listed in the diagnosis).
func WithForce() Option { return func(o *options) { o.force = true } }

// WithOptOutAnnotations replaces the annotations through which a pod
// opts out of disruption (default DefaultOptOutAnnotation); none disables
// the opt-out.
func WithOptOutAnnotations(keys ...string) Option {
	return func(o *options) { o.optOut = append([]string(nil), keys...) }
}

// WithEvictionRetryDelay sets the wait between evictions refused by a PDB
// (default 5 seconds).
func WithEvictionRetryDelay(d time.Duration) Option { return func(o *options) { o.retryDelay = d } }

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// Drain evicts the pods of node through the Eviction API, which respects
// PodDisruptionBudgets, using k8s.io/kubectl/pkg/drain. DaemonSet pods and
// mirror (static) pods are left alone. Cordon the node first.
//
// With WithClusterAPIRules it follows Cluster API's drain rules for the
// node's Machine: pods labelled or ruled Skip are left alone, pods
// without a controller are evicted with a warning, pods are evicted by
// increasing drain order, and pods to wait for are never evicted: Drain
// polls them until they complete, and while any has not when the timeout
// ends the error wraps ErrWaitingForCompletion.
//
// When the drain cannot finish, the *DrainError says which pods are left
// and, for each, which PDB allows no disruption, or which pod opted out.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, opts ...Option) (Report, error) {
	o := options{timeout: 10 * time.Minute, gracePeriod: -1, deleteEmptyDir: true, optOut: []string{DefaultOptOutAnnotation}, retryDelay: 5 * time.Second, log: logr.Discard()}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if err := checkArgs(cs, node); err != nil {
		return Report{Node: node}, err
	}
	if _, err := labels.Parse(o.podSelector); err != nil {
		return Report{}, fmt.Errorf("drain: pod selector %q: %w", o.podSelector, err)
	}
	rep := Report{Node: node}
	var rs *ruleSet
	if o.capi != nil {
		var err error
		if rs, err = o.capi.compile(); err != nil {
			return rep, err
		}
		o.force = true // Cluster API evicts pods without a controller, with a warning
		if rs.needNamespaces && o.namespaces == nil {
			nl, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return rep, fmt.Errorf("drain: node %s: list namespaces for MachineDrainRules: %w", node, err)
			}
			WithNamespaces(nl.Items)(&o)
		}
	}
	var mu sync.Mutex
	var optedOut []BlockedPod
	var waits []waitedPod
	var unmanaged []string       // evicted although no controller recreates them
	orders := map[string]int32{} // namespace/name -> drain order
	logw := logWriter{o.log}
	h := &kdrain.Helper{
		Ctx:                  ctx,
		Client:               cs,
		Force:                o.force,
		GracePeriodSeconds:   o.gracePeriod,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   o.deleteEmptyDir,
		PodSelector:          o.podSelector,
		Timeout:              o.timeout,
		EvictErrorRetryDelay: o.retryDelay,
		Out:                  logw,
		ErrOut:               logw,
		AdditionalFilters: []kdrain.PodFilter{
			func(p corev1.Pod) kdrain.PodDeleteStatus {
				// The list is field-selected by the server; double-check,
				// since evicting a pod of another node is never right.
				if p.Spec.NodeName != node {
					return kdrain.MakePodDeleteStatusSkip()
				}
				return kdrain.MakePodDeleteStatusOkay()
			},
			func(p corev1.Pod) kdrain.PodDeleteStatus {
				if o.skip != nil && (o.skipNamespace == "" || p.Namespace == o.skipNamespace) && o.skip.Matches(labels.Set(p.Labels)) {
					return kdrain.MakePodDeleteStatusSkip()
				}
				return kdrain.MakePodDeleteStatusOkay()
			},
			func(p corev1.Pod) kdrain.PodDeleteStatus {
				if rs == nil {
					return kdrain.MakePodDeleteStatusOkay()
				}
				pl, err := rs.plan(&p, o.namespaces)
				if err != nil {
					return kdrain.MakePodDeleteStatusWithError(err.Error())
				}
				key := p.Namespace + "/" + p.Name
				mu.Lock()
				defer mu.Unlock()
				switch pl.behavior {
				case clusterv1.MachineDrainRuleDrainBehaviorSkip:
					rep.Skipped = append(rep.Skipped, key+" ("+pl.why+")")
					return kdrain.MakePodDeleteStatusSkip()
				case clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted:
					if finished(&p) {
						rep.Skipped = append(rep.Skipped, key+" ("+pl.why+", completed)")
					} else {
						waits = append(waits, waitedPod{pod: p, why: pl.why})
					}
					return kdrain.MakePodDeleteStatusSkip()
				}
				orders[key] = pl.order
				if metav1.GetControllerOf(&p) == nil && !finished(&p) {
					unmanaged = append(unmanaged, key)
				}
				return kdrain.MakePodDeleteStatusOkay()
			},
			func(p corev1.Pod) kdrain.PodDeleteStatus {
				// Like Karpenter, the opt-out protects only running work:
				// a finished or already terminating pod cannot block.
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
					return kdrain.MakePodDeleteStatusOkay()
				}
				for _, k := range o.optOut {
					if p.Annotations[k] == "true" {
						mu.Lock()
						optedOut = append(optedOut, BlockedPod{Namespace: p.Namespace, Name: p.Name, Reason: "annotation " + k + "=true"})
						mu.Unlock()
						return kdrain.MakePodDeleteStatusWithError("Pods that opted out of disruption (" + k + "=true)")
					}
				}
				return kdrain.MakePodDeleteStatusOkay()
			},
		},
		OnPodDeletionOrEvictionFinished: func(p *corev1.Pod, _ bool, err error) {
			if err == nil {
				mu.Lock()
				rep.Evicted = append(rep.Evicted, p.Namespace+"/"+p.Name)
				mu.Unlock()
			}
		},
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		if list == nil { // listing itself failed
			return rep, fmt.Errorf("drain: node %s: list pods: %w", node, errs[0])
		}
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		sort.Strings(msgs)
		de := &DrainError{Node: node, Err: ErrDrainBlocked, Detail: strings.Join(msgs, "; "), Blocked: optedOut}
		if len(optedOut) > 0 {
			de.Err = ErrOptedOut
		}
		return rep, de
	}
	rep.Warnings = list.Warnings()
	if len(unmanaged) > 0 {
		// kubectl keeps only the last filter's verdict, so its own
		// warning for these is lost: say it here, as Cluster API does.
		sort.Strings(unmanaged)
		w := "evicting Pods that have no controller (nothing recreates them): " + strings.Join(unmanaged, ", ")
		if rep.Warnings != "" {
			w = rep.Warnings + "\n" + w
		}
		rep.Warnings = w
	}
	sort.Strings(rep.Skipped)
	if rep.Warnings != "" {
		o.log.Info("drain warnings", "node", node, "warnings", rep.Warnings)
	}
	pods := list.Pods()
	o.log.Info("draining node", "node", node, "pods", len(pods), "waitForCompletion", len(waits))

	// Pods go by increasing drain order (all 0 without MachineDrainRules);
	// pods waited for are order 0.
	groups := map[int32][]corev1.Pod{}
	for _, p := range pods {
		ord := orders[p.Namespace+"/"+p.Name]
		groups[ord] = append(groups[ord], p)
	}
	if len(waits) > 0 {
		if _, ok := groups[0]; !ok {
			groups[0] = nil
		}
	}
	order := make([]int32, 0, len(groups))
	for k := range groups {
		order = append(order, k)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	var deadline time.Time
	if o.timeout > 0 {
		deadline = time.Now().Add(o.timeout)
	}
	// later lists the pods of the orders after i, which wait their turn.
	later := func(i int) []BlockedPod {
		var out []BlockedPod
		for _, ord := range order[i+1:] {
			for _, p := range groups[ord] {
				out = append(out, BlockedPod{Namespace: p.Namespace, Name: p.Name,
					Reason: fmt.Sprintf("drain order %d: evicted once the pods of order %d are gone", ord, order[i])})
			}
		}
		return out
	}
	for i, ord := range order {
		if group := groups[ord]; len(group) > 0 {
			if !deadline.IsZero() {
				h.Timeout = time.Until(deadline)
				if h.Timeout <= 0 {
					h.Timeout = time.Nanosecond // expires at once, as the whole drain's timeout has
				}
			}
			if err := h.DeleteOrEvictPods(group); err != nil {
				sort.Strings(rep.Evicted)
				return rep, drainFailure(ctx, cs, node, group, later(i), err)
			}
		}
		if ord == 0 && len(waits) > 0 {
			pending, err := waitForCompletion(ctx, cs, waits, deadline, o.retryDelay)
			if err != nil || len(pending) > 0 {
				sort.Strings(rep.Evicted)
				de := &DrainError{Node: node, Err: ErrWaitingForCompletion, Blocked: append(pending, later(i)...)}
				if err != nil {
					de.Detail = err.Error()
				}
				if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					de.Err = ctx.Err()
				}
				return rep, de
			}
		}
	}
	sort.Strings(rep.Evicted)
	return rep, nil
}

// drainFailure is the *DrainError of an eviction round that did not
// finish: its pods diagnosed, then the pods of later orders.
func drainFailure(ctx context.Context, cs kubernetes.Interface, node string, pods []corev1.Pod, later []BlockedPod, err error) error {
	// Diagnose with a fresh context: the drain's may be what expired.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	blocked, derr := diagnose(dctx, cs, pods)
	de := &DrainError{Node: node, Err: ErrEvictionFailed, Detail: err.Error(), Blocked: append(blocked, later...)}
	if strings.Contains(err.Error(), "global timeout reached") || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		de.Err = ErrDrainTimeout
	}
	if derr != nil {
		de.Detail += "; diagnosis failed: " + derr.Error()
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		de.Err = ctx.Err()
	}
	return de
}

// waitedPod is a pod the drain waits for without evicting it.
type waitedPod struct {
	pod corev1.Pod
	why string
}

// waitForCompletion polls the pods waited for until each has completed
// or is gone, the deadline (zero: none) passes or ctx ends; it returns
// those still running.
func waitForCompletion(ctx context.Context, cs kubernetes.Interface, waits []waitedPod, deadline time.Time, delay time.Duration) ([]BlockedPod, error) {
	if delay <= 0 {
		delay = time.Second
	}
	for {
		var pending []BlockedPod
		for _, w := range waits {
			cur, err := cs.CoreV1().Pods(w.pod.Namespace).Get(ctx, w.pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && (cur.UID != w.pod.UID || finished(cur))) {
				continue
			}
			b := BlockedPod{Namespace: w.pod.Namespace, Name: w.pod.Name, Reason: "waiting for it to complete (" + w.why + "); never evicted"}
			if err != nil {
				b.Reason += ": " + err.Error()
			}
			pending = append(pending, b)
		}
		if len(pending) == 0 {
			return nil, nil
		}
		wait := delay
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return pending, nil
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return pending, ctx.Err()
		case <-t.C:
		}
	}
}

// Diagnose lists the pods still on node that a drain would have to evict
// (not DaemonSet or mirror pods, not matching skip) and, for each, the
// PodDisruptionBudgets that select it and currently allow no disruption.
func Diagnose(ctx context.Context, cs kubernetes.Interface, node string, skip labels.Selector) ([]BlockedPod, error) {
	if err := checkArgs(cs, node); err != nil {
		return nil, err
	}
	pl, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range pl.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		if p.Spec.NodeName != node || (skip != nil && skip.Matches(labels.Set(p.Labels))) {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		pods = append(pods, p)
	}
	return diagnose(ctx, cs, pods)
}

func diagnose(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod) ([]BlockedPod, error) {
	pdbsByNS := map[string][]policyv1.PodDisruptionBudget{}
	var out []BlockedPod
	for _, p := range pods {
		cur, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID && p.UID != "") {
			continue // gone: evicted after all
		}
		if err != nil {
			return out, err
		}
		pdbs, ok := pdbsByNS[p.Namespace]
		if !ok {
			l, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return out, err
			}
			pdbs = l.Items
			pdbsByNS[p.Namespace] = pdbs
		}
		b := pdbVerdict(cur, pdbs)
		switch {
		case b.Reason != "":
		case cur.DeletionTimestamp != nil:
			b.Reason = "evicted, still terminating"
		default:
			b.Reason = "not evicted yet"
		}
		out = append(out, b)
	}
	return out, nil
}

// Blockers is Diagnose before the drain, for a whole cluster at once and
// from objects already read (a preview reads pods and budgets once, not
// once per node): for each node, the pods that would stop Drain, called
// with opts, from finishing, and why. Pods Drain leaves alone (DaemonSet
// and mirror pods, finished pods, pods matching WithSkip or outside
// WithPodSelector) are not listed; nor are pods Drain can evict now.
// Reasons, in the order they are checked: Cluster API's drain rules
// (WithClusterAPIRules) say to wait for the pod to complete
// (WaitsForCompletion; pods they skip are not listed), the pod opted out
// by annotation (WithOptOutAnnotations), it has no controller and
// WithForce is not set (kubectl's drain refuses such pods; Cluster API's
// rules imply WithForce), or its PodDisruptionBudgets refuse the
// eviction (none allows a disruption, a status is stale, or more than
// one selects it). Pods without a node are ignored, and a DaemonSet
// pod's DaemonSet is taken to exist (kubectl's drain refuses orphans).
// Only WithSkip, WithSkipNamespace, WithPodSelector,
// WithOptOutAnnotations, WithForce, WithClusterAPIRules and
// WithNamespaces matter here; a selector that does not parse, an invalid
// MachineDrainRule (ErrInvalidDrainRule), or a namespaceSelector to match
// against a Namespace not given (ErrUnknownNamespace) is an error naming
// it. With WithClusterAPIRules, pass only the pods of that Machine's node.
//
// What it cannot see: budgets that allow one disruption for pods on two
// nodes drained at once (the second eviction waits), and evictions a
// webhook refuses.
func Blockers(pods []corev1.Pod, pdbs []policyv1.PodDisruptionBudget, opts ...Option) (map[string][]BlockedPod, error) {
	o := options{optOut: []string{DefaultOptOutAnnotation}}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	sel, err := labels.Parse(o.podSelector)
	if err != nil {
		return nil, fmt.Errorf("drain: pod selector %q: %w", o.podSelector, err)
	}
	var rs *ruleSet
	if o.capi != nil {
		if rs, err = o.capi.compile(); err != nil {
			return nil, err
		}
		o.force = true
	}
	out := map[string][]BlockedPod{}
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if node == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		ctrl := metav1.GetControllerOf(p)
		if ctrl != nil && ctrl.Kind == "DaemonSet" {
			continue
		}
		if !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if o.skip != nil && (o.skipNamespace == "" || p.Namespace == o.skipNamespace) && o.skip.Matches(labels.Set(p.Labels)) {
			continue
		}
		b := BlockedPod{Namespace: p.Namespace, Name: p.Name}
		if rs != nil {
			pl, err := rs.plan(p, o.namespaces)
			if err != nil {
				return nil, err
			}
			switch pl.behavior {
			case clusterv1.MachineDrainRuleDrainBehaviorSkip:
				continue
			case clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted:
				b.Reason = "the drain waits for it to complete (" + pl.why + "); never evicted"
				b.WaitsForCompletion = true
				out[node] = append(out[node], b)
				continue
			}
		}
		for _, k := range o.optOut {
			if p.Annotations[k] == "true" {
				b.Reason = "annotation " + k + "=true"
				break
			}
		}
		if b.Reason == "" && ctrl == nil && !o.force {
			b.Reason = "not managed by a controller; the drain refuses such pods without force"
		}
		if b.Reason == "" {
			b = pdbVerdict(p, pdbs)
		}
		if b.Reason != "" {
			out[node] = append(out[node], b)
		}
	}
	for _, bs := range out {
		sort.Slice(bs, func(i, j int) bool {
			return bs[i].Namespace+"/"+bs[i].Name < bs[j].Namespace+"/"+bs[j].Name
		})
	}
	return out, nil
}

// pdbVerdict is what the PodDisruptionBudgets selecting pod make of its
// eviction: the budgets that stop it, and a Reason when they do (empty
// when none does). The eviction API refuses a pod selected by more than
// one budget, and any pod whose budget's status is stale.
func pdbVerdict(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) BlockedPod {
	b := BlockedPod{Namespace: pod.Namespace, Name: pod.Name}
	var matching []PDBStatus
	stale := false
	for _, pdb := range pdbs {
		if pdb.Namespace != "" && pdb.Namespace != pod.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		st := PDBStatus{
			Namespace: pdb.Namespace, Name: pdb.Name,
			DisruptionsAllowed: pdb.Status.DisruptionsAllowed,
			CurrentHealthy:     pdb.Status.CurrentHealthy,
			DesiredHealthy:     pdb.Status.DesiredHealthy,
			ExpectedPods:       pdb.Status.ExpectedPods,
			Stale:              pdb.Status.ObservedGeneration < pdb.Generation,
		}
		matching = append(matching, st)
		stale = stale || st.Stale
		if st.DisruptionsAllowed <= 0 || st.Stale {
			b.PDBs = append(b.PDBs, st)
		}
	}
	switch {
	case len(matching) > 1:
		b.PDBs = matching
		b.Reason = fmt.Sprintf("selected by %d PodDisruptionBudgets; the eviction API refuses pods covered by more than one", len(matching))
	case stale:
		b.Reason = "PodDisruptionBudget status is stale (observedGeneration < generation); eviction waits for the disruption controller"
	case len(b.PDBs) > 0:
		b.Reason = "eviction refused by PodDisruptionBudget"
	}
	return b
}

// logWriter adapts logr to the io.Writer kubectl's helper prints to.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	if msg := strings.TrimSpace(string(p)); msg != "" {
		w.log.V(1).Info(msg)
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}
