package preview_test

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// startServer starts upgradekit's extension as its Deployment runs it
// (extensionserver.Server.Start: the hooks and the gate report on one TLS
// port) on host, through run (a network namespace, or a plain call), and
// returns its URL and CA bundle once it listens.
func startServer(t *testing.T, host string, run func(func() error) error, c client.Client, opts extensionserver.Options) (*extensionserver.Server, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	opts.AllowMutableUpgraderImages, opts.AllowUnverifiedBundles = true, true
	opts.Host, opts.Port, opts.CertDir = host, port, dir
	srv, err := extensionserver.New(c, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(func() error { return srv.Start(ctx) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the extension server: %v", err)
		}
	})
	addr := net.JoinHostPort(host, strconv.Itoa(port))
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

func direct(f func() error) error { return f() }

// TestTheDeployedExtensionsGates: the preview reports what the deployed
// extension's gates would say now about the machines it updates in place,
// each gate's answer and a line per group, without taking a concurrency
// slot; an extension that serves no report leaves a note, and the
// prediction stands.
func TestTheDeployedExtensionsGates(t *testing.T) {
	env, snap, change := smallClusterChange(t)
	c, ctx := env.Client, t.Context()
	workers := []string{"md-a-abcde-0000", "md-a-abcde-0001"}
	leases := func() []coordinationv1.Lease {
		var l coordinationv1.LeaseList
		require.NoError(t, c.List(ctx, &l, client.InNamespace("default")))
		return l.Items
	}

	// A window open one minute a year, and a concurrency limit of one
	// whose slot another machine holds.
	yearly, err := strategy.MaintenanceWindow("new-year", "0 0 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	limit, err := gates.NewConcurrency(c, "default", 1, time.Hour)
	require.NoError(t, err)
	now := time.Now()
	require.True(t, limit.Check(ctx, strategy.GateRequest{Cluster: "default/small", Machine: "small-cp-elsewhere", Now: now}).Allowed())
	held := leases()
	require.Len(t, held, 1)

	_, u, ca := startServer(t, "127.0.0.1", direct, c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any",
		UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{yearly, limit}}})
	srv, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true})
	require.NoError(t, err)
	register(t, c, registration{name: "deployed", url: u, ca: ca, handlers: srv.Handlers()})
	d, err := preview.FindDeployed(ctx, c, "default")
	require.NoError(t, err)

	pr, err := preview.Predict(ctx, c, snap, change, d)
	require.NoError(t, err)
	t.Logf("prediction:\n%s", pr)
	for _, n := range workers {
		m, _ := pr.Machine(n)
		require.Equal(t, strategy.MethodInPlace, m.Method, m.Reason)
		require.Len(t, m.Gates, 2, "each gate's answer")
		require.Equal(t, "new-year", m.Gates[0].Gate)
		require.Equal(t, strategy.VerdictWait, m.Gates[0].Verdict)
		require.Contains(t, m.Gates[0].Reason, "outside the maintenance window")
		require.NotNil(t, m.Gates[0].RetryAfter)
		require.Equal(t, gatereport.Answer{Gate: "concurrency", Verdict: strategy.VerdictWait, Reason: "1 of 1 machines of cluster default/small are being updated already: small-cp-elsewhere",
			RetryAfter: m.Gates[1].RetryAfter}, m.Gates[1])
	}
	require.Regexp(t, `\n  gates now: Wait by new-year: outside the maintenance window "0 0 1 1 \*" .*; the gates hold 2 of 2 machines; asked again when Cluster API reaches each machine\n`, pr.String())
	require.Empty(t, cmpLeases(held, leases()), "the report took no slot and renewed none")
	js, err := json.Marshal(pr)
	require.NoError(t, err)
	require.Contains(t, string(js), `"gates":[{"gate":"new-year","verdict":"Wait"`)

	t.Run("in process, the extension's server reports its gates", func(t *testing.T) {
		local, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true,
			UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{limit}}})
		require.NoError(t, err)
		pr, err := preview.Predict(ctx, c, snap, change, local.Extension(), preview.WithGateReporter(local))
		require.NoError(t, err)
		require.Equal(t, preview.ModeInProcess, pr.Mode)
		require.Contains(t, pr.String(), "\n  gates now: Wait by concurrency: 1 of 1 machines of cluster default/small are being updated already: small-cp-elsewhere (retry after ")
		m, _ := pr.Machine(workers[0])
		require.Equal(t, strategy.VerdictWait, m.GateVerdict)

		// A free slot, which a Check would take: the report takes none.
		two, err := gates.NewConcurrency(c, "default", 2, time.Hour)
		require.NoError(t, err)
		local, err = extensionserver.New(c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true,
			UpdaterOptions: capi.UpdaterOptions{Gates: []strategy.Gate{two}}})
		require.NoError(t, err)
		pr, err = preview.Predict(ctx, c, snap, change, local.Extension(), preview.WithGateReporter(local))
		require.NoError(t, err)
		require.Contains(t, pr.String(), "\n  gates now: open (concurrency); asked again")
		m, _ = pr.Machine(workers[0])
		require.Equal(t, []gatereport.Answer{{Gate: "concurrency", Verdict: strategy.VerdictAllow, Reason: "1 of 2 slots of cluster default/small free"}}, m.Gates)
		require.Equal(t, strategy.VerdictAllow, m.GateVerdict)
		require.Empty(t, cmpLeases(held, leases()), "no slot taken")
		pr, err = preview.Predict(ctx, c, snap, change, local.Extension())
		require.NoError(t, err)
		require.NotContains(t, pr.String(), "gates now", "no reporter, no gates")
		require.Empty(t, cmpLeases(held, leases()))
	})

	t.Run("an extension without gates", func(t *testing.T) {
		_, u, ca := startServer(t, "127.0.0.1", direct, c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any"})
		unregister(t, c, "deployed")
		register(t, c, registration{name: "plain", url: u, ca: ca, handlers: srv.Handlers()})
		d, err := preview.FindDeployed(ctx, c, "default")
		require.NoError(t, err)
		pr, err := preview.Predict(ctx, c, snap, change, d)
		require.NoError(t, err)
		require.Contains(t, pr.String(), "\n  gates now: none configured on the extension; asked again")
		m, _ := pr.Machine(workers[0])
		require.Empty(t, m.Gates)
	})

	t.Run("another vendor's extension serves no report", func(t *testing.T) {
		u, ca := serve(t, versionOnly("other", true))
		unregister(t, c, "plain")
		// Its UpdateMachine handler is served elsewhere; the report is
		// asked where the UpdateMachine handler is.
		register(t, c, registration{name: "other", url: u, ca: ca, handlers: []server.ExtensionHandler{versionOnly("other", true), updateMachineOnly()}})
		d, err := preview.FindDeployed(ctx, c, "default")
		require.NoError(t, err)
		pr, err := preview.Predict(ctx, c, snap, change, d)
		require.NoError(t, err)
		m, _ := pr.Machine(workers[0])
		require.Equal(t, strategy.MethodInPlace, m.Method, "the prediction stands")
		require.Contains(t, pr.String(), `note: the gates were not asked: no gate report: ExtensionConfig "other": the extension serves no gate report (HTTP 404`)
		_, err = d.ReportGates(ctx, client.ObjectKey{Namespace: "default", Name: "small"}, workers)
		require.ErrorIs(t, err, preview.ErrNoGateReport)
		require.ErrorIs(t, err, gatereport.ErrNotServed)
	})
}

// unregister deletes an ExtensionConfig, if it is still there.
func unregister(t *testing.T, c client.Client, name string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(runtimev1.GroupVersion.String())
	u.SetKind("ExtensionConfig")
	u.SetName(name)
	require.NoError(t, client.IgnoreNotFound(c.Delete(t.Context(), u)))
}

// updateMachineOnly is an UpdateMachine handler that answers nothing useful:
// it is registered, not called.
func updateMachineOnly() server.ExtensionHandler {
	return server.ExtensionHandler{Hook: runtimehooksv1.UpdateMachine, Name: "update",
		HandlerFunc: func(_ context.Context, _ *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
			resp.Status = runtimehooksv1.ResponseStatusFailure
		}}
}

// cmpLeases lists what changed between two reads of the Leases.
func cmpLeases(before, after []coordinationv1.Lease) []string {
	var diff []string
	if len(before) != len(after) {
		return []string{"count " + strconv.Itoa(len(before)) + " -> " + strconv.Itoa(len(after))}
	}
	for i := range before {
		if before[i].ResourceVersion != after[i].ResourceVersion {
			diff = append(diff, before[i].Name+" written")
		}
	}
	return diff
}
