package nodeexec

import "syscall"

// procAttr puts the step in its own process group and has the kernel
// SIGKILL it if the runner dies (PR_SET_PDEATHSIG), so a crashed runner
// does not leave a step changing the host unsupervised while its successor
// resumes the plan. (Linux delivers the signal when the forking thread
// exits; the Go runtime only retires threads whose goroutine ended while
// locked to them, which this package never does.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
