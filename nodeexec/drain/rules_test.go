package drain_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
)

var managed = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: ptr.To(true)}}

func rulePod(ns, name string, lbl map[string]string, owners []metav1.OwnerReference, ann map[string]string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl, OwnerReferences: owners, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func mdr(name string, behavior clusterv1.MachineDrainRuleDrainBehavior, machines []clusterv1.MachineDrainRuleMachineSelector, pods []clusterv1.MachineDrainRulePodSelector) clusterv1.MachineDrainRule {
	return clusterv1.MachineDrainRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       clusterv1.MachineDrainRuleSpec{Drain: clusterv1.MachineDrainRuleDrainConfig{Behavior: behavior}, Machines: machines, Pods: pods},
	}
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

// TestBlockersFollowClusterAPIRules: what Cluster API's drain rules make
// of each pod, as the preview sees it: a pod a rule skips never blocks
// (whatever its PDB or opt-out), a pod waited for is listed as such, a
// pod without a controller is evicted, and rules apply only to the
// Machine and Cluster they select, first by name.
func TestBlockersFollowClusterAPIRules(t *testing.T) {
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m1", Labels: map[string]string{"pool": "gpu"}}}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1", Labels: map[string]string{"env": "prod"}}}
	namespaces := []corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "apps", Labels: map[string]string{"team": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
	}
	// Every pod labelled app=db is covered by a budget allowing nothing.
	pdbs := []policyv1.PodDisruptionBudget{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel("app", "db")},
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel("app", "db")},
	}}
	pdbBlocked := "eviction refused by PodDisruptionBudget"
	optOut := map[string]string{drain.DefaultOptOutAnnotation: "true"}
	type want map[string]string // pod -> reason ("wait" for WaitsForCompletion)
	for _, tc := range []struct {
		name  string
		pods  []corev1.Pod
		rules *drain.ClusterAPIRules
		want  want
	}{
		{
			name:  "without the rules a bare pod blocks and the label means nothing",
			pods:  []corev1.Pod{rulePod("apps", "bare", nil, nil, nil), rulePod("apps", "db", map[string]string{"app": "db", clusterv1.PodDrainLabel: "skip"}, managed, nil)},
			rules: nil,
			want:  want{"apps/bare": "not managed by a controller; the drain refuses such pods without force", "apps/db": pdbBlocked},
		},
		{
			name: "labels: skip never blocks, wait-completed is waited for in any case, an unknown value is ignored",
			pods: []corev1.Pod{
				rulePod("apps", "bare", nil, nil, nil),
				rulePod("apps", "skip", map[string]string{"app": "db", clusterv1.PodDrainLabel: "skip"}, managed, optOut),
				rulePod("apps", "wait", map[string]string{"app": "db", clusterv1.PodDrainLabel: "Wait-Completed"}, managed, nil),
				rulePod("apps", "typo", map[string]string{clusterv1.PodDrainLabel: "never"}, managed, optOut),
			},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster},
			want:  want{"apps/wait": "wait", "apps/typo": "annotation " + drain.DefaultOptOutAnnotation + "=true"},
		},
		{
			name: "a Skip rule with pod and namespace selectors",
			pods: []corev1.Pod{rulePod("apps", "db", map[string]string{"app": "db"}, managed, nil), rulePod("other", "db", map[string]string{"app": "db"}, managed, nil)},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster, Rules: []clusterv1.MachineDrainRule{
				mdr("skip-db", clusterv1.MachineDrainRuleDrainBehaviorSkip, nil, []clusterv1.MachineDrainRulePodSelector{{Selector: sel("app", "db"), NamespaceSelector: sel("team", "a")}}),
			}},
			want: want{"other/db": pdbBlocked},
		},
		{
			name: "a rule for other Machines or other Clusters does not apply",
			pods: []corev1.Pod{rulePod("apps", "db", map[string]string{"app": "db"}, managed, nil)},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster, Rules: []clusterv1.MachineDrainRule{
				mdr("other-pool", clusterv1.MachineDrainRuleDrainBehaviorSkip, []clusterv1.MachineDrainRuleMachineSelector{{Selector: sel("pool", "cpu")}}, nil),
				mdr("gpu-in-dev", clusterv1.MachineDrainRuleDrainBehaviorSkip, []clusterv1.MachineDrainRuleMachineSelector{{Selector: sel("pool", "gpu"), ClusterSelector: sel("env", "dev")}}, nil),
			}},
			want: want{"apps/db": pdbBlocked},
		},
		{
			name: "a rule selecting the Machine and its Cluster applies",
			pods: []corev1.Pod{rulePod("apps", "db", map[string]string{"app": "db"}, managed, nil)},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster, Rules: []clusterv1.MachineDrainRule{
				mdr("gpu-in-prod", clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted, []clusterv1.MachineDrainRuleMachineSelector{{Selector: sel("pool", "gpu"), ClusterSelector: sel("env", "prod")}}, nil),
			}},
			want: want{"apps/db": "wait"},
		},
		{
			name: "the first matching rule by name decides",
			pods: []corev1.Pod{rulePod("apps", "db", map[string]string{"app": "db"}, managed, nil)},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster, Rules: []clusterv1.MachineDrainRule{
				mdr("b-skip", clusterv1.MachineDrainRuleDrainBehaviorSkip, nil, nil),
				mdr("a-drain", clusterv1.MachineDrainRuleDrainBehaviorDrain, nil, nil),
			}},
			want: want{"apps/db": pdbBlocked},
		},
		{
			name: "the label wins over a rule",
			pods: []corev1.Pod{rulePod("apps", "db", map[string]string{"app": "db", clusterv1.PodDrainLabel: "skip"}, managed, nil)},
			rules: &drain.ClusterAPIRules{Machine: machine, Cluster: cluster, Rules: []clusterv1.MachineDrainRule{
				mdr("a-wait", clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted, nil, nil),
			}},
			want: want{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []drain.Option{drain.WithNamespaces(namespaces)}
			if tc.rules != nil {
				opts = append(opts, drain.WithClusterAPIRules(*tc.rules))
			}
			got, err := drain.Blockers(tc.pods, pdbs, opts...)
			require.NoError(t, err)
			have := want{}
			for _, b := range got["n1"] {
				r := b.Reason
				if b.WaitsForCompletion {
					r = "wait"
				}
				have[b.Namespace+"/"+b.Name] = r
			}
			require.Empty(t, cmp.Diff(tc.want, have))
		})
	}
}

func TestClusterAPIRulesRefused(t *testing.T) {
	pods := []corev1.Pod{rulePod("apps", "db", nil, managed, nil)}
	bad := mdr("bad", clusterv1.MachineDrainRuleDrainBehaviorSkip, []clusterv1.MachineDrainRuleMachineSelector{{
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Sometimes"}}},
	}}, nil)
	_, err := drain.Blockers(pods, nil, drain.WithClusterAPIRules(drain.ClusterAPIRules{Rules: []clusterv1.MachineDrainRule{bad}}))
	require.ErrorIs(t, err, drain.ErrInvalidDrainRule)
	require.ErrorContains(t, err, "bad: spec.machines[0].selector")

	unknown := mdr("odd", "Sometimes", nil, nil)
	_, err = drain.Blockers(pods, nil, drain.WithClusterAPIRules(drain.ClusterAPIRules{Rules: []clusterv1.MachineDrainRule{unknown}}))
	require.ErrorIs(t, err, drain.ErrInvalidDrainRule)
	require.ErrorContains(t, err, "odd: spec.drain.behavior")

	byNS := mdr("by-ns", clusterv1.MachineDrainRuleDrainBehaviorSkip, nil, []clusterv1.MachineDrainRulePodSelector{{NamespaceSelector: sel("team", "a")}})
	_, err = drain.Blockers(pods, nil, drain.WithClusterAPIRules(drain.ClusterAPIRules{Rules: []clusterv1.MachineDrainRule{byNS}}))
	require.ErrorIs(t, err, drain.ErrUnknownNamespace)
	require.ErrorContains(t, err, "apps/db")
}
