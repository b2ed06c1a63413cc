package drain

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Errors of Cluster API's drain rules.
var (
	// ErrInvalidDrainRule: a MachineDrainRule has a selector that does
	// not parse or a behavior Cluster API does not know; Cluster API's
	// own drain refuses to start then, and so does Drain.
	ErrInvalidDrainRule = errors.New("invalid MachineDrainRule")
	// ErrWaitingForCompletion: pods the rules say to wait for
	// (cluster.x-k8s.io/drain=wait-completed, or a MachineDrainRule with
	// behavior WaitCompleted) have not completed yet. They are never
	// evicted; the drain finishes once they have.
	ErrWaitingForCompletion = errors.New("waiting for pods to complete")
	// ErrUnknownNamespace: a MachineDrainRule with a namespaceSelector
	// had to be matched against a pod whose Namespace was not found.
	ErrUnknownNamespace = errors.New("pod namespace not found")
)

// ClusterAPIRules are Cluster API's drain rules for the Machine a node
// belongs to, as Cluster API v1.14's own Machine drain applies them:
//
//   - DaemonSet pods and mirror (static) pods are left alone, as before;
//   - a pod without a controller is evicted, with a warning (Report's
//     Warnings), rather than blocking the drain: setting these rules
//     implies WithForce;
//   - the pod label cluster.x-k8s.io/drain (clusterv1.PodDrainLabel) =
//     "skip" leaves the pod alone, and "wait-completed" never evicts it
//     but waits until it has completed (case-insensitive, as Cluster
//     API reads it); the label takes precedence over MachineDrainRules;
//   - otherwise the first MachineDrainRule by name that applies to the
//     Machine and Cluster (spec.machines: selector and clusterSelector)
//     and to the pod (spec.pods: selector and namespaceSelector) decides:
//     Skip, WaitCompleted, or Drain with spec.drain.order; pods no rule
//     matches are drained with order 0;
//   - pods are evicted by increasing order, one group after another: a
//     group is evicted only once every pod of a lower order is gone, and
//     pods waited for (order 0) must have completed before pods of a
//     higher order are evicted.
//
// One difference: Cluster API waits for a waited-for pod to be gone from
// the node; Drain counts it as completed once its phase is Succeeded or
// Failed, since a finished pod holds nothing the update could disturb.
type ClusterAPIRules struct {
	// Rules are the MachineDrainRules of the Machine's namespace (Cluster
	// API reads no other); those that do not apply to Machine and Cluster
	// are ignored.
	Rules []clusterv1.MachineDrainRule
	// Machine is the Machine the drained node belongs to; its labels are
	// matched against spec.machines[].selector.
	Machine *clusterv1.Machine
	// Cluster is the Machine's Cluster; its labels are matched against
	// spec.machines[].clusterSelector. Nil matches only rules whose
	// machine selectors have no clusterSelector.
	Cluster *clusterv1.Cluster
}

// WithClusterAPIRules makes Drain and Blockers follow Cluster API's drain
// rules for the Machine (see ClusterAPIRules). Drain lists the workload
// cluster's Namespaces when a rule that applies has a namespaceSelector;
// Blockers needs them given (WithNamespaces).
func WithClusterAPIRules(r ClusterAPIRules) Option {
	return func(o *options) { rr := r; o.capi = &rr }
}

// WithNamespaces gives Drain and Blockers the workload cluster's
// Namespaces, against whose labels MachineDrainRules' namespaceSelectors
// are matched (WithClusterAPIRules). Drain lists them itself when they
// are not given.
func WithNamespaces(nss []corev1.Namespace) Option {
	return func(o *options) {
		o.namespaces = make(map[string]labels.Set, len(nss))
		for i := range nss {
			o.namespaces[nss[i].Name] = labels.Set(nss[i].Labels)
		}
	}
}

// podPlan is what the rules make of one pod.
type podPlan struct {
	behavior clusterv1.MachineDrainRuleDrainBehavior
	order    int32
	// why names the label or rule that decided (empty: no rule matched).
	why string
}

// compiledRule is a MachineDrainRule that applies to the Machine, with
// its pod selectors parsed.
type compiledRule struct {
	name     string
	behavior clusterv1.MachineDrainRuleDrainBehavior
	order    int32
	pods     []compiledPodSelector
}

type compiledPodSelector struct {
	pod, namespace labels.Selector // nil: matches all
}

// ruleSet is ClusterAPIRules compiled for one Machine.
type ruleSet struct {
	rules []compiledRule
	// needNamespaces: some rule has a non-empty namespaceSelector.
	needNamespaces bool
}

// selector parses a label selector, where nil and empty both match all
// (returned as nil).
func selector(ls *metav1.LabelSelector, rule, field string) (labels.Selector, error) {
	if ls == nil {
		return nil, nil
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("drain: %w %s: %s: %w", ErrInvalidDrainRule, rule, field, err)
	}
	if s.Empty() {
		return nil, nil
	}
	return s, nil
}

func matches(s labels.Selector, l map[string]string) bool {
	return s == nil || s.Matches(labels.Set(l))
}

// compile validates every rule (an invalid one is an error naming it and
// its field, whether or not it applies, as Cluster API does) and keeps
// those that apply to the Machine and Cluster, sorted by name.
func (r *ClusterAPIRules) compile() (*ruleSet, error) {
	var machineLabels, clusterLabels map[string]string
	if r.Machine != nil {
		machineLabels = r.Machine.Labels
	}
	if r.Cluster != nil {
		clusterLabels = r.Cluster.Labels
	}
	rs := &ruleSet{}
	for i := range r.Rules {
		mdr := &r.Rules[i]
		switch mdr.Spec.Drain.Behavior {
		case clusterv1.MachineDrainRuleDrainBehaviorDrain, clusterv1.MachineDrainRuleDrainBehaviorSkip, clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted:
		default:
			return nil, fmt.Errorf("drain: %w %s: spec.drain.behavior: unknown value %q", ErrInvalidDrainRule, mdr.Name, mdr.Spec.Drain.Behavior)
		}
		applies := len(mdr.Spec.Machines) == 0
		for j, ms := range mdr.Spec.Machines {
			msel, err := selector(ms.Selector, mdr.Name, fmt.Sprintf("spec.machines[%d].selector", j))
			if err != nil {
				return nil, err
			}
			csel, err := selector(ms.ClusterSelector, mdr.Name, fmt.Sprintf("spec.machines[%d].clusterSelector", j))
			if err != nil {
				return nil, err
			}
			if matches(msel, machineLabels) && matches(csel, clusterLabels) {
				applies = true
			}
		}
		c := compiledRule{name: mdr.Name, behavior: mdr.Spec.Drain.Behavior}
		if c.behavior == clusterv1.MachineDrainRuleDrainBehaviorDrain && mdr.Spec.Drain.Order != nil {
			c.order = *mdr.Spec.Drain.Order
		}
		for j, ps := range mdr.Spec.Pods {
			psel, err := selector(ps.Selector, mdr.Name, fmt.Sprintf("spec.pods[%d].selector", j))
			if err != nil {
				return nil, err
			}
			nsel, err := selector(ps.NamespaceSelector, mdr.Name, fmt.Sprintf("spec.pods[%d].namespaceSelector", j))
			if err != nil {
				return nil, err
			}
			c.pods = append(c.pods, compiledPodSelector{pod: psel, namespace: nsel})
		}
		if !applies {
			continue
		}
		for _, ps := range c.pods {
			rs.needNamespaces = rs.needNamespaces || ps.namespace != nil
		}
		rs.rules = append(rs.rules, c)
	}
	sort.Slice(rs.rules, func(i, j int) bool { return rs.rules[i].name < rs.rules[j].name })
	return rs, nil
}

// plan decides the pod's behavior: its cluster.x-k8s.io/drain label,
// else the first rule (by name) whose pod selectors match, else Drain
// with order 0. namespaces are the Namespaces' labels by name; a rule
// with a namespaceSelector needs the pod's.
func (rs *ruleSet) plan(p *corev1.Pod, namespaces map[string]labels.Set) (podPlan, error) {
	if v, ok := p.Labels[clusterv1.PodDrainLabel]; ok {
		switch {
		case strings.EqualFold(v, "skip"):
			return podPlan{behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip, why: "label " + clusterv1.PodDrainLabel + "=" + v}, nil
		case strings.EqualFold(strings.Replace(v, "-", "", 1), "waitcompleted"):
			return podPlan{behavior: clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted, why: "label " + clusterv1.PodDrainLabel + "=" + v}, nil
		}
		// Any other value is ignored, as Cluster API ignores it.
	}
	for _, r := range rs.rules {
		hit := len(r.pods) == 0
		for _, ps := range r.pods {
			if !matches(ps.pod, p.Labels) {
				continue
			}
			if ps.namespace != nil {
				nsl, ok := namespaces[p.Namespace]
				if !ok {
					return podPlan{}, fmt.Errorf("drain: pod %s/%s: %w (MachineDrainRule %s has a namespaceSelector)", p.Namespace, p.Name, ErrUnknownNamespace, r.name)
				}
				if !ps.namespace.Matches(nsl) {
					continue
				}
			}
			hit = true
			break
		}
		if hit {
			return podPlan{behavior: r.behavior, order: r.order, why: "MachineDrainRule " + r.name}, nil
		}
	}
	return podPlan{behavior: clusterv1.MachineDrainRuleDrainBehaviorDrain}, nil
}

// finished: the pod has completed (or failed), so waiting for it is over.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
