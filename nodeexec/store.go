package nodeexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// JournalStore is where a Runner keeps its journals, one per plan name
// (RunnerOptions.JournalStore). FileJournalStore, the default, keeps them
// as files in a directory on the node, where they survive the runner, its
// pod and a reboot; MemoryJournalStore keeps them in memory, for a runner
// whose crashes are simulated in process (the simulator's hosts).
//
// The Runner relies on these guarantees, and resumes wrongly without
// them:
//
//   - Write replaces the plan's journal atomically: whatever stops the
//     runner (a crash, a kill, a cancelled context) at whatever point,
//     Read afterwards returns either the whole journal written before or
//     the whole new one, never a mix or a torn one;
//   - Read returns what the last completed Write wrote, across Runners
//     sharing the store (a restarted runner reads its predecessor's
//     journal);
//   - Lock excludes other holders of the same plan's lock on the same
//     store, without waiting.
//
// The plan names the Runner passes have passed CheckPlanName (both stores
// here refuse others with its *ValidationError, so a name never reaches
// outside the store). A JournalStore must be safe for concurrent use.
type JournalStore interface {
	// Init makes the store ready for Lock and Write (FileJournalStore
	// creates its directory). Runner.Run calls it first; Rollback and
	// Reset do not, so on a store that was never initialized they find
	// no journal and create nothing.
	Init() error
	// Lock takes the exclusive lock of the plan's journal, or fails at
	// once with an error wrapping ErrJournalLocked when another holder
	// has it; an error wrapping fs.ErrNotExist means the store was
	// never initialized (there is no journal). The Runner holds the lock
	// for a whole Run, Rollback or Reset and calls unlock once.
	Lock(plan string) (unlock func(), err error)
	// Read returns the plan's journal as last written; an error wrapping
	// fs.ErrNotExist when there is none. It may refuse a journal larger
	// than 1 MiB (ErrJournalTooLarge): the Runner never writes one.
	Read(plan string) ([]byte, error)
	// Write replaces the plan's journal with data, atomically.
	Write(plan string, data []byte) error
	// Remove deletes the plan's journal; removing one that does not
	// exist is not an error.
	Remove(plan string) error
	// List returns the names of the plans that have a journal, sorted;
	// none for a store that was never initialized.
	List() ([]string, error)
	// Path names the plan's journal in errors and logs (a file's path
	// for FileJournalStore); Runner.JournalPath returns it.
	Path(plan string) string
}

// FileJournalStore keeps each plan's journal in the file
// JournalFileName(plan) inside Dir, next to its lock file (the journal's
// name + ".lock", locked with flock, so runners in different processes
// exclude each other). Write replaces the file atomically: it writes a
// temporary file in Dir, fsyncs it, renames it over the journal and
// fsyncs Dir, so a crash or power loss at any point leaves either the old
// or the new journal. Read never follows a symbolic link, never reads
// anything but a regular file (ErrJournalNotRegular) nor one larger than
// 1 MiB (ErrJournalTooLarge). It is the Runner's default, in
// RunnerOptions.JournalDir.
type FileJournalStore struct {
	// Dir holds the journals; Init creates it 0700 if missing.
	Dir string
}

// Init creates Dir (0700) if it does not exist; an error is a
// *JournalError naming Dir.
func (s FileJournalStore) Init() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return &JournalError{Path: s.Dir, Err: err}
	}
	return nil
}

// Lock takes the flock of the plan's lock file, creating the file if
// needed; ErrJournalLocked when another process or Runner holds it, an
// error wrapping fs.ErrNotExist when Dir does not exist.
func (s FileJournalStore) Lock(plan string) (func(), error) {
	if err := CheckPlanName(plan); err != nil {
		return nil, err
	}
	return lockFile(s.Path(plan) + ".lock")
}

// Read reads the plan's journal file (see FileJournalStore).
func (s FileJournalStore) Read(plan string) ([]byte, error) {
	if err := CheckPlanName(plan); err != nil {
		return nil, err
	}
	return readJournalPath(s.Path(plan))
}

// Write replaces the plan's journal file atomically (see
// FileJournalStore). The file is created 0600: a journal holds step
// output.
func (s FileJournalStore) Write(plan string, data []byte) error {
	if err := CheckPlanName(plan); err != nil {
		return err
	}
	return writeFileAtomic(s.Path(plan), data)
}

// Remove deletes the plan's journal file, if there is one. It leaves the
// lock file, which a runner may hold.
func (s FileJournalStore) Remove(plan string) error {
	if err := CheckPlanName(plan); err != nil {
		return err
	}
	if err := os.Remove(s.Path(plan)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List returns the plans whose journal file is in Dir, sorted; none when
// Dir does not exist. Files whose name is not a valid plan name's journal
// file (temporary files, lock files, anything else) are left out.
func (s FileJournalStore) List() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// The path as given, cut: the error may be logged or reported.
			pe.Path = errtext.Quote(pe.Path)
		}
		return nil, err
	}
	var plans []string
	for _, e := range entries {
		plan, ok := strings.CutSuffix(e.Name(), JournalFileName(""))
		if ok && CheckPlanName(plan) == nil {
			plans = append(plans, plan)
		}
	}
	slices.Sort(plans) // by plan name: "a-b.journal.json" sorts before "a.journal.json"
	return plans, nil
}

// Path returns the plan's journal file, Dir/JournalFileName(plan).
func (s FileJournalStore) Path(plan string) string {
	return filepath.Join(s.Dir, JournalFileName(plan))
}

// MemoryJournalStore keeps journals in memory, for Runners that share a
// process: a runner restarted in the same process on the same store reads
// what its predecessor wrote, as it would from the node's disk. Write
// replaces a journal at once under a mutex, so a runner stopped at any
// point between two calls (the only points an in-process crash can stop
// it) leaves the old or the new journal. Lock excludes Runners of the
// same store. Read refuses a journal larger than 1 MiB
// (ErrJournalTooLarge), as FileJournalStore does.
//
// It does not model the disk: no fsync or write failure, no full disk,
// no torn write of a power loss (which the file store's rename rules
// out), and the journals go with the process. The zero value is an empty
// store, ready to use; a MemoryJournalStore must not be copied after
// first use.
type MemoryJournalStore struct {
	mu       sync.Mutex
	journals map[string][]byte
	locked   map[string]bool
}

// Init does nothing: a MemoryJournalStore is always ready.
func (s *MemoryJournalStore) Init() error { return nil }

// Lock takes the plan's lock; ErrJournalLocked when it is held.
func (s *MemoryJournalStore) Lock(plan string) (func(), error) {
	if err := CheckPlanName(plan); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked[plan] {
		return nil, ErrJournalLocked
	}
	if s.locked == nil {
		s.locked = map[string]bool{}
	}
	s.locked[plan] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.locked, plan)
			s.mu.Unlock()
		})
	}, nil
}

// Read returns a copy of the plan's journal; a *fs.PathError wrapping
// fs.ErrNotExist when there is none.
func (s *MemoryJournalStore) Read(plan string) ([]byte, error) {
	if err := CheckPlanName(plan); err != nil {
		return nil, err
	}
	s.mu.Lock()
	data, ok := s.journals[plan]
	s.mu.Unlock()
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: s.Path(plan), Err: fs.ErrNotExist}
	}
	if len(data) > maxJournalSize {
		return nil, &JournalError{Path: s.Path(plan), Err: ErrJournalTooLarge, Detail: fmt.Sprintf("more than %d bytes", maxJournalSize)}
	}
	return slices.Clone(data), nil
}

// Write replaces the plan's journal with a copy of data.
func (s *MemoryJournalStore) Write(plan string, data []byte) error {
	if err := CheckPlanName(plan); err != nil {
		return err
	}
	data = slices.Clone(data)
	if data == nil {
		data = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journals == nil {
		s.journals = map[string][]byte{}
	}
	s.journals[plan] = data
	return nil
}

// Remove deletes the plan's journal, if there is one.
func (s *MemoryJournalStore) Remove(plan string) error {
	if err := CheckPlanName(plan); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.journals, plan)
	return nil
}

// List returns the plans that have a journal, sorted.
func (s *MemoryJournalStore) List() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	plans := make([]string, 0, len(s.journals))
	for p := range s.journals {
		plans = append(plans, p)
	}
	slices.Sort(plans)
	return plans, nil
}

// Path names the plan's journal in errors: "memory:" and its journal
// file's name.
func (s *MemoryJournalStore) Path(plan string) string {
	return "memory:" + JournalFileName(plan)
}

// writeFileAtomic replaces path atomically: write a temporary file in the
// same directory, fsync it, rename it over path, fsync the directory. A
// crash at any point leaves either the old or the new file, never a torn
// one.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	// CreateTemp creates the file 0600: the journal holds step output.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	cleanup := func() { _ = os.Remove(tmpName) }
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		cleanup()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		cleanup()
		return err
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return err
	}
	if err := os.Rename(tmpName, path); err != nil {
		cleanup()
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
