package drift_test

import (
	"encoding/json"
	"hash/fnv"
	"testing"

	"github.com/mitchellh/hashstructure/v2"

	"github.com/upgradekit/upgradekit/drift"
)

// karpenterOptions are the hashstructure options Karpenter's NodePool.Hash
// uses (sigs.k8s.io/karpenter pkg/apis/v1/nodepool.go).
var karpenterOptions = &hashstructure.HashOptions{
	SlicesAsSets:    true,
	IgnoreZeroValue: true,
	ZeroNil:         true,
}

// BenchmarkHash compares, on the same realistic objects, this package's
// hasher ("upgradekit") with hashstructure/v2 under Karpenter's options
// ("hashstructure") and with json.Marshal + FNV-1a 64 ("json-fnv").
func BenchmarkHash(b *testing.B) {
	objects := []struct {
		name string
		v    any
	}{
		{"nodepool-template", nodePoolTemplate()},
		{"machine", capiMachine()},
		{"kubeadmconfig", kubeadmConfig()},
		{"machine+kubeadmconfig", capiPair()},
	}
	h, err := drift.NewHasher("v1", drift.SlicesAsSets())
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range objects {
		b.Run(o.name+"/upgradekit", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Hash(o.v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(o.name+"/hashstructure", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := hashstructure.Hash(o.v, hashstructure.FormatV2, karpenterOptions); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(o.name+"/json-fnv", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := json.Marshal(o.v)
				if err != nil {
					b.Fatal(err)
				}
				f := fnv.New64a()
				_, _ = f.Write(data)
				_ = f.Sum64()
			}
		})
	}
}

// BenchmarkFingerprint measures hashing with field fingerprints (what
// stamping does, once per spec change).
func BenchmarkFingerprint(b *testing.B) {
	h, err := drift.NewHasher("v1")
	if err != nil {
		b.Fatal(err)
	}
	v := capiPair()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := h.Fingerprint(v, 0); err != nil {
			b.Fatal(err)
		}
	}
}
