package drain

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func node(name string, unschedulable bool) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
}

func getNode(t *testing.T, cs *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func TestCordonOwnership(t *testing.T) {
	ctx := context.Background()
	t.Run("cordon then uncordon restores schedulable", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", false))
		rec, err := Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.False(t, rec.PriorUnschedulable)
		n := getNode(t, cs, "n1")
		require.True(t, n.Spec.Unschedulable)
		require.Contains(t, n.Annotations[AnnotationCordon], `"owner":"upgrade-a"`)

		again, err := Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err, "idempotent for the same owner")
		require.Equal(t, rec.Owner, again.Owner)

		res, err := Uncordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.True(t, res.Uncordoned)
		n = getNode(t, cs, "n1")
		require.False(t, n.Spec.Unschedulable)
		require.NotContains(t, n.Annotations, AnnotationCordon)
	})
	t.Run("someone else's earlier cordon is never lifted", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", true))
		rec, err := Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.True(t, rec.PriorUnschedulable)
		res, err := Uncordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.False(t, res.Uncordoned)
		require.Contains(t, res.Reason, "already cordoned")
		n := getNode(t, cs, "n1")
		require.True(t, n.Spec.Unschedulable)
		require.NotContains(t, n.Annotations, AnnotationCordon)
	})
	t.Run("a node we did not cordon is left alone", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", true))
		res, err := Uncordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.False(t, res.Uncordoned)
		require.True(t, getNode(t, cs, "n1").Spec.Unschedulable)
	})
	t.Run("other owner", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", false))
		_, err := Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		_, err = Cordon(ctx, cs, "n1", "upgrade-b")
		require.ErrorIs(t, err, ErrCordonedByOther)
		var oe *OwnershipError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "upgrade-a", oe.Holder)
		_, err = Uncordon(ctx, cs, "n1", "upgrade-b")
		require.ErrorIs(t, err, ErrNotOwner)
		require.True(t, getNode(t, cs, "n1").Spec.Unschedulable)
	})
	t.Run("re-cordons when uncordoned behind our back", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", false))
		_, err := Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		n := getNode(t, cs, "n1")
		n.Spec.Unschedulable = false
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
		_, err = Cordon(ctx, cs, "n1", "upgrade-a")
		require.NoError(t, err)
		require.True(t, getNode(t, cs, "n1").Spec.Unschedulable)
	})
	t.Run("bad input", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", false))
		_, err := Cordon(ctx, cs, "n1", "")
		require.ErrorIs(t, err, ErrInvalidOwner)
		_, err = Uncordon(ctx, cs, "n1", "")
		require.ErrorIs(t, err, ErrInvalidOwner)
		_, err = Cordon(ctx, cs, "missing", "o")
		require.Error(t, err)
		n := node("n2", false)
		n.Annotations = map[string]string{AnnotationCordon: "garbage"}
		cs = fake.NewClientset(n)
		_, err = Cordon(ctx, cs, "n2", "o")
		require.ErrorContains(t, err, "not a cordon record")
	})
	t.Run("retries on conflict", func(t *testing.T) {
		cs := fake.NewClientset(node("n1", false))
		// More conflicts than client-go's DefaultBackoff (4 tries) allows:
		// a busy node must not make cordoning fail.
		conflicts := 5
		cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			if conflicts > 0 {
				conflicts--
				return true, nil, errConflict()
			}
			return false, nil, nil
		})
		_, err := Cordon(ctx, cs, "n1", "o")
		require.NoError(t, err)
		require.Equal(t, 0, conflicts)
	})
	t.Run("merge patch with a resourceVersion precondition, never a full update", func(t *testing.T) {
		n := node("n1", false)
		n.ResourceVersion = "42"
		cs := fake.NewClientset(n)
		_, err := Cordon(ctx, cs, "n1", "o")
		require.NoError(t, err)
		_, err = Uncordon(ctx, cs, "n1", "o")
		require.NoError(t, err)
		var patches []string
		for _, a := range cs.Actions() {
			require.NotEqual(t, "update", a.GetVerb(), "a full-object update drops fields this client does not know")
			if pa, ok := a.(k8stesting.PatchAction); ok {
				require.Equal(t, types.MergePatchType, pa.GetPatchType())
				patches = append(patches, string(pa.GetPatch()))
			}
		}
		require.Len(t, patches, 2)
		require.Contains(t, patches[0], `"resourceVersion":"42"`)
		require.Contains(t, patches[0], `"unschedulable":true`)
		require.Contains(t, patches[1], `"annotations":{"upgradekit.io/cordon":null}`)
		require.Contains(t, patches[1], `"unschedulable":false`)
		got := getNode(t, cs, "n1")
		require.False(t, got.Spec.Unschedulable)
		require.NotContains(t, got.Annotations, AnnotationCordon)
	})
}

func errConflict() error {
	return &conflictErr{}
}

type conflictErr struct{}

func (conflictErr) Error() string { return "conflict" }
func (conflictErr) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonConflict, Code: 409}
}

func pod(ns, name, nodeName string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// fakeWithEviction is a fake clientset that advertises the eviction
// subresource and implements it by deleting the pod (no PDB logic: that is
// tested against a real API server), recording what it evicted.
func fakeWithEviction(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"},
	}}}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
	return cs
}

func TestDrainWithFakeClient(t *testing.T) {
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni"}}
	objs := []runtime.Object{
		node("n1", true), ds,
		pod("default", "web", "n1"),
		pod("default", "other-node", "n2"),
		pod("kube-system", "cni-x", "n1", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cni", UID: "ds", Controller: ptr.To(true)}}
		}),
		pod("kube-system", "kube-apiserver-n1", "n1", func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		}),
		pod("upgradekit-system", "upgrader", "n1", func(p *corev1.Pod) { p.Labels = map[string]string{"upgrader": "yes"} }),
		pod("default", "cache", "n1", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}),
	}
	cs := fakeWithEviction(objs...)
	rep, err := Drain(ctx, cs, "n1", WithSkip(labels.SelectorFromSet(labels.Set{"upgrader": "yes"})), WithGracePeriod(0))
	require.NoError(t, err)
	require.Equal(t, []string{"default/cache", "default/web"}, rep.Evicted)
	require.Contains(t, rep.Warnings, "DaemonSet")
	left, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range left.Items {
		names = append(names, p.Name)
	}
	require.ElementsMatch(t, []string{"other-node", "cni-x", "kube-apiserver-n1", "upgrader"}, names)
}

// TestDrainSkipsOnlyInItsNamespace: labels are anyone's to set; with
// WithSkipNamespace a pod elsewhere that copies the skipped labels is
// drained like any other instead of escaping the drain.
func TestDrainSkipsOnlyInItsNamespace(t *testing.T) {
	ctx := context.Background()
	upgrader := func(p *corev1.Pod) { p.Labels = map[string]string{"upgrader": "yes"} }
	cs := fakeWithEviction(node("n1", true),
		pod("upgradekit-system", "upgrader", "n1", upgrader),
		pod("tenant", "lookalike", "n1", upgrader))
	rep, err := Drain(ctx, cs, "n1", WithSkip(labels.SelectorFromSet(labels.Set{"upgrader": "yes"})), WithSkipNamespace("upgradekit-system"), WithGracePeriod(0))
	require.NoError(t, err)
	require.Equal(t, []string{"tenant/lookalike"}, rep.Evicted)
}

func TestDrainRefusals(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		pod     *corev1.Pod
		opts    []Option
		want    error
		blocked []string
	}{
		{
			name: "opt-out annotation",
			pod: pod("default", "batch", "n1", func(p *corev1.Pod) {
				p.Annotations = map[string]string{DefaultOptOutAnnotation: "true"}
			}),
			want: ErrOptedOut, blocked: []string{"default/batch: annotation karpenter.sh/do-not-disrupt=true"},
		},
		{
			name: "custom opt-out annotation",
			pod: pod("default", "batch", "n1", func(p *corev1.Pod) {
				p.Annotations = map[string]string{"example.com/keep": "true"}
			}),
			opts: []Option{WithOptOutAnnotations("example.com/keep")},
			want: ErrOptedOut, blocked: []string{"default/batch: annotation example.com/keep=true"},
		},
		{
			name: "unmanaged pod without force",
			pod:  pod("default", "bare", "n1", func(p *corev1.Pod) { p.OwnerReferences = nil }),
			want: ErrDrainBlocked,
		},
		{
			name: "emptyDir when refused",
			pod: pod("default", "cache", "n1", func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			}),
			opts: []Option{WithDeleteEmptyDirData(false)},
			want: ErrDrainBlocked,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fakeWithEviction(node("n1", true), tt.pod)
			_, err := Drain(ctx, cs, "n1", tt.opts...)
			require.ErrorIs(t, err, tt.want)
			var de *DrainError
			require.ErrorAs(t, err, &de)
			var got []string
			for _, b := range de.Blocked {
				got = append(got, b.String())
			}
			require.Equal(t, tt.blocked, got)
			_, err = cs.CoreV1().Pods(tt.pod.Namespace).Get(ctx, tt.pod.Name, metav1.GetOptions{})
			require.NoError(t, err, "nothing is evicted when the drain is refused up front")
		})
	}
	t.Run("opt-out ignored for finished and terminating pods", func(t *testing.T) {
		optOut := func(p *corev1.Pod) { p.Annotations = map[string]string{DefaultOptOutAnnotation: "true"} }
		cs := fakeWithEviction(node("n1", true),
			pod("default", "done", "n1", optOut, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			pod("default", "crashed", "n1", optOut, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			pod("default", "going", "n1", optOut, func(p *corev1.Pod) {
				p.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now()))
				p.Finalizers = []string{"example.com/hold"}
			}))
		_, err := Drain(ctx, cs, "n1", WithGracePeriod(0), WithTimeout(2*time.Second))
		require.NotErrorIs(t, err, ErrOptedOut, "Karpenter honours do-not-disrupt only on active pods")
		var de *DrainError
		if errors.As(err, &de) {
			require.Empty(t, de.Blocked, "%v", de)
		}
	})
	t.Run("opt-out disabled", func(t *testing.T) {
		cs := fakeWithEviction(node("n1", true), pod("default", "batch", "n1", func(p *corev1.Pod) {
			p.Annotations = map[string]string{DefaultOptOutAnnotation: "true"}
		}))
		_, err := Drain(ctx, cs, "n1", WithOptOutAnnotations(), WithGracePeriod(0))
		require.NoError(t, err)
	})
	t.Run("force deletes unmanaged pods", func(t *testing.T) {
		cs := fakeWithEviction(node("n1", true), pod("default", "bare", "n1", func(p *corev1.Pod) { p.OwnerReferences = nil }))
		rep, err := Drain(ctx, cs, "n1", WithForce(), WithGracePeriod(0))
		require.NoError(t, err)
		require.Equal(t, []string{"default/bare"}, rep.Evicted)
	})
	t.Run("bad selector", func(t *testing.T) {
		_, err := Drain(ctx, fake.NewClientset(), "n1", WithPodSelector("a in ("))
		require.ErrorContains(t, err, "pod selector")
	})
}

func TestDiagnoseFindsBlockingPDBs(t *testing.T) {
	ctx := context.Background()
	pdb := func(name string, allowed int32, sel map[string]string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2},
		}
	}
	terminating := pod("default", "db", "n1", func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now())) })
	cs := fake.NewClientset(
		pod("default", "web", "n1"), terminating, pod("default", "free", "n1"),
		pdb("web-pdb", 0, map[string]string{"app": "web"}),
		pdb("roomy", 3, map[string]string{"app": "free"}),
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nil-selector"}},
	)
	blocked, err := Diagnose(ctx, cs, "n1", nil)
	require.NoError(t, err)
	got := map[string]BlockedPod{}
	for _, b := range blocked {
		got[b.Name] = b
	}
	require.Equal(t, []PDBStatus{{Namespace: "default", Name: "web-pdb", DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}, got["web"].PDBs)
	require.Equal(t, "evicted, still terminating", got["db"].Reason)
	require.Empty(t, got["free"].PDBs, "a PDB that allows disruptions does not block")
	require.Contains(t, got["web"].String(), "blocked by PDB default/web-pdb (disruptionsAllowed=0")

	t.Run("two budgets, stale budget", func(t *testing.T) {
		stale := pdb("stale", 1, map[string]string{"app": "api"})
		stale.Generation, stale.Status.ObservedGeneration = 3, 2
		cs := fake.NewClientset(
			pod("default", "web", "n1"), pod("default", "api", "n1"),
			pdb("web-a", 1, map[string]string{"app": "web"}),
			pdb("web-b", 1, map[string]string{"app": "web"}),
			stale,
		)
		blocked, err := Diagnose(ctx, cs, "n1", nil)
		require.NoError(t, err)
		got := map[string]BlockedPod{}
		for _, b := range blocked {
			got[b.Name] = b
		}
		require.Equal(t, "selected by 2 PodDisruptionBudgets; the eviction API refuses pods covered by more than one", got["web"].Reason)
		require.Len(t, got["web"].PDBs, 2, "both budgets are named, though each allows a disruption")
		require.Contains(t, got["api"].Reason, "status is stale")
		require.Len(t, got["api"].PDBs, 1)
		require.True(t, got["api"].PDBs[0].Stale)
		require.Contains(t, got["api"].String(), "status stale")
	})

	de := &DrainError{Node: "n1", Err: ErrDrainTimeout, Blocked: blocked[:1]}
	require.True(t, errors.Is(de, ErrDrainTimeout))
	require.Contains(t, de.Error(), "1 pod(s) blocking")
}

func TestDrainPodSelector(t *testing.T) {
	ctx := context.Background()
	cs := fakeWithEviction(node("n1", true),
		pod("default", "web", "n1", func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "web"} }),
		pod("default", "db", "n1", func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "db"} }))
	rep, err := Drain(ctx, cs, "n1", WithPodSelector("tier=web"), WithGracePeriod(0))
	require.NoError(t, err)
	require.Equal(t, []string{"default/web"}, rep.Evicted)
	_, err = cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
	require.NoError(t, err, "pods outside the selector stay")
}

// TestRefusesUnsafeNodeNames: an empty name would make the field selector
// spec.nodeName="" select every unscheduled pod of the cluster; such names
// are refused before any request reaches the API server.
func TestRefusesUnsafeNodeNames(t *testing.T) {
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"}} // no nodeName
	for _, name := range []string{"", "../n1", "N1", "n1 ", "a/b"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			cs := fake.NewClientset(node("n1", false), pending)
			cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				t.Errorf("no request may be sent for node %q: %s %s", name, a.GetVerb(), a.GetResource().Resource)
				return false, nil, nil
			})
			_, err := Drain(t.Context(), cs, name)
			require.ErrorIs(t, err, ErrInvalidNode)
			_, err = Diagnose(t.Context(), cs, name, nil)
			require.ErrorIs(t, err, ErrInvalidNode)
			_, err = Cordon(t.Context(), cs, name, "me")
			require.ErrorIs(t, err, ErrInvalidNode)
			_, err = Uncordon(t.Context(), cs, name, "me")
			require.ErrorIs(t, err, ErrInvalidNode)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", name), "the error names the node")
		})
	}
}

// TestRefusesNilClientset: a nil clientset, bare or typed, is an error
// naming ErrNoClient from every entry point, not a nil-pointer panic.
func TestRefusesNilClientset(t *testing.T) {
	for name, cs := range map[string]kubernetes.Interface{
		"nil interface":      nil,
		"nil *Clientset":     (*kubernetes.Clientset)(nil),
		"nil fake clientset": (*fake.Clientset)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Drain(t.Context(), cs, "n1")
			require.ErrorIs(t, err, ErrNoClient)
			_, err = Diagnose(t.Context(), cs, "n1", nil)
			require.ErrorIs(t, err, ErrNoClient)
			_, err = Cordon(t.Context(), cs, "n1", "me")
			require.ErrorIs(t, err, ErrNoClient)
			_, err = Uncordon(t.Context(), cs, "n1", "me")
			require.ErrorIs(t, err, ErrNoClient)
			require.Contains(t, err.Error(), `"n1"`)
		})
	}
}
