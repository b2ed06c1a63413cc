package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// TestServerLimitFlags: -max-request-bytes, -max-concurrent-requests and
// -read-timeout default to the library's limits, are refused when
// negative (naming the flags), and bind the server: a body past
// -max-request-bytes is answered 413.
func TestServerLimitFlags(t *testing.T) {
	o, err := parseFlags([]string{"-no-update-machine"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(extensionserver.DefaultMaxRequestBytes), o.maxRequestBytes)
	require.Equal(t, extensionserver.DefaultMaxConcurrentRequests, o.maxConcurrentRequests)
	require.Equal(t, extensionserver.DefaultReadTimeout, o.readTimeout)
	for _, args := range [][]string{{"-max-request-bytes", "-1"}, {"-max-concurrent-requests", "-1"}, {"-read-timeout", "-1s"}} {
		_, err := parseFlags(append([]string{"-no-update-machine"}, args...), io.Discard)
		require.ErrorIs(t, err, errInvalidFlag, args)
		require.ErrorContains(t, err, "--max-request-bytes/--max-concurrent-requests/--read-timeout: ", args)
	}

	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	o, err = parseFlags([]string{"-no-update-machine", "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir,
		"-metrics-bind-address", "0", "-health-addr", "0", "-max-request-bytes", "1000"}, io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, deps{}) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	hooks := newHookClient(t, port, pool)
	for size, want := range map[int]int{900: http.StatusOK, 2000: http.StatusRequestEntityTooLarge} {
		body := `{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"DiscoveryRequest","x":"` + strings.Repeat(" ", size) + `"}`
		r, err := hooks.http.Post(hooks.base+"/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery", "application/json", bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, want, r.StatusCode, "a %d-byte body", len(body))
	}
}

// TestProfilerAddress: -profiler-address is off by default; set, Go's
// profiles are served there (as Cluster API's managers' --profiler-address)
// until the extension stops; an address in use is an error naming it.
func TestProfilerAddress(t *testing.T) {
	o, err := parseFlags([]string{"-no-update-machine"}, io.Discard)
	require.NoError(t, err)
	require.Empty(t, o.profilerAddr, "off by default")

	dir := t.TempDir()
	testcerts.Write(t, dir)
	prof := "127.0.0.1:" + strconv.Itoa(testcerts.FreePort(t))
	o, err = parseFlags([]string{"-no-update-machine", "-host", "127.0.0.1", "-port", strconv.Itoa(testcerts.FreePort(t)), "-cert-dir", dir,
		"-metrics-bind-address", "0", "-health-addr", "0", "-profiler-address", prof}, io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, deps{}) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	var b []byte
	waitUntil(t, 2*time.Minute, "the profiles served", func() (bool, string, error) {
		r, err := http.Get("http://" + prof + "/debug/pprof/heap?debug=1")
		if err != nil {
			return false, err.Error(), nil
		}
		defer r.Body.Close()
		b, err = io.ReadAll(r.Body)
		return r.StatusCode == http.StatusOK, r.Status, err
	})
	require.Contains(t, string(b), "heap profile")

	// The address is taken now: a second extension refuses it.
	o2, err := parseFlags([]string{"-no-update-machine", "-host", "127.0.0.1", "-port", strconv.Itoa(testcerts.FreePort(t)), "-cert-dir", dir,
		"-metrics-bind-address", "0", "-health-addr", "0", "-profiler-address", prof}, io.Discard)
	require.NoError(t, err)
	require.ErrorContains(t, serve(t.Context(), o2, deps{}), "--profiler-address: ")
}
