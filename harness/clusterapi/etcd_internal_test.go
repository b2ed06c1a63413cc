package clusterapi

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// TestAFailedEtcdJoinIsUndone: a member that exits as it starts (as one
// whose port was taken between freePorts and its bind would) fails its
// join, and the learner added for it is removed, so the cluster keeps one
// voting member and its quorum; the join tried again succeeds.
func TestAFailedEtcdJoinIsUndone(t *testing.T) {
	env := apiserver.StartForTest(t)
	ctx := t.Context()
	crt, key, err := newCA("undo-etcd")
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "undo-etcd"},
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}))
	bin := filepath.Join(env.AssetsDir, "etcd")
	e := &etcdClusters{bin: bin, dir: t.TempDir(), clusters: map[types.NamespacedName]*etcdCluster{}}
	t.Cleanup(func() { require.NoError(t, e.stop()) })
	p := &Provider{etcd: e}
	cluster := types.NamespacedName{Namespace: "default", Name: "undo"}
	names := func() []string {
		members, alarms, err := p.EtcdMembers(ctx, cluster)
		require.NoError(t, err)
		require.Empty(t, alarms)
		var out []string
		for _, m := range members {
			require.False(t, m.Learner, "%s is a learner", m.Name)
			out = append(out, m.Name)
		}
		return out
	}

	require.NoError(t, e.join(ctx, env.Client, cluster, "cp-0"))
	e.bin = "/bin/false"
	require.ErrorContains(t, e.join(ctx, env.Client, cluster, "cp-1"), "etcd member cp-1 exited")
	require.Equal(t, []string{"cp-0"}, names(), "the learner added for cp-1 is removed")
	require.Nil(t, e.member(cluster, "cp-1"))

	e.bin = bin
	require.NoError(t, e.join(ctx, env.Client, cluster, "cp-1"))
	require.ElementsMatch(t, []string{"cp-0", "cp-1"}, names(), "tried again, cp-1 joins and is promoted")
}
