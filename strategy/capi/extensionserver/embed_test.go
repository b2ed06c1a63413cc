package extensionserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestEmbedInAManager embeds the extension in a controller-runtime manager
// as a provider's main would (New with the manager's client, mgr.Add),
// against a real API server, and calls it over HTTPS as Cluster API does:
// discovery lists the three hooks with their timeouts, a version bump is
// accepted with its patch, and an UpdateMachine Cluster API did not ask for
// (the live Machine has no update-in-progress annotation) is refused
// before anything is done.
func TestEmbedInAManager(t *testing.T) {
	env := apiserver.StartForTest(t)
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	ext, err := extensionserver.New(mgr.GetClient(), extensionserver.Options{
		UpgraderImage:          "registry.example/upgradekit-upgrader@" + digestA,
		AllowUnverifiedBundles: true,
		Host:                   "127.0.0.1", Port: port, CertDir: dir,
		UpdaterOptions: capi.UpdaterOptions{
			EventRecorder: mgr.GetEventRecorder("upgradekit"),
			Metrics:       metrics(t),
		},
	})
	require.NoError(t, err)
	require.NoError(t, mgr.Add(ext))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	catalog := runtimecatalog.New()
	require.NoError(t, runtimehooksv1.AddToCatalog(catalog))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	require.Eventually(t, func() bool {
		r, err := hc.Get(base + "/")
		if err == nil {
			r.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the extension serves")
	post := func(hook runtimecatalog.Hook, name string, req, resp any) {
		t.Helper()
		gvh, err := catalog.GroupVersionHook(hook)
		require.NoError(t, err)
		body, err := json.Marshal(req)
		require.NoError(t, err)
		r, err := hc.Post(base+runtimecatalog.GVHToPath(gvh, name), "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		defer r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode)
		require.NoError(t, json.NewDecoder(r.Body).Decode(resp))
	}
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: kind}
	}

	var disc runtimehooksv1.DiscoveryResponse
	post(runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{TypeMeta: typeMeta("DiscoveryRequest")}, &disc)
	timeouts := map[string]int32{}
	for _, h := range disc.Handlers {
		timeouts[h.Name] = *h.TimeoutSeconds
	}
	require.Equal(t, map[string]int32{
		"upgradekit-can-update-machine":    int32(capi.HandlerTimeoutCanUpdate / time.Second),
		"upgradekit-can-update-machineset": int32(capi.HandlerTimeoutCanUpdate / time.Second),
		"upgradekit-update-machine":        int32(capi.HandlerTimeoutUpdateMachine / time.Second),
	}, timeouts)

	machine := func(v string) clusterv1.Machine {
		return clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default"}, Spec: clusterv1.MachineSpec{
			ClusterName: "demo", Version: v, ProviderID: "test://m",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("m-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachine", Name: "m"},
		}}
	}
	// The worker CanUpdateMachine asks about, as the management cluster
	// has it: the skew check reads it through the manager's client.
	live := machine("v1.35.4")
	require.NoError(t, env.Client.Create(ctx, &live))
	// Its cluster's kubeconfig secret, as Cluster API writes it: without
	// it the workload cluster is out of reach and the update is declined.
	kubeconfig, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(ctx, kubeconfig))
	infra := runtime.RawExtension{Raw: []byte(`{"kind":"TestMachine","spec":{"image":"node:v1"}}`)}
	var can runtimehooksv1.CanUpdateMachineResponse
	post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: typeMeta("CanUpdateMachineRequest"),
		Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.35.4"), InfrastructureMachine: infra},
		Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.36.1"), InfrastructureMachine: infra},
	}, &can)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, can.Status, can.Message)
	require.JSONEq(t, `[{"op":"replace","path":"/spec/version","value":"v1.36.1"}]`, string(can.MachinePatch.Patch))

	var up runtimehooksv1.UpdateMachineResponse
	post(runtimehooksv1.UpdateMachine, "upgradekit-update-machine", &runtimehooksv1.UpdateMachineRequest{
		TypeMeta: typeMeta("UpdateMachineRequest"),
		Desired:  runtimehooksv1.UpdateMachineRequestObjects{Machine: machine("v1.36.1"), InfrastructureMachine: infra},
	}, &up)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, up.Status)
	require.Equal(t, "in-place update failed: "+observe.FailureRequestMismatch+
		": the request does not match a Machine that Cluster API is updating in place; the extension's log says why", up.Message)
}
