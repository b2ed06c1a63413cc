package drift_test

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/drift"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json (only together with an EncodingVersion bump)")

type goldenVector struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hash    string `json:"hash"`
	Fields  string `json:"fields,omitempty"`
}

type goldenFixture struct {
	name string
	opts []drift.Option
	spec func() any
}

func goldenFixtures() []goldenFixture {
	ts := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return []goldenFixture{
		{"empty", nil, func() any { return nil }},
		{"nodepool-template", nil, func() any { return nodePoolTemplate() }},
		{"nodepool-template/slices-as-sets", []drift.Option{drift.SlicesAsSets()}, func() any { return nodePoolTemplate() }},
		{"nodepool-spec/ignore-annotations", []drift.Option{drift.IgnorePaths("template.metadata.annotations")}, func() any { return nodePoolSpec() }},
		{"machine", nil, func() any { return capiMachine() }},
		{"kubeadmconfig", nil, func() any { return kubeadmConfig() }},
		{"machine+kubeadmconfig", nil, func() any { return capiPair() }},
		{"kubeadmconfig/keep-zero", []drift.Option{drift.KeepZeroValues()}, func() any { return kubeadmConfig() }},
		{"labels/keep-zero-entries", []drift.Option{drift.KeepZeroEntries("labels")}, func() any {
			return map[string]any{"labels": map[string]any{"node-role.kubernetes.io/worker": "", "team": "a"}}
		}},
		{"unstructured/scalars", nil, func() any {
			return map[string]any{
				"s": "text", "t": true, "i": int64(-42), "big": int64(math.MaxInt64), "f": 2.5, "fi": 3.0,
				"n": nil, "l": []any{"a", 1.0, nil, map[string]any{"k": "v"}}, "nested": map[string]any{"x": map[string]any{"y": "z"}},
			}
		}},
		{"special-types", nil, func() any {
			return &struct {
				Q  resource.Quantity   `json:"q"`
				T  metav1.Time         `json:"t"`
				D  *metav1.Duration    `json:"d"`
				IS intstr.IntOrString  `json:"is"`
				II *intstr.IntOrString `json:"ii"`
				B  []byte              `json:"b"`
			}{resource.MustParse("1500Mi"), metav1.NewTime(ts), &metav1.Duration{Duration: 90 * time.Second},
				intstr.FromString("25%"), ptrTo(intstr.FromInt32(1)), []byte{0, 1, 2, 255}}
		}},
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestGoldenVectors pins the canonical encoding: if any hash or
// fingerprint changes while EncodingVersion stays the same, a fleet stamped
// by an older build would drift after an upgrade. Change EncodingVersion
// and run `go test ./drift -run TestGoldenVectors -update` instead.
func TestGoldenVectors(t *testing.T) {
	path := filepath.Join("testdata", "golden.json")
	var got []goldenVector
	for _, f := range goldenFixtures() {
		h, err := drift.NewHasher("golden", f.opts...)
		require.NoError(t, err)
		s, err := drift.NewStamper(prefix, h)
		require.NoError(t, err)
		st, err := s.Compute(f.spec())
		require.NoError(t, err, f.name)
		v := goldenVector{Name: f.name, Version: st.Hash.Version, Hash: st.Hash.String()}
		if st.Fields.Len() > 0 {
			v.Fields = st.Fields.String()
		}
		got = append(got, v)
	}
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
		t.Logf("wrote %s", path)
		return
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var want []goldenVector
	require.NoError(t, json.Unmarshal(b, &want))
	require.NotEmpty(t, want)
	if want[0].Version != got[0].Version {
		t.Fatalf("golden vectors are for version %s, this build hashes as %s: run with -update after reviewing the bump",
			want[0].Version, got[0].Version)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("hash values changed without an EncodingVersion bump (this would drift every stamped object) (-golden +now):\n%s", d)
	}
}
