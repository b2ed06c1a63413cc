//go:build unix && !linux

package nodeexec

import "syscall"

// procAttr puts the step in its own process group (no parent-death signal
// outside Linux).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
