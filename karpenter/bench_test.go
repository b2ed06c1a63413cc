package karpenter_test

import (
	"testing"

	"github.com/mitchellh/hashstructure/v2"

	"github.com/upgradekit/upgradekit/karpenter"
)

var (
	hashBenchSink    uint64
	hashBenchSinkStr string
)

// BenchmarkNodePoolHash hashes a realistic NodePool template (6 labels, 3
// annotations, 2 taints, 1 startup taint, nodeClassRef, expireAfter 720h,
// terminationGracePeriod, 4 requirements) with TemplateHash
// ("upgradekit"), with hashstructure under Karpenter's options, reusing
// them ("hashstructure"), and with Karpenter's own np.Hash() ("karpenter").
func BenchmarkNodePoolHash(b *testing.B) {
	np := hashNodePool(hashRealisticTemplate())
	b.Run("upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hashBenchSink = karpenter.TemplateHash(&np.Spec.Template)
		}
	})
	b.Run("hashstructure", func(b *testing.B) {
		b.ReportAllocs()
		opts := hashOpts()
		for b.Loop() {
			h, err := hashstructure.Hash(np.Spec.Template, hashstructure.FormatV2, opts)
			if err != nil {
				b.Fatal(err)
			}
			hashBenchSink = h
		}
	})
	b.Run("karpenter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hashBenchSinkStr = np.Hash()
		}
	})
}

// BenchmarkEC2NodeClassHash is BenchmarkNodePoolHash for a realistic
// EC2NodeClass and CA bundle.
func BenchmarkEC2NodeClassHash(b *testing.B) {
	nc := hashRealisticNodeClass()
	ca := hashPtr("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwK")
	b.Run("upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hashBenchSink = karpenter.EC2NodeClassHash64(nc, ca)
		}
	})
	b.Run("hashstructure", func(b *testing.B) {
		b.ReportAllocs()
		opts := hashOpts()
		for b.Loop() {
			h, err := hashstructure.Hash([]any{nc.Spec, nc.AMIFamily(), *ca}, hashstructure.FormatV2, opts)
			if err != nil {
				b.Fatal(err)
			}
			hashBenchSink = h
		}
	})
	b.Run("karpenter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			hashBenchSinkStr = nc.Hash(ca)
		}
	})
}
