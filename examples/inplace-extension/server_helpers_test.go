package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// newServer builds the extension the binary would from o and d; a nil
// management reader (tests that never reach the management cluster) is an
// empty fake client's.
func newServer(t *testing.T, o options, d deps) *extensionserver.Server {
	t.Helper()
	if d.mgmt == nil && !o.noUpdate {
		d.mgmt = fakeclient.NewClientBuilder().Build()
	}
	if d.metrics == nil {
		m, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
		require.NoError(t, err)
		d.metrics = m
	}
	s, err := extensionserver.New(d.mgmt, o.serverOptions(d))
	require.NoError(t, err)
	return s
}

// reachableMgmt is a fake management cluster holding objs and the
// kubeconfig secret of cluster default/demo, which reaches a real API
// server (envtest): a workload cluster CanUpdate* can reach.
func reachableMgmt(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	env := apiserver.StartForTest(t)
	kubeconfig, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	return fakeclient.NewClientBuilder().WithScheme(mgmtScheme(t)).WithObjects(append(objs, kubeconfig)...).Build()
}

// handlers are the hook handlers the binary serves for o and d.
func handlers(t *testing.T, o options, d deps) []server.ExtensionHandler {
	return newServer(t, o, d).Handlers()
}

// podOptionsOf are the options of every upgrader pod the binary creates.
func podOptionsOf(t *testing.T, o options) []nodepod.Option {
	return newServer(t, o, deps{}).PodOptions()
}

// planConfigOf adjusts cfg as the binary's UpdateMachine does.
func planConfigOf(t *testing.T, o options, cfg *kubeadm.Config) {
	newServer(t, o, deps{}).PlanConfig(cfg)
}
