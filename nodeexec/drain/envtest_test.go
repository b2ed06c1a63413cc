package drain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// runningPod creates a pod bound to node and marks it Running and Ready
// through the status subresource (envtest has no kubelet).
func runningPod(t *testing.T, cs kubernetes.Interface, ns, name, node string, labels map[string]string, owner metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.local/app:1"}}},
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	return p
}

// setPDBStatus plays the disruption controller, which envtest does not run.
func setPDBStatus(t *testing.T, cs kubernetes.Interface, ns, name string, allowed int32) {
	t.Helper()
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptionsAllowed: allowed,
		CurrentHealthy:     2, DesiredHealthy: 2, ExpectedPods: 2,
		DisruptedPods: map[string]metav1.Time{},
	}
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(t.Context(), pdb, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func exists(t *testing.T, cs kubernetes.Interface, ns, name string) bool {
	_, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func TestCordonAndDrainAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	const nodeName, ns = "worker-1", "apps"

	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, n := range []string{ns, nodepod.DefaultNamespace} {
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "11111111-1111-1111-1111-111111111111", Controller: ptr.To(true)}
	runningPod(t, cs, ns, "web-0", nodeName, map[string]string{"app": "web"}, rs)
	runningPod(t, cs, ns, "web-1", nodeName, map[string]string{"app": "web"}, rs)
	runningPod(t, cs, ns, "free", nodeName, map[string]string{"app": "free"}, rs)
	runningPod(t, cs, ns, "elsewhere", "worker-2", map[string]string{"app": "free"}, rs)
	// The upgrader pod itself must survive the drain.
	runningPod(t, cs, nodepod.DefaultNamespace, "upgradekit-x", nodeName,
		map[string]string{nodepod.LabelManagedBy: nodepod.ManagedByValue, nodepod.LabelName: nodepod.NameValue}, rs)
	// A DaemonSet pod is left alone.
	dsLabels := map[string]string{"app": "cni"}
	ds, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cni"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: dsLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.local/cni:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	runningPod(t, cs, ns, "cni-x", nodeName, dsLabels, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: ds.UID, Controller: ptr.To(true)})

	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	setPDBStatus(t, cs, ns, "web-pdb", 0)

	// Cordon, with ownership recorded on the real Node.
	_, err = drain.Cordon(ctx, cs, nodeName, "upgrade-42")
	require.NoError(t, err)
	n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, n.Spec.Unschedulable)
	t.Logf("node annotation %s=%s", drain.AnnotationCordon, n.Annotations[drain.AnnotationCordon])
	_, err = drain.Uncordon(ctx, cs, nodeName, "someone-else")
	require.ErrorIs(t, err, drain.ErrNotOwner)

	// Drain: the PDB allows no disruption, so the drain times out and
	// names the PDB.
	opts := []drain.Option{
		drain.WithTimeout(3 * time.Second), drain.WithEvictionRetryDelay(200 * time.Millisecond),
		drain.WithGracePeriod(0), drain.WithSkip(nodepod.Selector()),
	}
	rep, err := drain.Drain(ctx, cs, nodeName, opts...)
	require.ErrorIs(t, err, drain.ErrDrainTimeout)
	t.Logf("blocked drain: %v", err)
	var de *drain.DrainError
	require.ErrorAs(t, err, &de)
	require.Len(t, de.Blocked, 2)
	for i, want := range []string{"web-0", "web-1"} {
		b := de.Blocked[i]
		require.Equal(t, want, b.Name)
		require.Equal(t, "eviction refused by PodDisruptionBudget", b.Reason)
		require.Equal(t, []drain.PDBStatus{{Namespace: ns, Name: "web-pdb", DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}, b.PDBs)
	}
	require.Equal(t, []string{"apps/free"}, rep.Evicted, "the unprotected pod was evicted")
	require.False(t, exists(t, cs, ns, "free"))
	require.True(t, exists(t, cs, ns, "web-0"))
	require.True(t, exists(t, cs, ns, "cni-x"), "DaemonSet pods stay")
	require.True(t, exists(t, cs, nodepod.DefaultNamespace, "upgradekit-x"), "the upgrader pod stays")
	require.True(t, exists(t, cs, ns, "elsewhere"), "pods of other nodes are untouched")

	diag, err := drain.Diagnose(ctx, cs, nodeName, nodepod.Selector())
	require.NoError(t, err)
	require.Len(t, diag, 2, "Diagnose agrees: only the PDB-protected pods are in the way")

	// Once the budget allows it, the drain finishes.
	setPDBStatus(t, cs, ns, "web-pdb", 2)
	rep, err = drain.Drain(ctx, cs, nodeName, opts...)
	require.NoError(t, err)
	require.Equal(t, []string{"apps/web-0", "apps/web-1"}, rep.Evicted)
	t.Logf("drain after the PDB allowed 2 disruptions: evicted %v, warnings %q", rep.Evicted, rep.Warnings)

	res, err := drain.Uncordon(ctx, cs, nodeName, "upgrade-42")
	require.NoError(t, err)
	require.True(t, res.Uncordoned)
	n, err = cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable)
	require.NotContains(t, n.Annotations, drain.AnnotationCordon)
}

func TestForeignCordonSurvivesAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "maint"},
		Spec:       corev1.NodeSpec{Unschedulable: true}, // an operator's cordon
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	rec, err := drain.Cordon(ctx, cs, "maint", "upgrade-1")
	require.NoError(t, err)
	require.True(t, rec.PriorUnschedulable)
	res, err := drain.Uncordon(ctx, cs, "maint", "upgrade-1")
	require.NoError(t, err)
	require.False(t, res.Uncordoned)
	n, err := cs.CoreV1().Nodes().Get(ctx, "maint", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, n.Spec.Unschedulable, "the operator's cordon is still there")
}

func TestOptOutAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "22222222-2222-2222-2222-222222222222", Controller: ptr.To(true)}
	runningPod(t, cs, "default", "ok", "n1", nil, rs)
	p := runningPod(t, cs, "default", "precious", "n1", nil, rs)
	p.Annotations = map[string]string{drain.DefaultOptOutAnnotation: "true"}
	_, err = cs.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)

	_, err = drain.Drain(ctx, cs, "n1", drain.WithGracePeriod(0), drain.WithTimeout(5*time.Second))
	require.ErrorIs(t, err, drain.ErrOptedOut)
	t.Logf("opt-out: %v", err)
	require.True(t, exists(t, cs, "default", "ok"), "nothing is evicted when a pod opts out")
	require.True(t, exists(t, cs, "default", "precious"))
}

// TestBlockersPredictDrainAgainstAPIServer: for one node per kind of pod,
// Blockers (from pods and budgets read once) names exactly the nodes whose
// real drain, through the real eviction API, then fails, and no other.
func TestBlockersPredictDrainAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	const ns = "apps"
	for _, n := range []string{ns, nodepod.DefaultNamespace} {
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "11111111-1111-1111-1111-111111111111", Controller: ptr.To(true)}
	dsLabels := map[string]string{"app": "cni"}
	daemonSet, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cni"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: dsLabels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: dsLabels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.local/cni:1"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	ds := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: daemonSet.UID, Controller: ptr.To(true)}
	pdb := func(name string, sel map[string]string, allowed int32) {
		_, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		setPDBStatus(t, cs, ns, name, allowed)
	}
	cases := []struct {
		node    string
		setup   func(node string)
		blocked string // the reason Blockers gives, "" when the drain finishes
	}{
		{"evictable", func(n string) { runningPod(t, cs, ns, "web-"+n, n, map[string]string{"app": "web"}, rs) }, ""},
		{"roomy-pdb", func(n string) {
			runningPod(t, cs, ns, "api-"+n, n, map[string]string{"app": "api"}, rs)
			pdb("api", map[string]string{"app": "api"}, 1)
		}, ""},
		{"daemonset-only", func(n string) { runningPod(t, cs, ns, "cni-"+n, n, dsLabels, ds) }, ""},
		{"upgrader-only", func(n string) {
			runningPod(t, cs, nodepod.DefaultNamespace, "upgradekit-"+n, n,
				map[string]string{nodepod.LabelManagedBy: nodepod.ManagedByValue, nodepod.LabelName: nodepod.NameValue}, rs)
		}, ""},
		{"pdb-zero", func(n string) {
			runningPod(t, cs, ns, "db-"+n, n, map[string]string{"app": "db"}, rs)
			pdb("db", map[string]string{"app": "db"}, 0)
		}, "eviction refused by PodDisruptionBudget"},
		{"two-pdbs", func(n string) {
			runningPod(t, cs, ns, "cache-"+n, n, map[string]string{"app": "cache"}, rs)
			pdb("cache-a", map[string]string{"app": "cache"}, 1)
			pdb("cache-b", map[string]string{"app": "cache"}, 1)
		}, "selected by 2 PodDisruptionBudgets"},
		{"opted-out", func(n string) {
			p := runningPod(t, cs, ns, "batch-"+n, n, map[string]string{"app": "batch"}, rs)
			p.Annotations = map[string]string{drain.DefaultOptOutAnnotation: "true"}
			_, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			require.NoError(t, err)
		}, "annotation karpenter.sh/do-not-disrupt=true"},
		{"bare-pod", func(n string) {
			p := runningPod(t, cs, ns, "bare-"+n, n, map[string]string{"app": "bare"}, rs)
			p.OwnerReferences = nil
			_, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			require.NoError(t, err)
		}, "not managed by a controller"},
	}
	for _, c := range cases {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.node}}, metav1.CreateOptions{})
		require.NoError(t, err)
		c.setup(c.node)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	pdbs, err := cs.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	skip := []drain.Option{drain.WithSkip(nodepod.Selector()), drain.WithSkipNamespace(nodepod.DefaultNamespace)}
	blockers, err := drain.Blockers(pods.Items, pdbs.Items, skip...)
	require.NoError(t, err)

	errs := make([]error, len(cases))
	done := make(chan int)
	for i, c := range cases {
		go func() {
			_, errs[i] = drain.Drain(ctx, cs, c.node, append(skip, drain.WithTimeout(3*time.Second), drain.WithGracePeriod(0), drain.WithEvictionRetryDelay(200*time.Millisecond))...)
			done <- i
		}()
	}
	for range cases {
		<-done
	}
	for i, c := range cases {
		if c.blocked == "" {
			require.NoError(t, errs[i], "node %s drains", c.node)
			require.Empty(t, blockers[c.node], "node %s: Blockers agrees", c.node)
			continue
		}
		require.Error(t, errs[i], "node %s does not drain", c.node)
		require.Len(t, blockers[c.node], 1, "node %s: Blockers names its pod", c.node)
		require.Contains(t, blockers[c.node][0].Reason, c.blocked, c.node)
	}
	require.Len(t, blockers, 4, "no other node is named")

	_, err = drain.Blockers(nil, nil, drain.WithPodSelector("a in ("))
	require.ErrorContains(t, err, "pod selector")
}

// TestClusterAPIRulesAgainstAPIServer: the drain follows Cluster API's
// rules on a real API server: a pod labelled cluster.x-k8s.io/drain=skip
// and one a MachineDrainRule skips are never evicted, a bare pod is
// evicted with a warning instead of blocking, a wait-completed pod is
// never evicted but waited for, and a pod of drain order 1 is evicted
// only once that wait is over.
func TestClusterAPIRulesAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	const nodeName = "w1"
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for name, lbl := range map[string]map[string]string{"apps": nil, "monitoring": {"team": "obs"}} {
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "33333333-3333-3333-3333-333333333333", Controller: ptr.To(true)}
	runningPod(t, cs, "apps", "web", nodeName, map[string]string{"app": "web"}, rs)
	runningPod(t, cs, "apps", "cache", nodeName, map[string]string{"app": "cache", "cluster.x-k8s.io/drain": "skip"}, rs)
	wait := runningPod(t, cs, "apps", "batch", nodeName, map[string]string{"app": "batch", "cluster.x-k8s.io/drain": "wait-completed"}, rs)
	runningPod(t, cs, "apps", "last", nodeName, map[string]string{"app": "last"}, rs)
	runningPod(t, cs, "monitoring", "agent", nodeName, map[string]string{"app": "agent"}, rs)
	// A bare pod: no controller.
	bare, err := cs.CoreV1().Pods("apps").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "debug"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.local/debug:1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	bare.Status.Phase = corev1.PodRunning
	_, err = cs.CoreV1().Pods("apps").UpdateStatus(ctx, bare, metav1.UpdateOptions{})
	require.NoError(t, err)

	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m1", Labels: map[string]string{"pool": "a"}}}
	rules := drain.ClusterAPIRules{Machine: machine, Rules: []clusterv1.MachineDrainRule{
		{ObjectMeta: metav1.ObjectMeta{Name: "keep-monitoring"}, Spec: clusterv1.MachineDrainRuleSpec{
			Drain: clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Pods:  []clusterv1.MachineDrainRulePodSelector{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "obs"}}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "last-last"}, Spec: clusterv1.MachineDrainRuleSpec{
			Drain:    clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorDrain, Order: ptr.To[int32](1)},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}}},
			Pods:     []clusterv1.MachineDrainRulePodSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "last"}}}},
		}},
	}}
	opts := []drain.Option{
		drain.WithTimeout(2 * time.Second), drain.WithEvictionRetryDelay(200 * time.Millisecond),
		drain.WithGracePeriod(0), drain.WithClusterAPIRules(rules),
	}

	// Without the rules (today's behaviour): the bare pod blocks.
	_, err = drain.Drain(ctx, cs, nodeName, drain.WithTimeout(2*time.Second), drain.WithGracePeriod(0))
	require.ErrorIs(t, err, drain.ErrDrainBlocked)
	require.True(t, exists(t, cs, "apps", "debug"))

	rep, err := drain.Drain(ctx, cs, nodeName, opts...)
	require.ErrorIs(t, err, drain.ErrWaitingForCompletion)
	t.Logf("waiting: %v", err)
	var de *drain.DrainError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []drain.BlockedPod{
		{Namespace: "apps", Name: "batch", Reason: "waiting for it to complete (label cluster.x-k8s.io/drain=wait-completed); never evicted"},
		{Namespace: "apps", Name: "last", Reason: "drain order 1: evicted once the pods of order 0 are gone"},
	}, de.Blocked)
	require.Equal(t, []string{"apps/debug", "apps/web"}, rep.Evicted, "the bare pod is evicted, not a blocker")
	require.Contains(t, rep.Warnings, "apps/debug", "with a warning")
	require.Equal(t, []string{"apps/cache (label cluster.x-k8s.io/drain=skip)", "monitoring/agent (MachineDrainRule keep-monitoring)"}, rep.Skipped)
	for _, p := range []string{"apps/cache", "apps/batch", "apps/last", "monitoring/agent"} {
		ns, name, _ := strings.Cut(p, "/")
		require.True(t, exists(t, cs, ns, name), "%s still there", p)
	}

	// The batch pod completes: the drain goes on to order 1 and finishes,
	// the completed pod left alone.
	wait, err = cs.CoreV1().Pods("apps").Get(ctx, wait.Name, metav1.GetOptions{})
	require.NoError(t, err)
	wait.Status.Phase = corev1.PodSucceeded
	_, err = cs.CoreV1().Pods("apps").UpdateStatus(ctx, wait, metav1.UpdateOptions{})
	require.NoError(t, err)
	rep, err = drain.Drain(ctx, cs, nodeName, opts...)
	require.NoError(t, err)
	require.Equal(t, []string{"apps/last"}, rep.Evicted)
	require.True(t, exists(t, cs, "apps", "batch"), "a pod waited for is never evicted")
	require.True(t, exists(t, cs, "apps", "cache"), "drain=skip is never evicted")
	require.True(t, exists(t, cs, "monitoring", "agent"), "the MachineDrainRule's Skip")
}
