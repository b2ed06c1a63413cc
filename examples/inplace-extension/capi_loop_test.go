package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
)

// TestClusterAPIDiscoversTheExtension registers the extension the way a
// user does, with an ExtensionConfig naming its HTTPS URL and CA bundle,
// and lets Cluster API's own core manager (its ExtensionConfig controller
// and real runtime client) discover it: the three in-place handlers appear
// in the ExtensionConfig's status with the timeouts and failure policies
// the extension announces.
func TestClusterAPIDiscoversTheExtension(t *testing.T) {
	env := apiserver.StartForTest(t)
	clusterapi.StartForTest(t, env, clusterapi.WithManagers(clusterapi.ManagerCore))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	ca, err := os.ReadFile(filepath.Join(dir, testcerts.CAFile))
	require.NoError(t, err)
	port := testcerts.FreePort(t)
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir, "-metrics-bind-address", "0", "-health-addr", "0",
		"-upgrader-image", "registry.example/upgrader:v1.36.3@" + testDigest, "-allow-unverified-bundles"}, &bytes.Buffer{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, o, deps{mgmt: env.Client, scheme: env.Scheme, recorder: events.NewFakeRecorder(100)})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig",
		"metadata": map[string]any{"name": "upgradekit"},
		"spec": map[string]any{"clientConfig": map[string]any{
			"url": "https://127.0.0.1:" + strconv.Itoa(port), "caBundle": ca,
		}},
	}}
	require.NoError(t, env.Client.Create(t.Context(), ec))
	type handler struct {
		Name           string
		Hook           string
		TimeoutSeconds int64
		FailurePolicy  string
	}
	var got []handler
	require.Eventually(t, func() bool {
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(ec), ec))
		hs, _, _ := unstructured.NestedSlice(ec.Object, "status", "handlers")
		got = got[:0]
		for _, h := range hs {
			m := h.(map[string]any)
			hook, _, _ := unstructured.NestedString(m, "requestHook", "hook")
			timeout, _, _ := unstructured.NestedInt64(m, "timeoutSeconds")
			policy, _, _ := unstructured.NestedString(m, "failurePolicy")
			got = append(got, handler{m["name"].(string), hook, timeout, policy})
		}
		return len(got) == 3
	}, 60*time.Second, 200*time.Millisecond, "Cluster API discovers the handlers: %v", ec.Object["status"])
	require.ElementsMatch(t, []handler{
		{"upgradekit-can-update-machine.upgradekit", "CanUpdateMachine", 10, "Fail"},
		{"upgradekit-can-update-machineset.upgradekit", "CanUpdateMachineSet", 10, "Fail"},
		{"upgradekit-update-machine.upgradekit", "UpdateMachine", 30, "Fail"},
	}, got)
}
