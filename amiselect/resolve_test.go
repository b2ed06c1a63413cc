package amiselect

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

const selfAccount = "111122223333"

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func day(n int) time.Time { return t0.AddDate(0, 0, n) }

func img(id, name string, created time.Time, mods ...func(*Image)) Image {
	i := Image{ID: id, Name: name, OwnerID: selfAccount, Architecture: EC2ArchX86, State: StateAvailable, CreationDate: created}
	for _, m := range mods {
		m(&i)
	}
	return i
}

func arm(i *Image)                   { i.Architecture = EC2ArchARM64 }
func tags(kv ...string) func(*Image) { return func(i *Image) { i.Tags = pairs(kv...) } }
func owner(id, alias string) func(*Image) {
	return func(i *Image) { i.OwnerID, i.OwnerAlias = id, alias }
}
func deprecatedAt(t time.Time) func(*Image) { return func(i *Image) { i.DeprecationTime = t } }
func state(s string) func(*Image)           { return func(i *Image) { i.State = s } }
func architecture(a string) func(*Image)    { return func(i *Image) { i.Architecture = a } }
func pairs(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func newTestCatalog(t testing.TB, images ...Image) *Catalog {
	t.Helper()
	c, err := NewCatalog(images, WithAccountID(selfAccount), WithClock(clocktesting.NewFakePassiveClock(day(30))))
	require.NoError(t, err)
	return c
}

func resolveAt(t *testing.T, src ImageSource, terms []Term, opts ...Option) (*Resolution, error) {
	t.Helper()
	opts = append([]Option{WithClock(clocktesting.NewFakePassiveClock(day(30))), WithKubernetesVersion("1.31")}, opts...)
	return Resolve(context.Background(), src, terms, opts...)
}

func ids(r *Resolution) []string {
	var out []string
	for _, s := range r.Images {
		out = append(out, s.ID)
	}
	return out
}

// recorder is an ImageSource that records the queries it is asked.
type recorder struct {
	ImageSource
	mu      sync.Mutex
	queries []Query
	params  []string
}

func (r *recorder) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	r.mu.Lock()
	r.queries = append(r.queries, q)
	r.mu.Unlock()
	return r.ImageSource.DescribeImages(ctx, q)
}

func (r *recorder) GetParameter(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	r.params = append(r.params, name)
	r.mu.Unlock()
	return r.ImageSource.GetParameter(ctx, name)
}

func TestResolveTermsOrFieldsAnd(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "app-a", day(1), tags("team", "a", "env", "prod")),
		img("ami-2", "app-b", day(2), arm, tags("team", "b", "env", "prod")),
		img("ami-3", "app-c", day(3), tags("team", "a", "env", "dev")),
	)
	// One term, two tags: AND -> only ami-1 has both.
	res, err := resolveAt(t, c, []Term{{Tags: map[string]string{"team": "a", "env": "prod"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
	// Two terms: OR -> amd64 gets the newest of ami-1/ami-3, arm64 gets ami-2.
	res, err = resolveAt(t, c, []Term{{Tags: map[string]string{"team": "a"}}, {Tags: map[string]string{"team": "b"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-3", "ami-2"}, ids(res))
	require.Equal(t, []int{0}, res.Images[0].Terms)
	require.Equal(t, []int{1}, res.Images[1].Terms)
}

func TestResolveNameWildcard(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "eks-node-1.31-v20250101", day(1)),
		img("ami-2", "eks-node-1.31-v20250201", day(2)),
		img("ami-3", "eks-node-1.30-v20250301", day(3)),
		img("ami-4", "other-1.31", day(4)),
	)
	res, err := resolveAt(t, c, []Term{{Name: "eks-node-1.31-*"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-2"}, ids(res))
	// An exact name matches only itself.
	res, err = resolveAt(t, c, []Term{{Name: "eks-node-1.31-v20250101"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
}

func TestResolveTagWildcardMeansKeyExists(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "a", day(1), tags("approved", "yes")),
		img("ami-2", "b", day(2), tags("approved", "")),
		img("ami-3", "c", day(3), tags("other", "x")),
	)
	rec := &recorder{ImageSource: c}
	res, err := resolveAt(t, rec, []Term{{Tags: map[string]string{"approved": "*"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-2"}, ids(res)) // newest image that has the key, whatever its value
	require.Equal(t, []Filter{{Name: "tag-key", Values: []string{"approved"}}, {Name: "state", Values: []string{"available"}}}, rec.queries[0].Filters)
}

func TestResolveOwnerDefaultsOnlyWithName(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "shared-app", day(5), owner("999988887777", ""), tags("app", "x")),
		img("ami-2", "shared-app", day(1), tags("app", "x")),
		img("ami-3", "shared-app", day(2), owner("137112412989", "amazon")),
	)
	rec := &recorder{ImageSource: c}
	// name without owner: self and amazon only, so the newer third-party image is not picked up.
	res, err := resolveAt(t, rec, []Term{{Name: "shared-*"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-3"}, ids(res))
	require.Equal(t, []string{"self", "amazon"}, rec.queries[0].Owners)
	// tags without owner: no owner restriction at all.
	rec.queries = nil
	res, err = resolveAt(t, rec, []Term{{Tags: map[string]string{"app": "x"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
	require.Empty(t, rec.queries[0].Owners)
	// name with an explicit owner: that owner only.
	rec.queries = nil
	res, err = resolveAt(t, rec, []Term{{Name: "shared-*", Owner: "999988887777"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
	require.Equal(t, []string{"999988887777"}, rec.queries[0].Owners)
}

func TestResolveIDAndSSMMergedIntoOneQuery(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "a", day(1)),
		img("ami-2", "b", day(2), arm),
	)
	c.SetParameter("/my/app/ami", "ami-2")
	rec := &recorder{ImageSource: c}
	res, err := resolveAt(t, rec, []Term{{ID: "ami-1"}, {SSMParameter: "/my/app/ami"}, {ID: "ami-2"}})
	require.NoError(t, err)
	require.Len(t, rec.queries, 1, "id and ssmParameter values must go into one DescribeImages call")
	require.Equal(t, []Filter{{Name: "image-id", Values: []string{"ami-1", "ami-2"}}, {Name: "state", Values: []string{"available"}}}, rec.queries[0].Filters)
	require.True(t, rec.queries[0].IncludeDeprecated)
	require.Equal(t, []string{"ami-2", "ami-1"}, ids(res))
	require.Equal(t, []int{1, 2}, res.Images[0].Terms, "ami-2 came from the parameter and the id term")
}

func TestResolveSSMSkips(t *testing.T) {
	c := newTestCatalog(t, img("ami-1", "a", day(1)))
	c.SetParameter("/bad/value", "not-an-image")
	res, err := resolveAt(t, c, []Term{{SSMParameter: "/missing"}, {SSMParameter: "/bad/value"}, {ID: "ami-1"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
	want := []Skip{
		{Term: 0, Parameter: "/missing", Reason: reasonParamNotFound},
		{Term: 1, Parameter: "/bad/value", Reason: reasonParamNotAMI + `: "not-an-image"`},
	}
	if d := cmp.Diff(want, res.Skipped); d != "" {
		t.Fatalf("skipped (-want +got):\n%s", d)
	}
}

func TestResolveSSMOtherErrorFails(t *testing.T) {
	throttled := errors.New("ThrottlingException: Rate exceeded")
	src := SourceFuncs{Parameter: func(context.Context, string) (string, error) { return "", throttled }}
	_, err := resolveAt(t, src, []Term{{SSMParameter: "/p"}})
	require.ErrorIs(t, err, throttled)
	require.Contains(t, err.Error(), "amiSelectorTerms[0]")
	// Also for aliases, unlike Karpenter: a throttled parameter must not look like a missing release.
	_, err = resolveAt(t, src, []Term{{Alias: "al2023@latest"}})
	require.ErrorIs(t, err, throttled)
}

func TestResolveOnlyAvailableImages(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "app", day(1)),
		img("ami-2", "app", day(5), state("pending")),
		img("ami-3", "app", day(6), state("failed")),
	)
	res, err := resolveAt(t, c, []Term{{Name: "app"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
	// A source that ignores the state filter is still held to it.
	src := SourceFuncs{Describe: func(context.Context, Query) ([]Image, error) {
		return []Image{img("ami-2", "app", day(5), state("pending")), img("ami-1", "app", day(1))}, nil
	}}
	res, err = resolveAt(t, src, []Term{{Name: "app"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-1"}, ids(res))
}

func TestResolveDeprecatedLoseTies(t *testing.T) {
	now := day(30)
	tests := []struct {
		name   string
		images []Image
		want   string
		dep    bool
	}{
		{"older non-deprecated beats newer deprecated", []Image{
			img("ami-new", "app", day(10), deprecatedAt(now.Add(-time.Hour))),
			img("ami-old", "app", day(1)),
		}, "ami-old", false},
		{"future deprecation time is not deprecated", []Image{
			img("ami-new", "app", day(10), deprecatedAt(now.Add(time.Hour))),
			img("ami-old", "app", day(1)),
		}, "ami-new", false},
		{"deprecation exactly now counts", []Image{
			img("ami-new", "app", day(10), deprecatedAt(now)),
			img("ami-old", "app", day(1)),
		}, "ami-old", false},
		{"both deprecated: newer wins", []Image{
			img("ami-old", "app", day(1), deprecatedAt(now.Add(-time.Hour))),
			img("ami-new", "app", day(10), deprecatedAt(now.Add(-time.Hour))),
		}, "ami-new", true},
		{"only deprecated is kept", []Image{
			img("ami-old", "app", day(1), deprecatedAt(now.Add(-time.Hour))),
		}, "ami-old", true},
		{"same creation date: greater name wins", []Image{
			img("ami-1", "app-v1", day(3)),
			img("ami-2", "app-v2", day(3)),
		}, "ami-2", false},
		{"same date and name: smaller id wins, whatever the order", []Image{
			img("ami-b", "app", day(3)),
			img("ami-a", "app", day(3)),
		}, "ami-a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := resolveAt(t, newTestCatalog(t, tt.images...), []Term{{Name: "app*"}})
			require.NoError(t, err)
			require.Equal(t, []string{tt.want}, ids(res))
			require.Equal(t, tt.dep, res.Images[0].Deprecated)
		})
	}
}

func TestResolveOnePerRequirementSetAndOrder(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-x1", "app-x86-1", day(1)),
		img("ami-x2", "app-x86-2", day(2)),
		img("ami-a1", "app-arm-1", day(3), arm),
		img("ami-a0", "app-arm-0", day(2), arm),
		img("ami-i", "app-i386", day(9), architecture("i386")),
	)
	res, err := resolveAt(t, c, []Term{{Name: "app-*"}})
	require.NoError(t, err)
	want := []Selected{
		{ID: "ami-a1", Name: "app-arm-1", OwnerID: selfAccount, CreationDate: day(3), Requirements: Requirements{Architecture: ArchARM64}, Terms: []int{0}},
		{ID: "ami-x2", Name: "app-x86-2", OwnerID: selfAccount, CreationDate: day(2), Requirements: Requirements{Architecture: ArchAMD64}, Terms: []int{0}},
	}
	if d := cmp.Diff(want, res.Images); d != "" {
		t.Fatalf("images (-want +got):\n%s", d)
	}
	require.Equal(t, []Skip{{Term: 0, Images: []string{"ami-i"}, Count: 1, Reason: reasonArchitecture}}, res.Skipped)

	// Equal creation dates order by id ascending.
	c = newTestCatalog(t, img("ami-b", "x", day(1)), img("ami-a", "y", day(1), arm))
	res, err = resolveAt(t, c, []Term{{ID: "ami-b"}, {ID: "ami-a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"ami-a", "ami-b"}, ids(res))
}

// aliasCatalog holds an AL2023 release for Kubernetes 1.31: x86 standard,
// nvidia and neuron, arm64 standard and nvidia.
func aliasCatalog(t testing.TB) *Catalog {
	c := newTestCatalog(t,
		img("ami-std", "al2023-std", day(10), owner("602401143452", "amazon")),
		img("ami-nv", "al2023-nvidia", day(10), owner("602401143452", "amazon")),
		img("ami-neu", "al2023-neuron", day(10), owner("602401143452", "amazon")),
		img("ami-astd", "al2023-arm", day(10), arm, owner("602401143452", "amazon")),
		img("ami-anv", "al2023-arm-nvidia", day(10), arm, owner("602401143452", "amazon")),
		img("ami-br", "bottlerocket", day(11), owner("602401143452", "amazon")),
		img("ami-brnv", "bottlerocket-nvidia", day(11), owner("602401143452", "amazon")),
		img("ami-win", "windows-2022", day(12), owner("801119661308", "amazon")),
	)
	base := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/"
	c.SetParameter(base+"x86_64/standard/recommended/image_id", "ami-std")
	c.SetParameter(base+"x86_64/nvidia/recommended/image_id", "ami-nv")
	c.SetParameter(base+"x86_64/neuron/recommended/image_id", "ami-neu")
	c.SetParameter(base+"arm64/standard/recommended/image_id", "ami-astd")
	c.SetParameter(base+"arm64/nvidia/recommended/image_id", "ami-anv")
	c.SetParameter("/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id", "ami-br")
	c.SetParameter("/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id", "ami-brnv")
	c.SetParameter("/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id", "ami-win")
	return c
}

func TestResolveAlias(t *testing.T) {
	res, err := resolveAt(t, aliasCatalog(t), []Term{{Alias: "al2023@latest"}})
	require.NoError(t, err)
	require.Equal(t, "1.31", res.KubernetesVersion)
	got := map[Requirements]string{}
	for _, s := range res.Images {
		got[s.Requirements] = s.ID
	}
	want := map[Requirements]string{
		{Architecture: ArchAMD64, Variant: VariantStandard}: "ami-std",
		{Architecture: ArchAMD64, Variant: VariantNvidia}:   "ami-nv",
		{Architecture: ArchAMD64, Variant: VariantNeuron}:   "ami-neu",
		{Architecture: ArchARM64, Variant: VariantStandard}: "ami-astd",
		{Architecture: ArchARM64, Variant: VariantNvidia}:   "ami-anv",
	}
	require.Equal(t, want, got)

	// Bottlerocket: parameters that do not exist are skipped and recorded;
	// the x86_64 image serves both standard and neuron.
	res, err = resolveAt(t, aliasCatalog(t), []Term{{Alias: "bottlerocket@latest"}})
	require.NoError(t, err)
	got = map[Requirements]string{}
	for _, s := range res.Images {
		got[s.Requirements] = s.ID
	}
	require.Equal(t, map[Requirements]string{
		{Architecture: ArchAMD64, Variant: VariantStandard}: "ami-br",
		{Architecture: ArchAMD64, Variant: VariantNeuron}:   "ami-br",
		{Architecture: ArchAMD64, Variant: VariantNvidia}:   "ami-brnv",
	}, got)
	require.Equal(t, []Skip{
		{Term: 0, Parameter: "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id", Reason: reasonParamNotFound},
		{Term: 0, Parameter: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/latest/image_id", Reason: reasonParamNotFound},
	}, res.Skipped)

	// Windows carries its build.
	res, err = resolveAt(t, aliasCatalog(t), []Term{{Alias: "windows2022@latest"}})
	require.NoError(t, err)
	require.Equal(t, []Selected{{ID: "ami-win", Name: "windows-2022", OwnerID: "801119661308", CreationDate: day(12),
		Requirements: Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022}, Terms: []int{0}}}, res.Images)
}

func TestResolveAliasErrors(t *testing.T) {
	c := aliasCatalog(t)
	_, err := Resolve(context.Background(), c, []Term{{Alias: "al2023@latest"}})
	require.ErrorIs(t, err, ErrInvalidKubernetesVersion)
	require.Contains(t, err.Error(), "WithKubernetesVersion")

	_, err = resolveAt(t, c, []Term{{Alias: "al2@latest"}}, WithKubernetesVersion("1.33"))
	require.ErrorIs(t, err, ErrUnsupported)
	var e *Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, "amiSelectorTerms[0].alias", e.Path)

	_, err = resolveAt(t, c, []Term{{Alias: "windows2025@latest"}}, WithKubernetesVersion("1.34"))
	require.ErrorIs(t, err, ErrUnsupported)

	_, err = resolveAt(t, c, []Term{{Alias: "al2023@latest"}}, WithFamily(FamilyBottlerocket))
	require.ErrorIs(t, err, ErrInvalidFamily)

	// No parameter exists for the pinned version: a typed no-images error
	// that lists every parameter it tried.
	_, err = resolveAt(t, c, []Term{{Alias: "al2023@v20200101"}})
	require.ErrorIs(t, err, ErrNoImages)
	var ni *NoImagesError
	require.True(t, errors.As(err, &ni))
	require.Len(t, ni.Unmatched, 5)
	require.Contains(t, err.Error(), "amazon-eks-node-al2023-x86_64-standard-1.31-v20200101")
}

func TestResolveNoImagesSaysWhichTerms(t *testing.T) {
	c := newTestCatalog(t, img("ami-1", "app", day(29)))
	_, err := resolveAt(t, c, []Term{{Name: "nothing-*"}, {Tags: map[string]string{"a": "b"}}, {Name: "app"}}, WithMinAge(72*time.Hour))
	require.ErrorIs(t, err, ErrNoImages)
	var ni *NoImagesError
	require.True(t, errors.As(err, &ni))
	require.Equal(t, []Skip{
		{Term: 0, Reason: reasonNoMatch},
		{Term: 1, Reason: reasonNoMatch},
		{Term: 2, Images: []string{"ami-1"}, Count: 1, Reason: "image created less than 72h0m0s ago (minimum age)"},
	}, ni.Unmatched)
	require.Contains(t, err.Error(), "amiSelectorTerms[0]: matched no image")

	// Terms that matched nothing are recorded even when others matched.
	res, err := resolveAt(t, c, []Term{{Name: "nothing-*"}, {Name: "app"}})
	require.NoError(t, err)
	require.Equal(t, []Skip{{Term: 0, Reason: reasonNoMatch}}, res.Skipped)
}

func TestResolveBadInput(t *testing.T) {
	c := newTestCatalog(t, img("ami-1", "app", day(1)))
	_, err := resolveAt(t, c, []Term{{ID: "ami-1", Name: "x"}})
	require.ErrorIs(t, err, ErrInvalidTerm)
	_, err = Resolve(context.Background(), nil, []Term{{ID: "ami-1"}})
	require.ErrorIs(t, err, ErrInvalidSource)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "src", e.Path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Resolve(ctx, c, []Term{{ID: "ami-1"}})
	require.ErrorIs(t, err, context.Canceled)
	// A source error on a name/tags term names the term.
	boom := errors.New("boom")
	_, err = resolveAt(t, SourceFuncs{Describe: func(context.Context, Query) ([]Image, error) { return nil, boom }}, []Term{{Name: "x"}})
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), "amiSelectorTerms[0]")
}

func TestImageFor(t *testing.T) {
	res, err := resolveAt(t, aliasCatalog(t), []Term{{Alias: "al2023@latest"}})
	require.NoError(t, err)
	for node, want := range map[Requirements]string{
		{Architecture: ArchAMD64}:                         "ami-std",
		{Architecture: ArchAMD64, Variant: VariantNvidia}: "ami-nv",
		{Architecture: ArchAMD64, Variant: VariantNeuron}: "ami-neu",
		{Architecture: ArchARM64}:                         "ami-astd",
		{Architecture: ArchARM64, Variant: VariantNvidia}: "ami-anv",
	} {
		got, ok := res.ImageFor(node)
		require.True(t, ok, node.String())
		require.Equal(t, want, got.ID, node.String())
	}
	_, ok := res.ImageFor(Requirements{Architecture: ArchARM64, Variant: VariantNeuron})
	require.False(t, ok, "AL2023 has no arm64 neuron image")
	_, ok = res.ImageFor(Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022})
	require.True(t, ok, "Linux images carry no OS requirement, as in Karpenter")

	// A custom image with no variant serves GPU nodes too; the newest fitting image wins.
	c := newTestCatalog(t, img("ami-old", "a", day(1)), img("ami-new", "b", day(2)))
	res, err = resolveAt(t, c, []Term{{ID: "ami-old"}, {ID: "ami-new"}})
	require.NoError(t, err)
	got, ok := res.ImageFor(Requirements{Architecture: ArchAMD64, Variant: VariantNvidia})
	require.True(t, ok)
	require.Equal(t, "ami-new", got.ID)
	var nilRes *Resolution
	_, ok = nilRes.ImageFor(Requirements{Architecture: ArchAMD64})
	require.False(t, ok)
}

func TestIsDrifted(t *testing.T) {
	res, err := resolveAt(t, aliasCatalog(t), []Term{{Alias: "al2023@latest"}})
	require.NoError(t, err)
	tests := []struct {
		name    string
		image   string
		node    Requirements
		drifted bool
		reason  string
	}{
		{"current image", "ami-std", Requirements{Architecture: ArchAMD64}, false, "node runs ami-std"},
		{"older image", "ami-old", Requirements{Architecture: ArchAMD64}, true, "AMIDrift: node runs ami-old, a new amd64 node gets ami-std"},
		{"image of another variant", "ami-std", Requirements{Architecture: ArchAMD64, Variant: VariantNvidia}, true, "gets ami-nv"},
		// Missing data is never drift: Karpenter treats "no image for
		// these requirements" as an error.
		{"no image fits", "ami-x", Requirements{Architecture: ArchARM64, Variant: VariantNeuron}, false, "cannot decide: no image resolved for arm64/neuron (node runs ami-x)"},
		{"unknown node image", "", Requirements{Architecture: ArchAMD64}, false, "cannot decide: node image id is unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drifted, reason := res.IsDrifted(tt.image, tt.node)
			require.Equal(t, tt.drifted, drifted)
			require.Contains(t, reason, tt.reason)
		})
	}
	t.Run("nil resolution", func(t *testing.T) {
		var nilRes *Resolution
		drifted, reason := nilRes.IsDrifted("ami-std", Requirements{Architecture: ArchAMD64})
		require.False(t, drifted)
		require.Equal(t, "cannot decide: no resolution (nil *Resolution)", reason)
	})
}

func TestResolveIsDeterministic(t *testing.T) {
	images := []Image{
		img("ami-1", "app", day(1)), img("ami-2", "app", day(1)), img("ami-3", "app", day(1), arm),
		img("ami-4", "app", day(1), arm), img("ami-5", "app", day(1)),
	}
	var first []string
	for i := 0; i < 20; i++ {
		shuffled := append([]Image(nil), images...)
		sort.Slice(shuffled, func(a, b int) bool { return (a*7+i)%5 < (b*7+i)%5 })
		res, err := resolveAt(t, newTestCatalog(t, shuffled...), []Term{{Name: "app"}})
		require.NoError(t, err)
		if first == nil {
			first = ids(res)
		}
		require.Equal(t, first, ids(res))
	}
	require.Equal(t, []string{"ami-1", "ami-3"}, first)
}
