package karpenter_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/google/go-cmp/cmp"
	"github.com/mitchellh/hashstructure/v2"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/karpenter"
)

var hashSeedFlag = flag.Uint64("hash.seed", 0, "seed of the randomized hash tests (0: derive one from the clock)")

// hashSeed returns the seed of a randomized test and logs it, so that a
// failure can be replayed with -hash.seed.
func hashSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *hashSeedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -hash.seed=%d)", seed, seed)
	return seed
}

// hashOpts are the options Karpenter's NodePool.Hash and
// EC2NodeClass.Hash pass to hashstructure; a fresh value per call, since
// hashstructure writes its hasher into them.
func hashOpts() *hashstructure.HashOptions {
	return &hashstructure.HashOptions{SlicesAsSets: true, IgnoreZeroValue: true, ZeroNil: true}
}

func hashPtr[T any](v T) *T { return &v }

// hashRealisticTemplate is a NodePool template like the ones clusters run:
// 6 labels, 3 annotations, 2 taints, 1 startup taint, a nodeClassRef,
// expireAfter 720h, a terminationGracePeriod and 4 requirements.
func hashRealisticTemplate() karpv1.NodeClaimTemplate {
	return karpv1.NodeClaimTemplate{
		ObjectMeta: karpv1.ObjectMeta{
			Labels: map[string]string{
				"team":                           "payments",
				"environment":                    "production",
				"cost-center":                    "cc-4711",
				"app.kubernetes.io/managed-by":   "karpenter",
				"node.example.com/workload-type": "general-purpose",
				"example.com/tier":               "backend",
			},
			Annotations: map[string]string{
				"example.com/owner":                              "platform-team@example.com",
				"example.com/runbook":                            "https://runbooks.example.com/karpenter/general-purpose",
				"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
			},
		},
		Spec: karpv1.NodeClaimTemplateSpec{
			Taints: []corev1.Taint{
				{Key: "example.com/dedicated", Value: "payments", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule},
			},
			StartupTaints: []corev1.Taint{
				{Key: "node.cilium.io/agent-not-ready", Value: "true", Effect: corev1.TaintEffectNoExecute},
			},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}},
				{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
				{Key: "karpenter.k8s.aws/instance-category", Operator: corev1.NodeSelectorOpIn, Values: []string{"c", "m", "r"}},
				{Key: "karpenter.k8s.aws/instance-generation", Operator: corev1.NodeSelectorOpGt, Values: []string{"5"}},
			},
			NodeClassRef:           &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			ExpireAfter:            karpv1.MustParseNillableDuration("720h"),
			TerminationGracePeriod: &metav1.Duration{Duration: 48 * time.Hour},
		},
	}
}

func hashNodePool(t karpv1.NodeClaimTemplate) *karpv1.NodePool {
	np := &karpv1.NodePool{}
	np.Name = "default"
	np.Spec.Template = t
	return np
}

func TestHashVersions(t *testing.T) {
	require.Equal(t, karpv1.NodePoolHashVersion, karpenter.NodePoolHashVersion,
		"Karpenter's NodePoolHashVersion changed: check its hashing and re-pin the golden hashes")
	require.Equal(t, awsv1.EC2NodeClassHashVersion, karpenter.EC2NodeClassHashVersion,
		"the AWS provider's EC2NodeClassHashVersion changed: check its hashing and re-pin the golden hashes")
}

func TestNodePoolHashGolden(t *testing.T) {
	base := func(edit func(*karpv1.NodeClaimTemplate)) *karpv1.NodePool {
		tmpl := karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
		}}
		if edit != nil {
			edit(&tmpl)
		}
		return hashNodePool(tmpl)
	}
	taintA := corev1.Taint{Key: "a", Value: "1", Effect: corev1.TaintEffectNoSchedule}
	taintB := corev1.Taint{Key: "b", Effect: corev1.TaintEffectNoExecute}
	added := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	kolkata := time.FixedZone("IST", 5*3600+30*60)
	odd := time.FixedZone("LMT", -(17*60 + 32)) // -00:17:32, encoded with seconds
	never := karpv1.NillableDuration{}
	zero := time.Duration(0)

	tests := []struct {
		name string
		np   *karpv1.NodePool
		want string
		// sameAs names an earlier case that must hash the same.
		sameAs string
	}{
		{name: "nil NodePool", np: nil, want: "17307646073972311821"},
		{name: "zero template", np: hashNodePool(karpv1.NodeClaimTemplate{}), want: "17307646073972311821"},
		{name: "realistic", np: hashNodePool(hashRealisticTemplate()), want: "1344287676319827751"},
		{name: "only nodeClassRef", np: base(nil), want: "17369979337536258260"},
		{name: "nodeClassRef pointer to zero", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.NodeClassRef = &karpv1.NodeClassReference{} }), want: "13463795802959939202"},
		{name: "nodeClassRef without group", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.NodeClassRef.Group = "" }), want: "5523063386561071344"},
		{name: "labels nil", np: base(func(t *karpv1.NodeClaimTemplate) { t.Labels = nil }), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "labels empty map", np: base(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{} }), want: "12535157163608646278"},
		{name: "annotations empty map", np: base(func(t *karpv1.NodeClaimTemplate) { t.Annotations = map[string]string{} }), want: "10741536972935408428"},
		{name: "labels and annotations empty", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Labels, t.Annotations = map[string]string{}, map[string]string{}
		}), want: "8087874978614261894"},
		{name: "label team=a", np: base(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{"team": "a"} }), want: "13036035519946219474"},
		{name: "label team=b", np: base(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{"team": "b"} }), want: "7845175644005568163"},
		{name: "label with empty value", np: base(func(t *karpv1.NodeClaimTemplate) { t.Labels = map[string]string{"team": ""} }), want: "10236814596228294821"},
		{name: "label team=a as annotation", np: base(func(t *karpv1.NodeClaimTemplate) { t.Annotations = map[string]string{"team": "a"} }), want: "7052468130080622"},
		{name: "unicode", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Labels = map[string]string{"例え": "ünïcødé", "emoji": "🚀✨"}
			t.Annotations = map[string]string{"note": "Ωmega – “quoted”\x00\xff"}
			t.Spec.Taints = []corev1.Taint{{Key: "ключ", Value: "значение", Effect: "NoSchedule"}}
		}), want: "16492455839877382894"},
		{name: "taints nil", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = nil }), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "taints empty", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{} }), want: "12366373110665249880"},
		{name: "taints A B", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{taintA, taintB} }), want: "10947310240920110635"},
		{name: "taints B A", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{taintB, taintA} }), sameAs: "taints A B", want: "10947310240920110635"},
		{name: "taints A A (duplicates cancel)", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{taintA, taintA} }), sameAs: "taints empty", want: "12366373110665249880"},
		{name: "taints A B B", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{taintA, taintB, taintB} }), want: "8564284765131364160"},
		{name: "taints A", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{taintA} }), sameAs: "taints A B B", want: "8564284765131364160"},
		{name: "zero taint", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.Taints = []corev1.Taint{{}} }), want: "11319342167948846546"},
		{name: "taint TimeAdded UTC", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{Time: added}}}
		}), want: "1857647242092175314"},
		{name: "taint TimeAdded same instant in +05:30", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{Time: added.In(kolkata)}}}
		}), want: "8264286534776339540"},
		{name: "taint TimeAdded same instant in a zero-offset zone other than time.UTC", np: base(func(t *karpv1.NodeClaimTemplate) {
			// MarshalBinary writes offset -1 for time.UTC only: a JSON-decoded
			// metav1.Time is in time.Local, so its hash depends on the zone
			// the hashing process runs in, even at offset 0.
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{Time: added.In(time.FixedZone("UTC", 0))}}}
		}), want: "7710254282948192103"},
		{name: "taint TimeAdded zone offset with seconds", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{Time: added.In(odd)}}}
		}), want: "896966712918053212"},
		{name: "taint TimeAdded pointer to zero time", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{}}}
		}), want: "6375336446137003585"},
		{name: "taint TimeAdded zero instant with a location", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Taints = []corev1.Taint{{Key: "a", Value: "1", Effect: "NoSchedule", TimeAdded: &metav1.Time{Time: time.Time{}.In(kolkata)}}}
		}), want: "4407984700074600891"},
		{name: "startupTaints", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.StartupTaints = []corev1.Taint{taintA} }), want: "16097600777539737059"},
		{name: "startupTaints empty", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.StartupTaints = []corev1.Taint{} }), want: "13617515329730646402"},
		{name: "expireAfter 720h", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h") }), want: "6821555240594823858"},
		{name: "expireAfter 720h without Raw", np: base(func(t *karpv1.NodeClaimTemplate) {
			d := 720 * time.Hour
			t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: &d}
		}), sameAs: "expireAfter 720h", want: "6821555240594823858"},
		{name: "expireAfter Never", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never") }), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "expireAfter Never zero value", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = never }), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "expireAfter nil Duration with Raw", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.ExpireAfter = karpv1.NillableDuration{Raw: []byte(`"Never"`)}
		}), want: "9594794698745994005"},
		{name: "expireAfter pointer to zero", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: &zero} }), want: "15640125381500602090"},
		{name: "terminationGracePeriod nil", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.TerminationGracePeriod = nil }), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "terminationGracePeriod 0", np: base(func(t *karpv1.NodeClaimTemplate) { t.Spec.TerminationGracePeriod = &metav1.Duration{} }), want: "17858683486241353230"},
		{name: "terminationGracePeriod 48h", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.TerminationGracePeriod = &metav1.Duration{Duration: 48 * time.Hour}
		}), want: "11236870397947843460"},
		{name: "requirements changed", np: base(func(t *karpv1.NodeClaimTemplate) {
			t.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}
		}), sameAs: "only nodeClassRef", want: "17369979337536258260"},
		{name: "requirements alone make the spec non-zero", np: hashNodePool(karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{},
		}}), want: "7186316952538226297"},
		{name: "realistic requirements changed", np: func() *karpv1.NodePool {
			tmpl := hashRealisticTemplate()
			tmpl.Spec.Requirements = nil
			return hashNodePool(tmpl)
		}(), sameAs: "realistic", want: "1344287676319827751"},
	}
	got := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := karpenter.NodePoolHash(tt.np)
			got[tt.name] = h
			want := tt.np
			if want == nil {
				want = &karpv1.NodePool{}
			}
			require.Equal(t, want.Hash(), h, "Karpenter's np.Hash()")
			if tt.np != nil {
				require.Equal(t, strconv.FormatUint(karpenter.TemplateHash(&tt.np.Spec.Template), 10), h)
			}
			require.Equal(t, tt.want, h, "pinned hash (Karpenter's hashing changed?)")
			if tt.sameAs != "" {
				require.Contains(t, got, tt.sameAs)
				require.Equal(t, got[tt.sameAs], h, "hash of %q", tt.sameAs)
			}
		})
	}
	require.Equal(t, karpenter.TemplateHash(nil), karpenter.TemplateHash(&karpv1.NodeClaimTemplate{}))
}

// TestNodePoolHashFromJSON decodes NodePool manifests (as the API server
// serves them) and checks the hash against Karpenter's and a pinned value.
func TestNodePoolHashFromJSON(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{file: "nodepool-default.json", want: "12363802120598896289"},
		{file: "nodepool-gpu.json", want: "1711734277924256477"},
		{file: "nodepool-never-expire.json", want: "6076209862884846074"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var np karpv1.NodePool
			hashReadJSON(t, tt.file, &np)
			got := karpenter.NodePoolHash(&np)
			require.Equal(t, np.Hash(), got)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestTemplateHashAllocs(t *testing.T) {
	tmpl := hashRealisticTemplate()
	tmpl.Spec.Taints[0].TimeAdded = &metav1.Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))}
	var sink uint64
	allocs := testing.AllocsPerRun(200, func() { sink ^= karpenter.TemplateHash(&tmpl) })
	require.Zero(t, allocs, "TemplateHash allocates")
	_ = sink
}

// TestTemplateHashTimeMarshalError covers the times MarshalBinary cannot
// encode: hashstructure fails there (Karpenter's Hash panics); TemplateHash
// returns a hash instead.
func TestTemplateHashTimeMarshalError(t *testing.T) {
	tmpl := hashRealisticTemplate()
	tmpl.Spec.Taints[0].TimeAdded = &metav1.Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("minus-one-minute", -60))}
	_, err := hashstructure.Hash(tmpl, hashstructure.FormatV2, hashOpts())
	require.Error(t, err, "hashstructure should fail on this zone offset")
	require.Panics(t, func() { _ = hashNodePool(tmpl).Hash() })
	require.NotPanics(t, func() { _ = karpenter.TemplateHash(&tmpl) })

	utc := hashRealisticTemplate()
	utc.Spec.Taints[0].TimeAdded = &metav1.Time{Time: tmpl.Spec.Taints[0].TimeAdded.UTC()}
	require.Equal(t, karpenter.TemplateHash(&utc), karpenter.TemplateHash(&tmpl), "hashed as the UTC instant")
}

func TestNodePoolHashRandom(t *testing.T) {
	seed := hashSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x6b617270656e7465))
	const n = 3000
	for i := range n {
		np := hashNodePool(hashRandTemplate(r))
		got := karpenter.NodePoolHash(np)
		if want := np.Hash(); got != want {
			t.Fatalf("NodePool %d of seed %d: NodePoolHash %s, np.Hash() %s\ntemplate: %#v", i, seed, got, want, np.Spec.Template)
		}
	}
}

// TestTemplateHashConcurrent hashes shared templates from many goroutines;
// under -race it shows that hashing only reads.
func TestTemplateHashConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tmpls := make([]karpv1.NodeClaimTemplate, 32)
	want := make([]uint64, len(tmpls))
	for i := range tmpls {
		tmpls[i] = hashRandTemplate(r)
		want[i] = karpenter.TemplateHash(&tmpls[i])
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range tmpls {
				j := (i + g) % len(tmpls)
				if got := karpenter.TemplateHash(&tmpls[j]); got != want[j] {
					t.Errorf("template %d: %d, want %d", j, got, want[j])
				}
				_ = karpenter.ChangedTemplateFields(&tmpls[j], &tmpls[i])
			}
		})
	}
	wg.Wait()
}

// Random templates. Every field varies, with extra weight on the edges
// hashstructure treats specially: nil against empty, pointers to zero
// values, duplicate taints (which cancel), unusual time zones.

func hashRandString(r *rand.Rand) string {
	switch r.IntN(10) {
	case 0:
		return ""
	case 1:
		return []string{"ünïcødé", "日本語のラベル", "🚀✨", "Ωmega", "\x00", "\xff\xfe", "a\u0301", "κ"}[r.IntN(8)]
	case 2:
		b := make([]rune, 1+r.IntN(12))
		for i := range b {
			b[i] = rune(r.IntN(0x2FFFF))
		}
		return string(b)
	case 3:
		return strings.Repeat("x", 100+r.IntN(400))
	default:
		const chars = "abcdefghijklmnopqrstuvwxyz0123456789-./_"
		b := make([]byte, 1+r.IntN(24))
		for i := range b {
			b[i] = chars[r.IntN(len(chars))]
		}
		return string(b)
	}
}

func hashRandMap(r *rand.Rand) map[string]string {
	switch r.IntN(8) {
	case 0, 1:
		return nil
	case 2:
		return map[string]string{}
	}
	n := 1 + r.IntN(8)
	if r.IntN(10) == 0 {
		n = 50 + r.IntN(200)
	}
	m := make(map[string]string, n)
	for range n {
		m[hashRandString(r)] = hashRandString(r)
	}
	return m
}

var hashRandZones = []*time.Location{
	time.UTC, time.Local, time.FixedZone("UTC", 0), time.FixedZone("IST", 5*3600+30*60),
	time.FixedZone("PST", -8*3600), time.FixedZone("LMT", 17*60+32), time.FixedZone("far", 22*3600),
}

func hashRandTime(r *rand.Rand) *metav1.Time {
	switch r.IntN(7) {
	case 0:
		return nil
	case 1:
		return &metav1.Time{}
	case 2:
		return &metav1.Time{Time: time.Time{}.In(hashRandZones[r.IntN(len(hashRandZones))])}
	case 3:
		return &metav1.Time{Time: time.Now()} // with a monotonic reading
	case 4:
		return &metav1.Time{Time: time.Unix(r.Int64N(4e9)-1e9, r.Int64N(1e9))} // Local
	default:
		return &metav1.Time{Time: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(hashRandZones[r.IntN(len(hashRandZones))])}
	}
}

func hashRandTaints(r *rand.Rand) []corev1.Taint {
	switch r.IntN(6) {
	case 0, 1:
		return nil
	case 2:
		return []corev1.Taint{}
	}
	n := 1 + r.IntN(5)
	if r.IntN(10) == 0 {
		n = 20 + r.IntN(40)
	}
	effects := []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute, "Custom"}
	ts := make([]corev1.Taint, 0, n)
	for range n {
		if len(ts) > 0 && r.IntN(5) == 0 {
			ts = append(ts, ts[r.IntN(len(ts))]) // a duplicate
			continue
		}
		t := corev1.Taint{Effect: effects[r.IntN(len(effects))], TimeAdded: hashRandTime(r)}
		if r.IntN(6) > 0 {
			t.Key = hashRandString(r)
		}
		if r.IntN(2) == 0 {
			t.Value = hashRandString(r)
		}
		ts = append(ts, t)
	}
	r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	return ts
}

func hashRandDuration(r *rand.Rand) time.Duration {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return time.Duration(r.Int64()) // any int64, negative too
	default:
		return time.Duration(r.IntN(1000)) * time.Hour
	}
}

func hashRandTemplate(r *rand.Rand) karpv1.NodeClaimTemplate {
	var t karpv1.NodeClaimTemplate
	t.Labels = hashRandMap(r)
	t.Annotations = hashRandMap(r)
	t.Spec.Taints = hashRandTaints(r)
	t.Spec.StartupTaints = hashRandTaints(r)
	switch r.IntN(4) {
	case 0:
	case 1:
		t.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{}
	default:
		for range 1 + r.IntN(4) {
			t.Spec.Requirements = append(t.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{
				Key: hashRandString(r), Operator: corev1.NodeSelectorOpIn, Values: []string{hashRandString(r)}, MinValues: hashPtr(r.IntN(3)),
			})
		}
	}
	switch r.IntN(5) {
	case 0:
	case 1:
		t.Spec.NodeClassRef = &karpv1.NodeClassReference{}
	default:
		ref := &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: hashRandString(r)}
		if r.IntN(4) == 0 {
			ref.Group, ref.Kind = hashRandString(r), hashRandString(r)
		}
		t.Spec.NodeClassRef = ref
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		t.Spec.TerminationGracePeriod = &metav1.Duration{}
	default:
		t.Spec.TerminationGracePeriod = &metav1.Duration{Duration: hashRandDuration(r)}
	}
	switch r.IntN(7) {
	case 0: // Never, the zero value
	case 1:
		t.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never")
	case 2:
		t.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h")
	case 3:
		t.Spec.ExpireAfter = karpv1.NillableDuration{Raw: []byte(`"Never"`)}
	case 4:
		t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: hashPtr(time.Duration(0))}
	default:
		t.Spec.ExpireAfter = karpv1.NillableDuration{Duration: hashPtr(hashRandDuration(r))}
	}
	return t
}

// The guard against Karpenter adding, removing, renaming, retyping or
// re-tagging hashed fields: the walker is written for exactly these fields,
// in this order (the order matters: fields are folded in sequence).

// hashFieldList lists, depth first, every field of typ and of the structs
// it reaches through hashed fields, as "Path Type tag". hashstructure skips
// unexported and hash:"ignore" fields, but reflect-zero checks still see
// them (an ignored field can make a struct non-zero), so they are listed
// too, marked and not descended into.
func hashFieldList(typ reflect.Type) []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			line := fmt.Sprintf("%s%s.%s %s", prefix, t.Name(), f.Name, f.Type)
			tag := f.Tag.Get("hash")
			switch {
			case !f.IsExported():
				out = append(out, line+" unexported")
				continue
			case tag == "ignore" || tag == "-":
				out = append(out, line+` hash:"ignore"`)
				continue
			case tag != "":
				out = append(out, line+` hash:"`+tag+`"`)
				continue // string: hashed as its String()
			}
			out = append(out, line)
			walk(prefix+"  ", f.Type)
		}
	}
	walk("", typ)
	return out
}

func TestHashedFieldsPinned(t *testing.T) {
	want := []string{
		"NodeClaimTemplate.ObjectMeta v1.ObjectMeta",
		"  ObjectMeta.Labels map[string]string",
		"  ObjectMeta.Annotations map[string]string",
		"NodeClaimTemplate.Spec v1.NodeClaimTemplateSpec",
		"  NodeClaimTemplateSpec.Taints []v1.Taint",
		"    Taint.Key string",
		"    Taint.Value string",
		"    Taint.Effect v1.TaintEffect",
		"    Taint.TimeAdded *v1.Time",
		"      Time.Time time.Time",
		"  NodeClaimTemplateSpec.StartupTaints []v1.Taint",
		"    Taint.Key string",
		"    Taint.Value string",
		"    Taint.Effect v1.TaintEffect",
		"    Taint.TimeAdded *v1.Time",
		"      Time.Time time.Time",
		`  NodeClaimTemplateSpec.Requirements []v1.NodeSelectorRequirementWithMinValues hash:"ignore"`,
		"  NodeClaimTemplateSpec.NodeClassRef *v1.NodeClassReference",
		"    NodeClassReference.Kind string",
		"    NodeClassReference.Name string",
		"    NodeClassReference.Group string",
		"  NodeClaimTemplateSpec.TerminationGracePeriod *v1.Duration",
		"    Duration.Duration time.Duration",
		"  NodeClaimTemplateSpec.ExpireAfter v1.NillableDuration",
		"    NillableDuration.Duration *time.Duration",
		`    NillableDuration.Raw []uint8 hash:"ignore"`,
	}
	require.Empty(t, cmp.Diff(want, hashFieldList(reflect.TypeFor[karpv1.NodeClaimTemplate]())),
		"the fields Karpenter hashes for a NodePool changed (-pinned +now): update TemplateHash, ChangedTemplateFields and this list")
}

// hashInterfacesImplemented lists the types reachable from typ that
// implement one of hashstructure's hooks (Hashable, Includable,
// IncludableMap), which the walker does not reproduce.
func hashInterfacesImplemented(typ reflect.Type) []string {
	hooks := []reflect.Type{
		reflect.TypeFor[hashstructure.Hashable](),
		reflect.TypeFor[hashstructure.Includable](),
		reflect.TypeFor[hashstructure.IncludableMap](),
	}
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if seen[t] || t.Kind() != reflect.Struct {
			return
		}
		seen[t] = true
		for _, h := range hooks {
			if t.Implements(h) || reflect.PointerTo(t).Implements(h) {
				out = append(out, t.String()+" implements "+h.String())
			}
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && f.Tag.Get("hash") != "ignore" && f.Tag.Get("hash") != "-" {
				walk(f.Type)
			}
		}
	}
	walk(typ)
	return out
}

func TestNoHashstructureHooks(t *testing.T) {
	require.Empty(t, hashInterfacesImplemented(reflect.TypeFor[karpv1.NodeClaimTemplate]()))
	require.Empty(t, hashInterfacesImplemented(reflect.TypeFor[awsv1.EC2NodeClassSpec]()))
}

// hashLeafSetters returns, for every hashed leaf reachable from typ, a
// function that sets that leaf (and the pointers, one-element slices and
// one-entry maps on the way to it) in an addressable value of type typ.
// It is driven by reflection, so a field Karpenter adds gets a setter too,
// and the differential tests then see a hash the walker does not produce.
func hashLeafSetters(typ reflect.Type) map[string]func(reflect.Value) {
	out := map[string]func(reflect.Value){}
	switch {
	case typ == reflect.TypeFor[time.Time]():
		out[""] = func(v reflect.Value) { v.Set(reflect.ValueOf(time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC))) }
		return out
	case typ == reflect.TypeFor[resource.Quantity]():
		out[""] = func(v reflect.Value) { v.Set(reflect.ValueOf(resource.MustParse("20Gi"))) }
		return out
	}
	switch typ.Kind() {
	case reflect.Pointer:
		for p, set := range hashLeafSetters(typ.Elem()) {
			out[p] = func(v reflect.Value) {
				if v.IsNil() {
					v.Set(reflect.New(typ.Elem()))
				}
				set(v.Elem())
			}
		}
	case reflect.Slice:
		for p, set := range hashLeafSetters(typ.Elem()) {
			out["[0]"+p] = func(v reflect.Value) {
				if v.Len() == 0 {
					v.Set(reflect.MakeSlice(typ, 1, 1))
				}
				set(v.Index(0))
			}
		}
	case reflect.Map:
		for p, set := range hashLeafSetters(typ.Elem()) {
			out["[k]"+p] = func(v reflect.Value) {
				if v.IsNil() {
					v.Set(reflect.MakeMap(typ))
				}
				key := reflect.ValueOf("k").Convert(typ.Key())
				tmp := reflect.New(typ.Elem()).Elem() // map values are not addressable
				if cur := v.MapIndex(key); cur.IsValid() {
					tmp.Set(cur)
				}
				set(tmp)
				v.SetMapIndex(key, tmp)
			}
		}
	case reflect.Struct:
		for i := range typ.NumField() {
			f := typ.Field(i)
			if tag := f.Tag.Get("hash"); !f.IsExported() || tag == "ignore" || tag == "-" {
				continue
			}
			for p, set := range hashLeafSetters(f.Type) {
				out["."+f.Name+p] = func(v reflect.Value) { set(v.Field(i)) }
			}
		}
	case reflect.String:
		out[""] = func(v reflect.Value) { v.SetString("x") }
	case reflect.Bool:
		out[""] = func(v reflect.Value) { v.SetBool(true) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		out[""] = func(v reflect.Value) { v.SetInt(7) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		out[""] = func(v reflect.Value) { v.SetUint(7) }
	default:
		out[" (unsupported kind "+typ.Kind().String()+")"] = func(reflect.Value) {}
	}
	return out
}

// TestTemplateHashEveryLeaf sets each hashed leaf of a zero template, one
// at a time and all together, and compares with Karpenter's Hash: a field
// Karpenter adds makes this fail even before the pinned list is updated.
func TestTemplateHashEveryLeaf(t *testing.T) {
	setters := hashLeafSetters(reflect.TypeFor[karpv1.NodeClaimTemplate]())
	require.GreaterOrEqual(t, len(setters), 14)
	all := hashNodePool(karpv1.NodeClaimTemplate{})
	seen := map[string]string{}
	for path, set := range setters {
		np := hashNodePool(karpv1.NodeClaimTemplate{})
		set(reflect.ValueOf(&np.Spec.Template).Elem())
		set(reflect.ValueOf(&all.Spec.Template).Elem())
		got := karpenter.NodePoolHash(np)
		require.Equal(t, np.Hash(), got, "leaf %s", path)
		require.NotContains(t, seen, got, "leaf %s hashes like another leaf", path)
		seen[got] = path
	}
	require.Equal(t, all.Hash(), karpenter.NodePoolHash(all), "all leaves set")
}
