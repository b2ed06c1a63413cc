package apiserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// recordingTB stands in for a test's t: it records how StartForTest ends
// the test (skip or fail) and stops there, as the testing package does.
type recordingTB struct {
	testing.TB
	mu      sync.Mutex
	outcome string // "skip", "fatal" or "" (StartForTest returned)
	msg     string
}

func (r *recordingTB) Helper()             {}
func (r *recordingTB) Cleanup(func())      {}
func (r *recordingTB) Logf(string, ...any) {}
func (r *recordingTB) end(outcome, format string, args []any) {
	r.mu.Lock()
	r.outcome, r.msg = outcome, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recordingTB) Skipf(format string, args ...any)  { r.end("skip", format, args) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.end("fatal", format, args) }

// startForTest runs apiserver.StartForTest on a recordingTB and returns how
// it ended.
func startForTest(t *testing.T, opts ...apiserver.Option) (outcome, msg string) {
	t.Helper()
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env := apiserver.StartForTest(r, opts...)
		if env != nil {
			_ = env.Stop()
		}
	}()
	<-done
	return r.outcome, r.msg
}

// TestStartForTestSkipsWithoutAssetsUnlessRequired: a fresh clone's
// `go test ./...` skips the tests that need kube-apiserver and etcd, with
// the reason and the command that builds them; with RequireEnvVar set (as
// `make test` and CI set it) a missing binary fails the test, whatever
// SkipEnvVar says, so a skip cannot hide there.
func TestStartForTestSkipsWithoutAssetsUnlessRequired(t *testing.T) {
	empty := t.TempDir()
	// Present but not real binaries: only a start would tell.
	fakeBins := t.TempDir()
	for _, b := range []string{"kube-apiserver", "etcd"} {
		require.NoError(t, os.WriteFile(filepath.Join(fakeBins, b), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	}
	for _, tc := range []struct {
		name          string
		require, skip bool
		dir           string
		want          string
		wantIn        []string
	}{
		{name: "missing, nothing set", dir: empty, want: "skip", wantIn: []string{"kube-apiserver and etcd not found", apiserver.AssetsCommand, apiserver.RequireEnvVar}},
		{name: "missing, skip set", dir: empty, skip: true, want: "skip", wantIn: []string{apiserver.SkipEnvVar}},
		{name: "missing, required", dir: empty, require: true, want: "fatal", wantIn: []string{apiserver.RequireEnvVar, apiserver.AssetsCommand}},
		{name: "missing, required and skip set", dir: empty, require: true, skip: true, want: "fatal", wantIn: []string{apiserver.RequireEnvVar}},
		{name: "present, skip set: nothing started", dir: fakeBins, skip: true, want: "skip", wantIn: []string{apiserver.SkipEnvVar}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := func(k string, on bool) {
				if on {
					t.Setenv(k, "1")
				} else {
					t.Setenv(k, "")
				}
			}
			set(apiserver.RequireEnvVar, tc.require)
			set(apiserver.SkipEnvVar, tc.skip)
			outcome, msg := startForTest(t, apiserver.WithAssetsDir(tc.dir))
			require.Equal(t, tc.want, outcome, msg)
			for _, s := range tc.wantIn {
				require.Contains(t, msg, s)
			}
		})
	}
}
