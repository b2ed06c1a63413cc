//go:build !unix

package nodeexec

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"time"
)

// setProcessGroup is a no-op where process groups do not exist; the
// runner is only meant to execute on Linux nodes, but the rest of the
// package (plans, pod builder) must build everywhere.
func setProcessGroup(*exec.Cmd, time.Duration, <-chan struct{}) {}

// lockFile is a no-op outside unix.
func lockFile(string) (func(), error) { return func() {}, nil }

// errSymlink is what openNoFollow returns for a symbolic link.
var errSymlink = errors.New("symbolic link")

// openNoFollow opens path unless it is a symbolic link (errSymlink); there
// is no O_NOFOLLOW outside unix, so a link made between the check and the
// open is followed.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, errSymlink
	}
	return os.OpenFile(path, flag, perm)
}
