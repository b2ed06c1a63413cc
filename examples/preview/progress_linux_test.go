package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestProgressOnATerminalOnly runs the built plugin against a real API
// server twice: with stderr on a pseudo-terminal it says what it is
// reading while it reads, on a line it clears again; with stderr on a
// pipe it prints no such line.
func TestProgressOnATerminalOnly(t *testing.T) {
	env, file := demoCluster(t)
	bin := buildPlugin(t)
	args := []string{"preview", "--cluster", "demo", "-f", file, "--kubeconfig", kubeconfigFile(t, env)}

	// stderr on a terminal.
	ptmx, tty := openPTY(t)
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	require.NoError(t, cmd.Start())
	require.NoError(t, tty.Close()) // the child holds it now
	var terminal bytes.Buffer
	_, err := io.Copy(&terminal, ptmx) // until the child exits: EIO
	var pe *os.PathError
	require.True(t, err == nil || (errors.As(err, &pe) && errors.Is(pe.Err, syscall.EIO)), "%v", err)
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &ee)
	require.Equal(t, exitBlocked, ee.ExitCode(), "%s%s", stdout.String(), terminal.String())
	require.Contains(t, terminal.String(), "kubectl upgradekit preview: reading Cluster default/demo and its machines...")
	require.Contains(t, terminal.String(), "\r\033[K", "the progress line is cleared")
	require.NotContains(t, stdout.String(), "reading Cluster", "progress is never on stdout")

	// stderr on a pipe.
	cmd = exec.CommandContext(t.Context(), bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.ErrorAs(t, cmd.Run(), &ee)
	require.Equal(t, exitBlocked, ee.ExitCode())
	require.Contains(t, stderr.String(), "read and predicted 4 machines")
	require.NotContains(t, stderr.String(), "reading Cluster")
	require.NotContains(t, stderr.String(), "\033[")
}

// openPTY opens a pseudo-terminal pair: the controlling side to read what
// is written to the terminal side.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ptmx.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return ptmx, tty
}
