package upgradekit_test

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoBuiltBinariesInTheTree: no tracked file is a built executable or
// larger than 1 MiB (built command binaries were committed by mistake
// twice; the largest source or test data file is under 100 KB).
func TestNoBuiltBinariesInTheTree(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "git", "ls-files", "-z").Output()
	if err != nil {
		t.Skip("not a git checkout: ", err)
	}
	for _, f := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		name := string(f)
		st, err := os.Stat(name)
		if err != nil {
			continue // deleted in the work tree
		}
		require.LessOrEqual(t, st.Size(), int64(1<<20), "%s: %d bytes tracked; built binaries belong in .gitignore", name, st.Size())
		head := make([]byte, 4)
		if fh, err := os.Open(name); err == nil {
			n, _ := fh.Read(head)
			fh.Close()
			require.False(t, n == 4 && string(head) == "\x7fELF", "%s is an ELF binary", name)
		}
	}
}
