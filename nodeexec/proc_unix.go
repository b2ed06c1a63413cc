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
// runner never leaves a stale lock behind.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
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
