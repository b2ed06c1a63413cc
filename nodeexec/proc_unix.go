//go:build unix

package nodeexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// setProcessGroup starts the command in its own process group and makes
// context cancellation stop the whole group, so a step's children (nsenter
// forks when entering a PID namespace) do not outlive its deadline: SIGTERM
// first, so the step can end cleanly, then SIGKILL for whatever of the group
// is left grace later, or as soon as the step's own process has exited.
// exited is closed by the caller once the command has been waited for.
func setProcessGroup(cmd *exec.Cmd, grace time.Duration, exited <-chan struct{}) {
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		pgid := cmd.Process.Pid
		err := syscall.Kill(-pgid, syscall.SIGTERM)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		go func() {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-exited: // stragglers of a group whose leader is gone
			case <-t.C:
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}()
		return err
	}
}

// lockFile takes an exclusive, non-blocking flock on path. The returned
// function releases it. The lock dies with the process, so a SIGKILLed
// runner never leaves a stale lock behind. A symbolic link at path is not
// followed (root would create or lock the file it names) and anything but
// a regular file is refused: both are ErrJournalNotRegular.
func lockFile(path string) (func(), error) {
	f, err := openNoFollow(path, os.O_RDWR|os.O_CREATE, 0o600)
	switch {
	case errors.Is(err, errSymlink):
		return nil, fmt.Errorf("lock file: %w: it is a symbolic link", ErrJournalNotRegular)
	case errors.Is(err, syscall.EISDIR):
		return nil, fmt.Errorf("lock file: %w: it is a directory", ErrJournalNotRegular)
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("lock file: %w: it is a %s", ErrJournalNotRegular, fileKind(fi.Mode()))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrJournalLocked
		}
		return nil, fmt.Errorf("flock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// errSymlink is what openNoFollow returns for a symbolic link.
var errSymlink = errors.New("symbolic link")

// openNoFollow opens path without following a symbolic link in its last
// element (errSymlink) and without blocking on a FIFO.
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		// Linux says ELOOP, FreeBSD EMLINK.
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) {
			return nil, fmt.Errorf("%w: %w", errSymlink, err)
		}
		return nil, err
	}
	return f, nil
}
