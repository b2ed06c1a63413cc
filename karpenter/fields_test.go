package karpenter_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/karpenter"
)

func TestChangedTemplateFields(t *testing.T) {
	edit := func(f func(*karpv1.NodeClaimTemplate)) *karpv1.NodeClaimTemplate {
		tmpl := hashRealisticTemplate()
		f(&tmpl)
		return &tmpl
	}
	realistic := hashRealisticTemplate()
	long := strings.Repeat("é", 200) // 400 bytes
	tests := []struct {
		name     string
		old, cur *karpv1.NodeClaimTemplate
		want     []karpenter.FieldChange
	}{
		{name: "identical", old: &realistic, cur: edit(func(*karpv1.NodeClaimTemplate) {})},
		{name: "both nil", old: nil, cur: nil},
		{name: "nil and zero", old: nil, cur: &karpv1.NodeClaimTemplate{}},
		{name: "label value", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels["team"] = "checkout" }),
			want: []karpenter.FieldChange{{Path: `metadata.labels["team"]`, Old: "payments", New: "checkout"}}},
		{name: "label added and removed", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			delete(t.Labels, "environment")
			t.Labels["zone"] = "a"
		}), want: []karpenter.FieldChange{
			{Path: `metadata.labels["environment"]`, Old: "production", New: "(absent)"},
			{Path: `metadata.labels["zone"]`, Old: "(absent)", New: "a"},
		}},
		{name: "label key quoted", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels["a\"b\n"] = "" }),
			want: []karpenter.FieldChange{{Path: `metadata.labels["a\"b\n"]`, Old: "(absent)", New: ""}}},
		{name: "labels nil to empty", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels = nil }), cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{} }),
			want: []karpenter.FieldChange{{Path: "metadata.labels", Old: "(unset)", New: "{}"}}},
		{name: "annotations empty to nil", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Annotations = map[string]string{} }), cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Annotations = nil }),
			want: []karpenter.FieldChange{{Path: "metadata.annotations", Old: "{}", New: "(unset)"}}},
		{name: "labels nil to one entry", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels = nil }), cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{"a": "b"} }),
			want: []karpenter.FieldChange{{Path: `metadata.labels["a"]`, Old: "(absent)", New: "b"}}},
		{name: "annotation value", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Annotations["example.com/owner"] = "someone-else" }),
			want: []karpenter.FieldChange{{Path: `metadata.annotations["example.com/owner"]`, Old: "platform-team@example.com", New: "someone-else"}}},
		{name: "requirements are not hashed", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Requirements = append(t.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{Key: "x", Operator: corev1.NodeSelectorOpExists})
		})},
		{name: "requirements removed", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.Requirements = nil })},
		{name: "taints reordered", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { slices.Reverse(t.Spec.Taints) })},
		{name: "duplicate pair of taints added", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			x := corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoSchedule}
			t.Spec.Taints = append(t.Spec.Taints, x, x)
		})},
		{name: "taint effect", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints[1].Effect = corev1.TaintEffectNoSchedule }),
			want: []karpenter.FieldChange{{Path: "spec.taints",
				Old: "[example.com/dedicated=payments:NoSchedule, example.com/spot:PreferNoSchedule]",
				New: "[example.com/dedicated=payments:NoSchedule, example.com/spot:NoSchedule]"}}},
		{name: "taint time added", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = t.Spec.Taints[:1]
			t.Spec.Taints[0].TimeAdded = &metav1.Time{Time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}
		}), want: []karpenter.FieldChange{{Path: "spec.taints",
			Old: "[example.com/dedicated=payments:NoSchedule, example.com/spot:PreferNoSchedule]",
			New: "[example.com/dedicated=payments:NoSchedule@2024-05-06T07:08:09Z]"}}},
		{name: "taints nil to empty", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = nil }), cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{} }),
			want: []karpenter.FieldChange{{Path: "spec.taints", Old: "(unset)", New: "[]"}}},
		{name: "startup taints removed", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.StartupTaints = nil }),
			want: []karpenter.FieldChange{{Path: "spec.startupTaints", Old: "[node.cilium.io/agent-not-ready=true:NoExecute]", New: "(unset)"}}},
		{name: "nodeClassRef name", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "gpu"}
		}),
			want: []karpenter.FieldChange{{Path: "spec.nodeClassRef",
				Old: "group=karpenter.k8s.aws kind=EC2NodeClass name=default", New: "group=karpenter.k8s.aws kind=EC2NodeClass name=gpu"}}},
		{name: "nodeClassRef to zero", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.NodeClassRef = &karpv1.NodeClassReference{} }),
			want: []karpenter.FieldChange{{Path: "spec.nodeClassRef", Old: "group=karpenter.k8s.aws kind=EC2NodeClass name=default", New: "{}"}}},
		{name: "expireAfter to Never", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never") }),
			want: []karpenter.FieldChange{{Path: "spec.expireAfter", Old: "720h0m0s", New: "Never"}}},
		{name: "expireAfter raw only", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.NillableDuration{} }),
			cur: edit(func(t *karpv1.NodeClaimTemplate) {
				t.Spec.ExpireAfter = karpv1.NillableDuration{Raw: []byte(`"Never"`)}
			}),
			want: []karpenter.FieldChange{{Path: "spec.expireAfter", Old: "Never", New: `Never (raw "\"Never\"")`}}},
		{name: "expireAfter same duration, Raw differs", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) {
			d := 720 * time.Hour
			t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: &d, Raw: []byte(`"30d"`)}
		})},
		{name: "expireAfter pointer to zero", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.NillableDuration{} }),
			cur: edit(func(t *karpv1.NodeClaimTemplate) {
				t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: new(time.Duration)}
			}),
			want: []karpenter.FieldChange{{Path: "spec.expireAfter", Old: "Never", New: "0s"}}},
		{name: "terminationGracePeriod nil to 0", old: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.TerminationGracePeriod = nil }),
			cur:  edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.TerminationGracePeriod = &metav1.Duration{} }),
			want: []karpenter.FieldChange{{Path: "spec.terminationGracePeriod", Old: "(unset)", New: "0s"}}},
		{name: "terminationGracePeriod value", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Spec.TerminationGracePeriod.Duration = time.Hour }),
			want: []karpenter.FieldChange{{Path: "spec.terminationGracePeriod", Old: "48h0m0s", New: "1h0m0s"}}},
		{name: "long value clipped", old: &realistic, cur: edit(func(t *karpv1.NodeClaimTemplate) { t.Annotations["example.com/runbook"] = long }),
			want: []karpenter.FieldChange{{Path: `metadata.annotations["example.com/runbook"]`,
				Old: "https://runbooks.example.com/karpenter/general-purpose", New: strings.Repeat("é", 62) + "…"}}},
		{name: "requirements alone make the spec hashed", old: &karpv1.NodeClaimTemplate{},
			cur:  &karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{Requirements: []karpv1.NodeSelectorRequirementWithMinValues{}}},
			want: []karpenter.FieldChange{{Path: "spec", Old: "(empty)", New: "(only fields Karpenter does not hash are set)"}}},
		{name: "nil against realistic", old: nil, cur: &realistic, want: []karpenter.FieldChange{
			{Path: `metadata.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"]`, Old: "(absent)", New: "true"},
			{Path: `metadata.annotations["example.com/owner"]`, Old: "(absent)", New: "platform-team@example.com"},
			{Path: `metadata.annotations["example.com/runbook"]`, Old: "(absent)", New: "https://runbooks.example.com/karpenter/general-purpose"},
			{Path: `metadata.labels["app.kubernetes.io/managed-by"]`, Old: "(absent)", New: "karpenter"},
			{Path: `metadata.labels["cost-center"]`, Old: "(absent)", New: "cc-4711"},
			{Path: `metadata.labels["environment"]`, Old: "(absent)", New: "production"},
			{Path: `metadata.labels["example.com/tier"]`, Old: "(absent)", New: "backend"},
			{Path: `metadata.labels["node.example.com/workload-type"]`, Old: "(absent)", New: "general-purpose"},
			{Path: `metadata.labels["team"]`, Old: "(absent)", New: "payments"},
			{Path: "spec.expireAfter", Old: "Never", New: "720h0m0s"},
			{Path: "spec.nodeClassRef", Old: "(unset)", New: "group=karpenter.k8s.aws kind=EC2NodeClass name=default"},
			{Path: "spec.startupTaints", Old: "(unset)", New: "[node.cilium.io/agent-not-ready=true:NoExecute]"},
			{Path: "spec.taints", Old: "(unset)", New: "[example.com/dedicated=payments:NoSchedule, example.com/spot:PreferNoSchedule]"},
			{Path: "spec.terminationGracePeriod", Old: "(unset)", New: "48h0m0s"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := karpenter.ChangedTemplateFields(tt.old, tt.cur)
			require.Empty(t, cmp.Diff(tt.want, got))
			require.Equal(t, len(got) == 0, karpenter.TemplateHash(tt.old) == karpenter.TemplateHash(tt.cur), "empty iff the hashes are equal")
			for _, c := range got {
				require.LessOrEqual(t, len(c.Old), 128)
				require.LessOrEqual(t, len(c.New), 128)
			}
		})
	}
}

func TestChangedTemplateFieldsLongTaints(t *testing.T) {
	old := hashRealisticTemplate()
	cur := hashRealisticTemplate()
	for i := range 50 {
		cur.Spec.Taints = append(cur.Spec.Taints, corev1.Taint{Key: strings.Repeat("k", i+1), Value: "ü", Effect: corev1.TaintEffectNoSchedule})
	}
	got := karpenter.ChangedTemplateFields(&old, &cur)
	require.Len(t, got, 1)
	require.Equal(t, "spec.taints", got[0].Path)
	require.LessOrEqual(t, len(got[0].New), 128)
	require.GreaterOrEqual(t, len(got[0].New), 125)
	require.True(t, strings.HasSuffix(got[0].New, "…"))
	require.True(t, utf8.ValidString(got[0].New))
}

// hashTemplateMutators each change one field of a template, some in ways
// Karpenter's hash does not see (requirements, reordering, duplicate pairs).
var hashTemplateMutators = []func(r *rand.Rand, t *karpv1.NodeClaimTemplate){
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { t.Labels = hashRandMap(r) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { t.Annotations = hashRandMap(r) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { hashMutateMap(r, &t.Labels) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { hashMutateMap(r, &t.Annotations) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { t.Spec.Taints = hashRandTaints(r) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { t.Spec.StartupTaints = hashRandTaints(r) },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		t.Spec.Taints = slices.Clone(t.Spec.Taints)
		r.Shuffle(len(t.Spec.Taints), func(i, j int) { t.Spec.Taints[i], t.Spec.Taints[j] = t.Spec.Taints[j], t.Spec.Taints[i] })
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		x := corev1.Taint{Key: hashRandString(r), Effect: corev1.TaintEffectNoExecute}
		t.Spec.StartupTaints = append(slices.Clone(t.Spec.StartupTaints), x, x)
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		t.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: hashRandString(r), Operator: corev1.NodeSelectorOpExists}}
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { t.Spec.Requirements = nil },
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		t.Spec.NodeClassRef = hashRandTemplate(r).Spec.NodeClassRef
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		t.Spec.TerminationGracePeriod = hashRandTemplate(r).Spec.TerminationGracePeriod
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) {
		t.Spec.ExpireAfter = hashRandTemplate(r).Spec.ExpireAfter
	},
	func(r *rand.Rand, t *karpv1.NodeClaimTemplate) { *t = hashRandTemplate(r) },
}

// hashMutateMap changes, adds or removes one entry of a copy of *m.
func hashMutateMap(r *rand.Rand, m *map[string]string) {
	c := make(map[string]string, len(*m)+1)
	for k, v := range *m {
		c[k] = v
	}
	if *m == nil && r.IntN(2) == 0 {
		c = nil
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	switch {
	case len(keys) > 0 && r.IntN(2) == 0:
		k := keys[r.IntN(len(keys))]
		if r.IntN(2) == 0 {
			delete(c, k)
		} else {
			c[k] = hashRandString(r)
		}
	case c != nil:
		c[hashRandString(r)] = hashRandString(r)
	}
	*m = c
}

// TestChangedTemplateFieldsProperty: over random pairs (a template and the
// template with one random field mutated), the change list is empty
// exactly when the hashes are equal, lists only known paths, sorted, and
// is the mirror image of the list for the swapped pair.
func TestChangedTemplateFieldsProperty(t *testing.T) {
	seed := hashSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x6669656c6473))
	known := []string{"metadata.labels", "metadata.annotations", "spec", "spec.taints", "spec.startupTaints",
		"spec.nodeClassRef", "spec.terminationGracePeriod", "spec.expireAfter"}
	var equal, changed int
	for i := range 3000 {
		a := hashRandTemplate(r)
		b := a
		hashTemplateMutators[r.IntN(len(hashTemplateMutators))](r, &b)
		got := karpenter.ChangedTemplateFields(&a, &b)
		same := karpenter.TemplateHash(&a) == karpenter.TemplateHash(&b)
		if (len(got) == 0) != same {
			t.Fatalf("pair %d of seed %d: hashes equal %v but changes %v", i, seed, same, got)
		}
		if same {
			equal++
		} else {
			changed++
		}
		require.True(t, slices.IsSortedFunc(got, func(x, y karpenter.FieldChange) int { return strings.Compare(x.Path, y.Path) }))
		for _, c := range got {
			base, _, _ := strings.Cut(c.Path, "[")
			require.Contains(t, known, base, "path %s", c.Path)
			require.LessOrEqual(t, len(c.Old), 128)
			require.LessOrEqual(t, len(c.New), 128)
		}
		back := karpenter.ChangedTemplateFields(&b, &a)
		require.Len(t, back, len(got))
		for j := range got {
			require.Equal(t, karpenter.FieldChange{Path: got[j].Path, Old: got[j].New, New: got[j].Old}, back[j])
		}
		require.Empty(t, karpenter.ChangedTemplateFields(&a, &a))
	}
	t.Logf("%d pairs hash equal, %d differ", equal, changed)
	require.Positive(t, equal)
	require.Positive(t, changed)
}
