package diff_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

type machinePair struct {
	m     *clusterv1.Machine
	cfg   *bootstrapv1.KubeadmConfig
	infra *unstructured.Unstructured
}

// changedPair is the "changed pair": a version bump and one file.
func changedPair() (cur, des machinePair) {
	m, cfg, infra := fixture()
	cur = machinePair{m, cfg, infra}
	m2, cfg2, infra2 := fixture()
	m2.Spec.Version = "v1.31.1"
	cfg2.Spec.Files[1].Content += "- level: RequestResponse\n"
	return cur, machinePair{m2, cfg2, infra2}
}

func (p machinePair) state() diff.State {
	return diff.State{Machine: p.m, Bootstrap: p.cfg, Infrastructure: p.infra}
}

// BenchmarkDiff compares a full change set (paths, categories, values) with
// go-cmp's Diff, which CAPI uses for the same job.
func BenchmarkDiff(b *testing.B) {
	d, err := diff.New()
	if err != nil {
		b.Fatal(err)
	}
	cur, des := changedPair()
	b.Run("changed/upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cs, err := d.Machines(cur.state(), des.state())
			if err != nil || cs.Len() != 2 {
				b.Fatalf("%v %v", cs, err)
			}
		}
	})
	b.Run("changed/go-cmp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := cmp.Diff(cur.m, des.m) + cmp.Diff(cur.cfg, des.cfg) + cmp.Diff(cur.infra.Object, des.infra.Object)
			if s == "" {
				b.Fatal("no diff")
			}
		}
	})
}

// BenchmarkEqual compares the equal case with equality.Semantic.DeepEqual.
func BenchmarkEqual(b *testing.B) {
	d, err := diff.New()
	if err != nil {
		b.Fatal(err)
	}
	cur, _ := changedPair()
	same, _ := changedPair()
	b.Run("equal/upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		cs, ds := cur.state(), same.state()
		for b.Loop() {
			eq, err := d.Equal(cs, ds)
			if err != nil || !eq {
				b.Fatal(eq, err)
			}
		}
	})
	b.Run("equal/equality.Semantic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !equality.Semantic.DeepEqual(cur.m, same.m) || !equality.Semantic.DeepEqual(cur.cfg, same.cfg) ||
				!equality.Semantic.DeepEqual(cur.infra.Object, same.infra.Object) {
				b.Fatal("not equal")
			}
		}
	})
	b.Run("equal/go-cmp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !cmp.Equal(cur.m, same.m) || !cmp.Equal(cur.cfg, same.cfg) || !cmp.Equal(cur.infra.Object, same.infra.Object) {
				b.Fatal("not equal")
			}
		}
	})
}

// BenchmarkFleet diffs 10,000 distinct machine pairs in a loop, each with a
// version bump and a changed file, and reports bytes per machine.
func BenchmarkFleet(b *testing.B) {
	d, err := diff.New()
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	cur := make([]diff.State, n)
	des := make([]diff.State, n)
	for i := range n {
		c, dd := changedPair()
		c.m.Name = fmt.Sprintf("md-0-%05d", i)
		dd.m.Name = c.m.Name
		dd.cfg.Spec.Files[0].Content = fmt.Sprintf("motd %d", i)
		cur[i], des[i] = c.state(), dd.state()
	}
	b.Run("10000-machines/upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		for b.Loop() {
			for i := range n {
				cs, err := d.Machines(cur[i], des[i])
				if err != nil || cs.Len() != 3 {
					b.Fatalf("%v %v", cs, err)
				}
			}
		}
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.TotalAlloc-before)/float64(b.N*n), "B/machine")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/machine")
	})
	b.Run("10000-machines/go-cmp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range n {
				c, dd := cur[i], des[i]
				if cmp.Diff(c.Machine, dd.Machine)+cmp.Diff(c.Bootstrap, dd.Bootstrap) == "" {
					b.Fatal("no diff")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/machine")
	})
}
