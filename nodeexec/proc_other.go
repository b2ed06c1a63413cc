//go:build !unix

package nodeexec

import (
	"os/exec"
	"time"
)

// setProcessGroup is a no-op where process groups do not exist; the
// runner is only meant to execute on Linux nodes, but the rest of the
// package (plans, pod builder) must build everywhere.
func setProcessGroup(*exec.Cmd, time.Duration, <-chan struct{}) {}

// lockFile is a no-op outside unix.
func lockFile(string) (func(), error) { return func() {}, nil }
