//go:build realnode && linux

package nodetest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/fake/nodetest"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// The versions the real-node scenarios run: the newest minor Cluster API
// v1.14 supports and the one after it.
const (
	fromVersion = "v1.36.3"
	toVersion   = "v1.37.2"
)

func assets(t *testing.T, version string) nodetest.Assets {
	t.Helper()
	a, err := nodetest.AssetsFromEnv(version)
	require.NoError(t, err, "make e2e-node sets %s (hack/node-assets.sh VERSION builds each)", nodetest.AssetsEnvVar)
	return a
}

// cluster is a network with one control plane node at from, images of
// both versions imported (air-gapped: nothing can be pulled).
type cluster struct {
	net      *nodetest.Network
	cp       *nodetest.Node
	from, to nodetest.Assets
	upgrader string
}

func newCluster(ctx context.Context, t *testing.T) *cluster {
	t.Helper()
	require.Zero(t, os.Geteuid(), "real nodes need root")
	c := &cluster{from: assets(t, fromVersion), to: assets(t, toVersion)}
	var err error
	c.upgrader, err = nodetest.BuildUpgrader(ctx, t.TempDir())
	require.NoError(t, err)
	c.net, err = nodetest.NewNetwork(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.net.Close(context.Background())) })
	// Only the running version's images: the target version's come with
	// the bundle (the plan's images step), as on an air-gapped node.
	c.cp = startNode(ctx, t, c.net, "cp1", c.from, c.from.ControlPlaneImages())
	start := time.Now()
	err = c.cp.KubeadmInit(ctx, nodetest.KubeadmOptions{})
	if err != nil {
		t.Logf("kubelet log:\n%s", c.cp.Log("kubelet", 6000))
	}
	require.NoError(t, err)
	t.Logf("kubeadm init %s: Ready in %s", c.from.Version, time.Since(start).Round(time.Second))
	return c
}

func startNode(ctx context.Context, t *testing.T, net *nodetest.Network, name string, a nodetest.Assets, images []nodetest.Image) *nodetest.Node {
	t.Helper()
	n, err := nodetest.StartNode(ctx, nodetest.NodeOptions{Name: name, Assets: a, Network: net, Images: images, Log: testr.New(t)})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s kubelet log:\n%s", name, n.Log("kubelet", 4000))
			t.Logf("%s containerd log:\n%s", name, n.Log("containerd", 2000))
		}
		require.NoError(t, n.Close(context.Background()))
	})
	return n
}

func stepTimes(t *testing.T, journalDir, plan string) string {
	t.Helper()
	j, err := nodeexec.ReadJournal(filepath.Join(journalDir, nodeexec.JournalFileName(plan)))
	require.NoError(t, err)
	var b strings.Builder
	var total time.Duration
	for _, s := range j.Steps {
		d := s.Finished.Sub(s.Started).Round(100 * time.Millisecond)
		total += d
		b.WriteString(s.Name + "=" + d.String() + " ")
	}
	return b.String() + "total=" + total.String()
}

// TestFirstControlPlaneUpgrade: the project's kubeadm plan, run by the
// project's upgrader, takes a real single-node kubeadm control plane
// (stacked etcd) from v1.36 to v1.37.
func TestFirstControlPlaneUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := newCluster(ctx, t)
	cp := c.cp
	_, err := cp.Kubectl(ctx, "create", "configmap", "written-before", "--from-literal=k=v")
	require.NoError(t, err)

	require.NoError(t, cp.StageBundle(c.to, nodetest.StageOptions{Etcdctl: true, Containerd: true, CNIPlugins: true, Images: c.to.ControlPlaneImages()}))
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: cp.Name, Role: kubeadm.RoleFirstControlPlane, FromVersion: c.from.Version, ToVersion: c.to.Version,
		IgnorePreflightErrors: []string{"SystemVerification"}, ImportImages: true, RollbackOnFailure: true})
	require.NoError(t, err)
	containerdStarts, kubeletStarts := cp.Starts("containerd"), cp.Starts("kubelet")
	journal := t.TempDir()
	start := time.Now()
	run, err := cp.RunUpgrader(ctx, c.upgrader, "run", plan, journal)
	require.NoError(t, err)
	require.Zero(t, run.ExitCode, "upgrader run:\n%s", run.Output)
	t.Logf("upgrade %s -> %s in %s: %s", c.from.Version, c.to.Version, time.Since(start).Round(time.Second), stepTimes(t, journal, plan.Name))

	// Everything at the new version, for real.
	out, err := cp.Run(ctx, "kubeadm", "version", "-o", "short")
	require.NoError(t, err)
	require.Equal(t, c.to.Version, strings.TrimSpace(out))
	out, err = cp.Run(ctx, "kubelet", "--version")
	require.NoError(t, err)
	require.Equal(t, "Kubernetes "+c.to.Version, strings.TrimSpace(out))
	out, err = cp.Run(ctx, "kubectl", "version", "--client")
	require.NoError(t, err)
	require.Contains(t, out, "Client Version: "+c.to.Version)
	require.NoError(t, cp.WaitReady(ctx, cp, 3*time.Minute))
	out, err = cp.Kubectl(ctx, "get", "node", cp.Name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
	require.NoError(t, err)
	require.Equal(t, c.to.Version, out)
	for pod, image := range map[string]string{
		"kube-apiserver":          "registry.k8s.io/kube-apiserver:" + c.to.Version,
		"kube-controller-manager": "registry.k8s.io/kube-controller-manager:" + c.to.Version,
		"kube-scheduler":          "registry.k8s.io/kube-scheduler:" + c.to.Version,
		"etcd":                    "registry.k8s.io/etcd:" + c.to.EtcdImageTag,
	} {
		out, err = cp.Kubectl(ctx, "-n", "kube-system", "get", "pod", pod+"-"+cp.Name, "-o", "jsonpath={.spec.containers[0].image}")
		require.NoError(t, err)
		require.Equal(t, image, out, "static pod %s", pod)
	}
	out, err = cp.Kubectl(ctx, "get", "configmap", "written-before", "-o", "jsonpath={.data.k}")
	require.NoError(t, err)
	require.Equal(t, "v", out, "an object written before the upgrade is still there")
	require.Greater(t, cp.Starts("containerd"), containerdStarts, "the containerd step restarted containerd")
	require.Greater(t, cp.Starts("kubelet"), kubeletStarts, "the kubelet step restarted the kubelet")

	// The snapshot restores, and holds what was written before.
	snap := kubeadm.DefaultBackupRoot + "/" + plan.Name + "/etcd-snapshot.db"
	_, err = cp.Run(ctx, c.from.Bin("etcdutl"), "snapshot", "restore", snap, "--data-dir", "/var/lib/upgradekit-node/restored")
	require.NoError(t, err)
	out, err = cp.Run(ctx, "sh", "-c", `set -eu
"$1" --data-dir /var/lib/upgradekit-node/restored --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-cluster default=http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 >/dev/null 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true' EXIT
i=0
until "$2" --endpoints=http://127.0.0.1:23790 get /registry/configmaps/default/written-before --keys-only 2>/dev/null | grep -q written-before; do
  i=$((i+1)); [ $i -lt 60 ] || { echo "restored etcd does not answer"; exit 1; }
  sleep 1
done
echo restored`, "sh", c.from.Bin("etcd"), c.from.Bin("etcdctl"))
	require.NoError(t, err)
	require.Contains(t, out, "restored")
}
