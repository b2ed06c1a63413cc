//go:build unix

package nodeexec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadJournalRefusesWhatIsNotAJournalFile: ReadJournal follows no
// symbolic link (one to /dev/zero would be read until memory runs out),
// reads no directory, FIFO or device, and no file larger than
// maxJournalSize; each is a typed *JournalError.
func TestReadJournalRefusesWhatIsNotAJournalFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.journal.json")
	require.NoError(t, writeJournal(good, newJournal(threeStepPlan(), "fp")))
	_, err := ReadJournal(good)
	require.NoError(t, err)

	link := func(target string) string {
		p := filepath.Join(t.TempDir(), "p.journal.json")
		require.NoError(t, os.Symlink(target, p))
		return p
	}
	fifo := filepath.Join(dir, "fifo.journal.json")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	huge := filepath.Join(dir, "huge.journal.json")
	require.NoError(t, os.WriteFile(huge, []byte(strings.Repeat(" ", maxJournalSize+1)), 0o600))

	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"a link to a journal", link(good), ErrJournalNotRegular},
		{"a link to /dev/zero", link("/dev/zero"), ErrJournalNotRegular},
		{"a directory", t.TempDir(), ErrJournalNotRegular},
		{"a FIFO", fifo, ErrJournalNotRegular},
		{"/dev/zero", "/dev/zero", ErrJournalNotRegular},
		{"more than maxJournalSize", huge, ErrJournalTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJournal(tc.path)
			require.ErrorIs(t, err, tc.want)
			var je *JournalError
			require.ErrorAs(t, err, &je)
		})
	}
}

// TestJournalLockFollowsNoLink: a symbolic link where the lock file goes
// is neither followed nor created through: the runner refuses the plan
// (ErrJournalNotRegular) and runs nothing, and the file the link names is
// not created. Reset refuses the same way.
func TestJournalLockFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "created-by-root")
	p := threeStepPlan()
	require.NoError(t, os.Symlink(target, filepath.Join(dir, JournalFileName(p.Name)+".lock")))
	h := &scriptedHost{}
	r := newTestRunner(t, h, dir)
	_, err := r.Run(t.Context(), p)
	require.ErrorIs(t, err, ErrJournalNotRegular)
	var je *JournalError
	require.ErrorAs(t, err, &je)
	require.Empty(t, h.calls, "nothing ran")
	_, err = os.Lstat(target)
	require.ErrorIs(t, err, os.ErrNotExist, "the link's target was not created")
	require.ErrorIs(t, r.Reset(p.Name), ErrJournalNotRegular)

	// A directory in its place is refused too.
	dir = t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, JournalFileName(p.Name)+".lock"), 0o700))
	_, err = newTestRunner(t, h, dir).Run(t.Context(), p)
	require.ErrorIs(t, err, ErrJournalNotRegular)
}

// TestJournalWriteFitsMaxJournalSize: a journal whose outputs would make it
// larger than maxJournalSize (a huge RunnerOptions.JournalOutputLimit) is written
// with the outputs cut to their tails, so the runner reads back what it
// wrote; one too large even without outputs is ErrJournalTooLarge.
func TestJournalWriteFitsMaxJournalSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.journal.json")
	j := newJournal(threeStepPlan(), "fp")
	out := strings.Repeat("x", 500<<10) + "the end"
	for i := range j.Steps {
		j.Steps[i].Output = out
	}
	j.Failure = &Failure{Step: "one", Output: out}
	require.NoError(t, writeJournal(path, j))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(maxJournalSize))
	got, err := ReadJournal(path)
	require.NoError(t, err)
	for _, s := range got.Steps {
		require.True(t, strings.HasSuffix(out, s.Output) && strings.HasSuffix(s.Output, "the end"), "a tail of the output is kept")
		require.Greater(t, len(s.Output), 64<<10)
	}
	require.Equal(t, out, j.Steps[0].Output, "the caller's journal is not changed")

	big := newJournal(threeStepPlan(), strings.Repeat("f", maxJournalSize))
	require.ErrorIs(t, writeJournal(path, big), ErrJournalTooLarge)
	got, err = ReadJournal(path)
	require.NoError(t, err, "the journal on disk is the previous one")
	require.Len(t, got.Steps, 3)
}
