//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/testcerts"
)

// buildExtension builds this binary as a user would (go build, with the
// VCS information when the source is a git checkout) and returns its path
// and the revision it was built from ("" when the go command records none:
// not a git checkout, or a linked worktree, whose .git is a file the go
// command does not stamp from).
func buildExtension(t *testing.T) (string, string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "inplace-extension")
	rev := ""
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && fi.IsDir() {
			out, err := exec.Command("git", "rev-parse", "HEAD").Output()
			require.NoError(t, err)
			rev = strings.TrimSpace(string(out))
		}
	}
	vcs := "-buildvcs=false"
	if rev != "" {
		vcs = "-buildvcs=true"
	}
	out, err := exec.Command("go", "build", vcs, "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin, rev
}

// exitOf is the exit code of a finished command.
func exitOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// TestBinaryVersionAndLogging runs the built binary: --version prints the
// module and the revision it was built from and exits 0, -h exits 0, an
// unknown log format exits 2, and a running extension logs through
// Kubernetes' logging: JSON lines with --logging-format=json, klog text
// lines by default, the flags' values only at -v=1 and above.
func TestBinaryVersionAndLogging(t *testing.T) {
	bin, rev := buildExtension(t)

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.Equal(t, exitOK, exitOf(t, cmd.Run()), stderr.String())
	require.Empty(t, stderr.String())
	v := strings.TrimSpace(stdout.String())
	require.True(t, strings.HasPrefix(v, "inplace-extension github.com/upgradekit/upgradekit/examples "), v) // the examples module
	if rev != "" {
		require.Contains(t, v, " revision "+rev, "the commit it was built from")
	} else {
		require.NotContains(t, v, "revision")
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, exitOK, "-logging-format"},
		{[]string{"-no-update-machine", "--logging-format=yaml"}, exitUsage, `Unsupported log format`},
		{[]string{"-no-update-machine", "-v=loud"}, exitUsage, `invalid argument "loud" for "-v, --v" flag`},
	} {
		stderr.Reset()
		cmd := exec.Command(bin, tc.args...)
		cmd.Stderr = &stderr
		require.Equal(t, tc.code, exitOf(t, cmd.Run()), "%v: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}

	// serveAndStop runs the extension until it is ready, then stops it
	// with SIGTERM, and returns its log.
	serveAndStop := func(logArgs ...string) []string {
		t.Helper()
		dir := t.TempDir()
		testcerts.Write(t, dir)
		health := "127.0.0.1:" + strconv.Itoa(testcerts.FreePort(t))
		var log bytes.Buffer
		cmd := exec.Command(bin, append([]string{"-no-update-machine", "-host", "127.0.0.1", "-port", strconv.Itoa(testcerts.FreePort(t)),
			"-cert-dir", dir, "-metrics-bind-address", "0", "-health-addr", health}, logArgs...)...)
		cmd.Stderr = &log
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		require.Eventually(t, func() bool {
			r, err := http.Get("http://" + health + "/readyz")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == http.StatusOK
		}, 2*time.Minute, 50*time.Millisecond, "ready")
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-exited:
			require.Equal(t, exitOK, exitOf(t, err), log.String())
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			t.Fatal("did not stop on SIGTERM")
		}
		return strings.Split(strings.TrimSpace(log.String()), "\n")
	}

	lines := serveAndStop("--logging-format=json", "-v=1")
	var msgs []string
	for _, l := range lines {
		var entry struct {
			Msg   string `json:"msg"`
			V     *int   `json:"v"`
			Value string `json:"value"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &entry), "a JSON log line: %s", l)
		msgs = append(msgs, entry.Msg)
		if entry.Msg == "flag" && entry.Value == "--logging-format=json" {
			require.Equal(t, 1, *entry.V, "flags are logged at -v=1")
		}
	}
	require.Contains(t, msgs, "starting")
	require.Contains(t, msgs, "serving hook")
	require.Contains(t, lines[0], `"version":"inplace-extension github.com/upgradekit/upgradekit/examples `)
	require.Contains(t, strings.Join(lines, "\n"), `"value":"--logging-format=json"`)

	lines = serveAndStop()
	for _, l := range lines {
		require.Regexp(t, `^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} `, l, "klog's text format by default")
	}
	require.Contains(t, lines[0], `"starting" version="inplace-extension github.com/upgradekit/upgradekit/examples `)
	require.NotContains(t, strings.Join(lines, "\n"), `"flag"`, "flags only at -v=1")
}
