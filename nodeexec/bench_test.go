package nodeexec

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkExec compares OSExecutor (process group, bounded output
// capture, clean environment, deadline plumbing) with a bare os/exec
// CombinedOutput of the same program, in the same run.
func BenchmarkExec(b *testing.B) {
	argv := []string{"/bin/true"}
	b.Run("upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		ex := OSExecutor{}
		ctx := context.Background()
		for b.Loop() {
			res, err := ex.Run(ctx, Command{Argv: argv})
			if err != nil || res.ExitCode != 0 {
				b.Fatal(err, res.ExitCode)
			}
		}
	})
	b.Run("os-exec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkJournalWrite measures one durable journal update (write, fsync,
// rename, directory fsync), the cost the runner pays per state change,
// against a plain, non-durable os.WriteFile of the same bytes.
func BenchmarkJournalWrite(b *testing.B) {
	dir := b.TempDir()
	j := newJournal(threeStepPlan(), "fp")
	b.Run("upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := writeJournal(dir+"/a.journal.json", j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("os-writefile", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(j)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(dir+"/b.journal.json", data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
}
