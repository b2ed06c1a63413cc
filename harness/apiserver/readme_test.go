package apiserver_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// TestMyController is the README's "Integration tests in your own module"
// snippet, word for word (examples/tour's TestEveryREADMESnippetIsCode).
func TestMyController(t *testing.T) {
	env := apiserver.StartForTest(t) // real kube-apiserver + etcd, CAPI CRDs installed
	// env.Client knows core Kubernetes and CAPI v1beta2 types.
	var machines clusterv1.MachineList
	require.NoError(t, env.Client.List(t.Context(), &machines))
}
