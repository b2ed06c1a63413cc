package nodeexec

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// journalStores returns a new store of each kind, the file store in a
// directory that does not exist yet.
func journalStores(t *testing.T) map[string]JournalStore {
	return map[string]JournalStore{
		"file":   FileJournalStore{Dir: filepath.Join(t.TempDir(), "journal")},
		"memory": &MemoryJournalStore{},
	}
}

// TestJournalStoresBehaveAlike: what the Runner relies on of a
// JournalStore (read-back of the last write, atomic replace, removal,
// listing, the lock, the size bound) is the same in memory as on disk.
func TestJournalStoresBehaveAlike(t *testing.T) {
	for kind, s := range journalStores(t) {
		t.Run(kind, func(t *testing.T) {
			// Before Init: no journal, nothing listed, nothing to remove.
			_, err := s.Read("p")
			require.ErrorIs(t, err, fs.ErrNotExist)
			plans, err := s.List()
			require.NoError(t, err)
			require.Empty(t, plans)
			require.NoError(t, s.Init())
			require.NoError(t, s.Init(), "Init twice")
			require.NoError(t, s.Remove("p"), "removing a missing journal")

			// Write, read back, replace.
			first := []byte(`{"first":1}` + "\n")
			require.NoError(t, s.Write("p", first))
			first[2] = 'X' // the store keeps its own copy
			got, err := s.Read("p")
			require.NoError(t, err)
			require.Equal(t, `{"first":1}`+"\n", string(got))
			got[0] = 'X' // and gives out copies
			require.NoError(t, s.Write("p", []byte("second\n")))
			got, err = s.Read("p")
			require.NoError(t, err)
			require.Equal(t, "second\n", string(got))
			require.NoError(t, s.Write("a-b", nil))
			got, err = s.Read("a-b")
			require.NoError(t, err)
			require.Empty(t, got)

			// Listing: every journal, sorted, nothing else (no lock or
			// temporary files).
			unlock, err := s.Lock("q")
			require.NoError(t, err)
			unlock()
			plans, err = s.List()
			require.NoError(t, err)
			require.Equal(t, []string{"a-b", "p"}, plans)
			require.NoError(t, s.Write("a", []byte("a\n")))
			plans, err = s.List()
			require.NoError(t, err)
			require.Equal(t, []string{"a", "a-b", "p"}, plans, "sorted by plan name")
			require.NoError(t, s.Remove("a"))

			// The lock excludes a second holder without waiting, and is
			// free again once released.
			unlock, err = s.Lock("p")
			require.NoError(t, err)
			_, err = s.Lock("p")
			require.ErrorIs(t, err, ErrJournalLocked)
			other, err := s.Lock("a-b")
			require.NoError(t, err, "locks are per plan")
			other()
			unlock()
			unlock, err = s.Lock("p")
			require.NoError(t, err)
			unlock()

			// Remove.
			require.NoError(t, s.Remove("p"))
			_, err = s.Read("p")
			require.ErrorIs(t, err, fs.ErrNotExist)
			plans, err = s.List()
			require.NoError(t, err)
			require.Equal(t, []string{"a-b"}, plans)

			// Larger than 1 MiB: refused on read, never read whole.
			require.NoError(t, s.Write("huge", []byte(strings.Repeat(" ", maxJournalSize+1))))
			_, err = s.Read("huge")
			require.ErrorIs(t, err, ErrJournalTooLarge)
			var je *JournalError
			require.ErrorAs(t, err, &je)

			require.Contains(t, s.Path("p"), JournalFileName("p"))

			// A name that is not a plan's never reaches outside the store.
			for _, bad := range []string{"", "../x", "a/b", "A"} {
				var ve *ValidationError
				_, err := s.Read(bad)
				require.ErrorAs(t, err, &ve, bad)
				require.ErrorAs(t, s.Write(bad, nil), &ve, bad)
				require.ErrorAs(t, s.Remove(bad), &ve, bad)
				_, err = s.Lock(bad)
				require.ErrorAs(t, err, &ve, bad)
			}
		})
	}
}

// TestFileJournalStoreIsTheDefault: a Runner without a JournalStore
// keeps its journals as FileJournalStore does in JournalDir, and one
// with both options is refused.
func TestFileJournalStoreIsTheDefault(t *testing.T) {
	dir := t.TempDir()
	r := newTestRunner(t, &scriptedHost{}, dir)
	out, err := r.Run(t.Context(), threeStepPlan())
	require.NoError(t, err)
	s := FileJournalStore{Dir: dir}
	path, err := r.JournalPath("p")
	require.NoError(t, err)
	require.Equal(t, s.Path("p"), path)
	data, err := s.Read("p")
	require.NoError(t, err)
	j, err := DecodeJournal(data)
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(out, j.Outcome))
	plans, err := s.List()
	require.NoError(t, err)
	require.Equal(t, []string{"p"}, plans)

	_, err = NewRunner(&scriptedHost{}, RunnerOptions{JournalDir: dir, JournalStore: &MemoryJournalStore{}})
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "RunnerOptions.JournalDir")
}

// TestRunnerOnEitherStoreResumesAlike: a runner that crashes (its
// context cancelled while a command runs, as the simulator's crashes do)
// leaves the same journal in memory as on disk, and the runner restarted
// on it runs the same commands to the same outcome; Rollback and Reset
// do the same on both.
func TestRunnerOnEitherStoreResumesAlike(t *testing.T) {
	type trace struct {
		Journals [][]byte
		Calls    [][]string
		Outcomes []Outcome
		Errs     []string
	}
	run := func(t *testing.T, s JournalStore, crashAt []string, mutate func(*Plan)) trace {
		var tr trace
		clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
		h := &scriptedHost{exits: map[string][]int{"two/check": {1, 0}}}
		p := threeStepPlan()
		mutate(&p)
		newRunner := func() *Runner {
			r, err := NewRunner(h, RunnerOptions{JournalStore: s, Clock: clk})
			require.NoError(t, err)
			return r
		}
		record := func(out Outcome, err error) {
			data, rerr := s.Read(p.Name)
			require.NoError(t, rerr)
			tr.Journals = append(tr.Journals, data)
			tr.Calls = append(tr.Calls, h.Calls())
			tr.Outcomes = append(tr.Outcomes, out)
			msg := ""
			if err != nil {
				msg = strings.ReplaceAll(err.Error(), s.Path(p.Name), "PATH")
			}
			tr.Errs = append(tr.Errs, msg)
			h.reset()
		}
		for _, at := range crashAt {
			h.block = at
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			var out Outcome
			var err error
			go func() { out, err = newRunner().Run(ctx, p); close(done) }()
			require.Eventually(t, func() bool {
				c := h.Calls()
				return len(c) > 0 && c[len(c)-1] == at
			}, 5*time.Second, time.Millisecond)
			cancel()
			<-done
			require.ErrorIs(t, err, context.Canceled)
			h.block = ""
			record(out, err)
		}
		record(newRunner().Run(t.Context(), p))
		record(newRunner().Rollback(t.Context(), p))
		require.NoError(t, newRunner().Reset(p.Name))
		_, err := s.Read(p.Name)
		require.ErrorIs(t, err, fs.ErrNotExist)
		return tr
	}
	for _, tc := range []struct {
		name    string
		crashAt []string
		mutate  func(*Plan)
	}{
		{"no crash", nil, func(*Plan) {}},
		{"crash in a backup", []string{"one/backup"}, func(*Plan) {}},
		{"crash twice in a step", []string{"two/run", "two/run"}, func(*Plan) {}},
		{"crash, then the check says done", []string{"two/run"}, func(p *Plan) { p.Steps[1].Idempotent = false; p.Steps[1].Check = []string{"c"} }},
		{"crash in a step that cannot re-run", []string{"three/run"}, func(p *Plan) { p.Steps[2].Idempotent = false }},
		{"crash, then roll back and re-run", []string{"two/run"}, func(p *Plan) {
			p.Steps[1].Idempotent = false
			p.Steps[1].OnInterrupt = InterruptPolicyRollback
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onDisk := run(t, FileJournalStore{Dir: filepath.Join(t.TempDir(), "journal")}, tc.crashAt, tc.mutate)
			inMemory := run(t, &MemoryJournalStore{}, tc.crashAt, tc.mutate)
			require.Empty(t, cmp.Diff(onDisk, inMemory))
		})
	}
}

// TestRollbackAndResetFindNoJournalInAnEmptyStore: on a store no Run
// initialized, Rollback refuses (ErrNoJournal) and Reset does nothing,
// and neither creates the file store's directory.
func TestRollbackAndResetFindNoJournalInAnEmptyStore(t *testing.T) {
	for kind, s := range journalStores(t) {
		t.Run(kind, func(t *testing.T) {
			r, err := NewRunner(&scriptedHost{}, RunnerOptions{JournalStore: s})
			require.NoError(t, err)
			_, err = r.Rollback(t.Context(), threeStepPlan())
			require.ErrorIs(t, err, ErrNoJournal)
			require.NoError(t, r.Reset("p"))
			if fs, ok := s.(FileJournalStore); ok {
				_, err := os.Stat(fs.Dir)
				require.True(t, errors.Is(err, os.ErrNotExist))
			}
		})
	}
}
