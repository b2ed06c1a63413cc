package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

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
		m, err := capi.NewMetrics(prometheus.NewRegistry())
		require.NoError(t, err)
		d.metrics = m
	}
	s, err := extensionserver.New(d.mgmt, o.serverOptions(d)...)
	require.NoError(t, err)
	return s
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
