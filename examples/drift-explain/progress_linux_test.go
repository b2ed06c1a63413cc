package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLiveProgressOnATerminalOnly runs the built command on a real API
// server with --live twice: with stderr on a pseudo-terminal it says, on one line it
// rewrites, which kind it is reading and how many of each it has read,
// and clears the line before the table; with stderr on a pipe it prints
// nothing there. Nothing is timed: the line is checked for what it says,
// not for when.
func TestLiveProgressOnATerminalOnly(t *testing.T) {
	kubeconfig := liveCluster(t)
	args := []string{"--karpenter", "--live", "--kubeconfig", kubeconfig, "--context", "envtest"}
	bin := filepath.Join(t.TempDir(), "drift-explain")
	build, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(build))
	// runBuilt runs the command with stderr on f and returns its exit code.
	runBuilt := func(stdout io.Writer, f *os.File) int {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Stdout, cmd.Stderr = stdout, f
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}

	// stderr on a terminal.
	ptmx, tty := openPTY(t)
	var terminal bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&terminal, ptmx) // until the terminal side is closed: EIO
		copied <- err
	}()
	var stdout bytes.Buffer
	code := runBuilt(&stdout, tty)
	require.NoError(t, tty.Close())
	require.Equal(t, 3, code, "drifted")
	err = <-copied
	var pe *os.PathError
	require.True(t, err == nil || (errors.As(err, &pe) && errors.Is(pe.Err, syscall.EIO)), "%v", err)
	drawn := terminal.String()
	for _, want := range []string{
		"\r\033[Kdrift-explain: reading NodePools...",
		"\r\033[Kdrift-explain: NodePools 2, reading NodeClaims...",
		"\r\033[Kdrift-explain: NodePools 2, NodeClaims 16, reading Nodes...",
		"\r\033[Kdrift-explain: NodePools 2, NodeClaims 16, Nodes 0, reading EC2NodeClasses...",
		"\r\033[Kdrift-explain: NodePools 2, NodeClaims 16, Nodes 0, EC2NodeClasses 2",
	} {
		require.Contains(t, drawn, want)
	}
	require.True(t, strings.HasSuffix(drawn, "\r\033[K"), "the progress line is cleared at the end: %q", drawn)
	require.NotContains(t, drawn, "\n", "one line, rewritten")
	require.NotContains(t, stdout.String(), "reading", "progress is never on stdout")
	require.True(t, strings.HasPrefix(stdout.String(), "NODECLAIM"), stdout.String())

	// stderr on a pipe.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	piped := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		piped <- b
	}()
	stdout.Reset()
	code = runBuilt(&stdout, w)
	require.NoError(t, w.Close())
	require.Equal(t, 3, code, "drifted")
	require.Empty(t, string(<-piped))
	require.True(t, strings.HasPrefix(stdout.String(), "NODECLAIM"), stdout.String())
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
	t.Cleanup(func() { _ = tty.Close() }) // closed already unless the test failed early
	return ptmx, tty
}
