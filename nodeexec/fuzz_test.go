package nodeexec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func FuzzDecodePlan(f *testing.F) {
	for _, p := range []Plan{validPlan(), threeStepPlan(), crashPlan("/tmp/ledger", "/tmp/slow")} {
		p.Steps[0].Timeout = time.Minute
		p.Steps[0].Env = []EnvVar{{Name: "K", Value: "v"}}
		p.Steps[0].Namespaces = []Namespace{NamespaceUTS, NamespacePID}
		b, err := EncodePlan(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"],"onInterrupt":"Check"}]}`))
	f.Add([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"],"namespaces":["time"]}]}`))
	f.Add([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"],"timeout":-1}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("DecodePlan returned an invalid plan: %v", err)
		}
		again, err := EncodePlan(p)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		p2, err := DecodePlan(again)
		if err != nil {
			t.Fatalf("decode of re-encoded plan: %v", err)
		}
		if d := cmp.Diff(p, p2); d != "" {
			t.Fatalf("round trip changed the plan: %s", d)
		}
		if p.Fingerprint() != p2.Fingerprint() {
			t.Fatal("fingerprint is not stable")
		}
	})
}

func FuzzDecodeJournal(f *testing.F) {
	// Seed with journals produced by real runs.
	dir := f.TempDir()
	h := &scriptedHost{exits: map[string][]int{"three/run": {1}}}
	for i, p := range []Plan{threeStepPlan(), validPlan()} {
		if i == 0 {
			p.RollbackOnFailure = true
		}
		r, err := NewRunner(h, RunnerOptions{JournalDir: dir})
		if err != nil {
			f.Fatal(err)
		}
		_, _ = r.Run(f.Context(), p)
		b, err := os.ReadFile(filepath.Join(dir, JournalFileName(p.Name)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"fingerprint":"x","plan":"p","node":"n","state":"Running","steps":[{"name":"a","state":"Running","attempts":-1}],"runs":0}`))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := DecodeJournal(data)
		if err != nil {
			return
		}
		if j.Version != journalVersion || !j.State.known() || j.Plan == "" {
			t.Fatalf("accepted an inconsistent journal: %+v", j)
		}
		seen := map[string]bool{}
		for _, s := range j.Steps {
			if !s.State.known() || seen[s.Name] || s.Attempts < 0 {
				t.Fatalf("accepted an inconsistent step: %+v", s)
			}
			seen[s.Name] = true
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeJournal(b); err != nil {
			t.Fatalf("re-encoded journal does not decode: %v", err)
		}
	})
}
