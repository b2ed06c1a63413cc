package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// startServed starts upgradekit's extension, configured by opts, as its
// Deployment runs it (extensionserver.Server.Start: the hooks and the gate
// report on one TLS port, on loopback) and returns it with its URL and CA
// bundle once it listens.
func startServed(t *testing.T, c client.Client, opts extensionserver.Options) (*extensionserver.Server, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	opts.AllowMutableUpgraderImages, opts.AllowUnverifiedBundles = true, true
	opts.Host, opts.Port, opts.CertDir = "127.0.0.1", port, dir
	srv, err := extensionserver.New(c, opts)
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the extension: %v", err)
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the extension listens")
	ca, err := os.ReadFile(filepath.Join(dir, testcerts.CAFile))
	require.NoError(t, err)
	return srv, "https://" + addr, ca
}

// TestPreviewReportsTheDeployedGates: the deployed extension runs as its
// Deployment does (extensionserver.Server.Start: hooks and gate report on
// one TLS port) with a maintenance window that is closed and a
// concurrency limit; the plugin shows what those gates say now about the
// machines updated in place, and takes no concurrency slot.
func TestPreviewReportsTheDeployedGates(t *testing.T) {
	env, file := demoCluster(t)
	c := commandClient(t, env)
	ctx := t.Context()

	window, err := strategy.MaintenanceWindow("maintenance-window", "0 2 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	limit, err := gates.NewConcurrency(c, "default", 2, time.Hour)
	require.NoError(t, err)
	registerServed(t, c, "upgradekit", extensionserver.Options{UpgraderImage: "registry.example/upgrader:any",
		UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{window, limit}}})

	out, errOut, code := runWith(t, c, "", "--cluster", "demo", "-f", file)
	require.Equal(t, exitBlocked, code, "md-2's node cannot be drained: %s%s", out, errOut)
	require.Contains(t, out, "answered by the deployed extension (ExtensionConfig upgradekit)")
	require.Regexp(t, `MachineDeployment md-0 \(CanUpdateMachineSet\): .*\n(  .*\n)*  gates now: Wait by maintenance-window: outside the maintenance window "0 2 1 1 \*" \(1m0s, UTC\); the next opens \d{4}-01-01 02:00 UTC \(retry after \d+h\d+m\d+s\); the gates hold 1 of 1 machines; asked again when Cluster API reaches each machine\n`, out)

	out, _, _ = runWith(t, c, "", "--cluster", "demo", "-f", file, "-ojson")
	var pr struct {
		Machines []struct {
			Name   string `json:"name"`
			Method string `json:"method"`
			Gates  []struct {
				Gate       string `json:"gate"`
				Verdict    string `json:"verdict"`
				Reason     string `json:"reason"`
				RetryAfter string `json:"retryAfter"`
			} `json:"gates"`
		} `json:"machines"`
		Groups []struct {
			Name  string `json:"name"`
			Gates string `json:"gates"`
		} `json:"groups"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &pr))
	asked := 0
	for _, m := range pr.Machines {
		if m.Method != string(strategy.MethodInPlace) {
			require.Empty(t, m.Gates, "only machines updated in place are gated: %s", m.Name)
			continue
		}
		asked++
		require.Len(t, m.Gates, 2, m.Name)
		require.Equal(t, "maintenance-window", m.Gates[0].Gate)
		require.Equal(t, "Wait", m.Gates[0].Verdict)
		_, err := time.ParseDuration(m.Gates[0].RetryAfter)
		require.NoError(t, err, "a duration as a string")
		require.Equal(t, "concurrency", m.Gates[1].Gate)
		require.Equal(t, "Allow", m.Gates[1].Verdict)
		require.Equal(t, "2 of 2 slots of cluster default/demo free", m.Gates[1].Reason)
	}
	require.Positive(t, asked)

	var leases coordinationv1.LeaseList
	require.NoError(t, c.List(ctx, &leases, client.InNamespace("default")))
	require.Empty(t, leases.Items, "the preview took no concurrency slot")

	// In process, the extension's gate flags give the gates it will ask;
	// the deployed extension's own gates are not asked then.
	out, errOut, code = runWith(t, c, "", "--cluster", "demo", "-f", file, "--mode", "in-process", "--maintenance-window", "0 3 2 1 *", "--maintenance-duration", "2m")
	require.Equal(t, exitBlocked, code, errOut)
	require.Contains(t, out, "answered in-process")
	require.Regexp(t, `\n  gates now: Wait by maintenance-window: outside the maintenance window "0 3 2 1 \*" \(2m0s, UTC\); .*; the gates hold 1 of 1 machines; asked again when Cluster API reaches each machine\n`, out)
	out, _, _ = runWith(t, c, "", "--cluster", "demo", "-f", file, "--mode", "in-process")
	require.NotContains(t, out, "gates now", "no gate flags, no gates in process")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--soak", "-1m"}, "--soak -1m0s: must not be negative"},
		{[]string{"--maintenance-window", "0 2 * *"}, "--maintenance-window/--maintenance-duration/--maintenance-timezone: "},
		{[]string{"--no-update-machine", "--blocking-pod-selector", "app=backup"}, "which --no-update-machine does not serve"},
	} {
		_, errOut, code := runWith(t, c, "", append([]string{"--cluster", "demo", "-f", file, "--mode", "in-process"}, tc.args...)...)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, tc.want)
	}
}
