package tour_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/examples/tour"
	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// machine is a machine as it runs: named by its MachineSet, with the
// providerID and instance ID its provider filled in.
func machine(name, version, audit, ami, providerID, instanceID string) diff.State {
	infra := map[string]any{"ami": map[string]any{"id": ami}, "instanceType": "m5.large"}
	if instanceID != "" {
		infra["instanceID"] = instanceID
	}
	return diff.State{
		Machine: &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: clusterv1.MachineSpec{
			ClusterName: "prod", Version: version, ProviderID: providerID,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: name},
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: name}},
		}},
		Bootstrap: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
			Files: []bootstrapv1.File{{Path: "/etc/kubernetes/audit.yaml", Content: audit}},
		}},
		Infrastructure: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine",
			"metadata": map[string]any{"name": name}, "spec": infra,
		}},
	}
}

// running is the machine we have; desired is the one we want, built from
// the new templates: other names, nothing a provider assigns.
func running(version, audit, ami string) diff.State {
	return machine("prod-md-0-7c9f4-x2kq", version, audit, ami, "aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0")
}

func desired(version, audit, ami string) diff.State {
	return machine("prod-md-0-v2", version, audit, ami, "", "")
}

func ExampleWhatChanged() {
	_, patch, err := tour.WhatChanged(
		running("v1.35.4", "kind: Policy\nrules: []", "ami-0aaa"),
		desired("v1.36.1", "kind: Policy\nrules: [{level: Metadata}]", "ami-0bbb"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(patch))
	// Output:
	// machine.spec.version: replace "v1.35.4" -> "v1.36.1" (KubernetesVersion)
	// bootstrap.spec.files[path=/etc/kubernetes/audit.yaml].content: replace <redacted sha256:848befb3, 22 bytes> -> <redacted sha256:b1a67790, 39 bytes> (Files)
	// infrastructure.spec.ami.id: replace "ami-0aaa" -> "ami-0bbb" (InfrastructureImage)
	// [{"op":"replace","path":"/spec/files","value":[{"content":"kind: Policy\nrules: [{level: Metadata}]","path":"/etc/kubernetes/audit.yaml"}]}]
}

// TestWhatChangedDecidesAsClusterAPI: on a running machine (providerID and
// instance ID set, named by its MachineSet) and one built from the new
// templates, the tour's first step finds only what Cluster API finds, so
// a version upgrade is decided in place; the same machines diffed without
// a preset are decided Replace, and the decision says why.
func TestWhatChangedDecidesAsClusterAPI(t *testing.T) {
	current := running("v1.35.4", "kind: Policy", "ami-0aaa")
	want := desired("v1.36.1", "kind: Policy", "ami-0aaa")
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	decider := strategy.Updaters(kubeadm)

	cs, _, err := tour.WhatChanged(current, want)
	require.NoError(t, err)
	d, err := decider.Decide(t.Context(), cs)
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeInPlace, d.Outcome, d.Message)
	require.NoError(t, d.Warning)

	raw, err := diff.Machines(current, want)
	require.NoError(t, err)
	d, err = decider.Decide(t.Context(), raw)
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeReplace, d.Outcome)
	require.ErrorIs(t, d.Warning, strategy.ErrUnsuitableDiff)
	require.Contains(t, d.Message, "diff.InPlaceProposal()")
}

func ExampleWouldDrift() {
	template := map[string]any{"spec": map[string]any{"expireAfter": "720h0m0s", "kubelet": map[string]any{"maxPods": 110}}}
	proposed := map[string]any{"spec": map[string]any{"expireAfter": "336h0m0s", "kubelet": map[string]any{"maxPods": 110}}}
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}}
	if err := tour.WouldDrift(context.Background(), nodes, template, proposed); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 2 of 2 nodes would drift
	// node-a NodePoolDrifted spec.expireAfter
	// node-b NodePoolDrifted spec.expireAfter
}

// catalog is what `aws ec2 describe-images` and the EKS SSM parameters
// say, in amiselect's catalog format.
const catalog = `{
  "Images": [
    {"ImageId": "ami-0aaa", "Name": "amazon-eks-node-al2023-x86_64-standard-1.36-v20260501", "Architecture": "x86_64",
     "State": "available", "CreationDate": "2026-05-01T00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"},
    {"ImageId": "ami-0bbb", "Name": "amazon-eks-node-al2023-x86_64-standard-1.36-v20260520", "Architecture": "x86_64",
     "State": "available", "CreationDate": "2026-05-20T00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"}
  ],
  "Parameters": [
    {"Name": "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/recommended/image_id", "Value": "ami-0bbb"}
  ]
}`

func ExampleNodeImage() {
	src, err := amiselect.LoadCatalog(strings.NewReader(catalog))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tour.NodeImage(context.Background(), src, "ami-0aaa"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// a new amd64 node gets ami-0bbb
	// drifted: true AMIDrift: node runs ami-0aaa, a new amd64 node gets ami-0bbb (amazon-eks-node-al2023-x86_64-standard-1.36-v20260520, created 2026-05-20T00:00:00Z)
}

func ExampleUpgradeNode() {
	cs := k8sfake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-0"}})
	pod, err := tour.UpgradeNode(context.Background(), cs, "cp-0", "registry.example/upgradekit-upgrader:v1.36.3")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pod.Namespace, pod.Spec.NodeName)
	var steps []string
	for _, c := range pod.Spec.InitContainers {
		steps = append(steps, c.Name)
	}
	fmt.Println(strings.Join(steps, " "))
	node, _ := cs.CoreV1().Nodes().Get(context.Background(), "cp-0", metav1.GetOptions{})
	fmt.Println("cordoned:", node.Spec.Unschedulable)
	// Output:
	// upgradekit-system cp-0
	// upgradekit-stage bundle etcd-snapshot containerd-backup containerd cni-plugins-backup cni-plugins kubeadm-binary-backup kubeadm-binary kubeadm-config kubeadm-upgrade-backup kubeadm-upgrade kubectl-binary-backup kubectl-binary kubelet-backup kubelet verify
	// cordoned: true
}

func ExamplePlanRollout() {
	ctx := context.Background()
	sim, err := simulator.NewSimulator(simulator.NewCluster("prod").ControlPlane(3, "v1.35.4").MachineDeployment("md-0", 4, "v1.35.4"), simulator.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	cluster, err := sim.Input(ctx, simulator.Rollout{ToVersion: "v1.36.2"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tour.PlanRollout(ctx, cluster); err != nil {
		fmt.Println(err)
	}
	// Output:
	// BATCH     MACHINE               GROUP          METHOD   VERSION             REASON
	// 1         prod-control-plane-0  control-plane  InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 2         prod-control-plane-1  control-plane  InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 3         prod-control-plane-2  control-plane  InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 4 canary  prod-md-0-0           md-0           InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 5         prod-md-0-1           md-0           InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 6         prod-md-0-2           md-0           InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// 7         prod-md-0-3           md-0           InPlace  v1.35.4 -> v1.36.2  in place by kubeadm: machine.spec.version
	// health gate after batch 1, 2, 3, 4
}

func ExampleSimulate() {
	if err := tour.Simulate(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// batches: 8 failed: 0 runner restarts: 1
	// violations: []
}

// TestAddExtension adds the extension to a manager on a real API server,
// starts the manager, and asks the served extension, over TLS as Cluster
// API does, which hooks it has.
func TestAddExtension(t *testing.T) {
	env := apiserver.StartForTest(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	require.NoError(t, tour.AddExtension(mgr, extensionserver.Options{UpgraderImage: "registry.example/upgradekit-upgrader@sha256:" + strings.Repeat("a", 64),
		AllowUnverifiedBundles: true, Host: "127.0.0.1", Port: port, CertDir: dir}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	body := `{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"DiscoveryRequest"}`
	var disc struct {
		Status   string `json:"status"`
		Handlers []struct {
			Name        string `json:"name"`
			RequestHook struct {
				Hook string `json:"hook"`
			} `json:"requestHook"`
		} `json:"handlers"`
	}
	require.Eventually(t, func() bool {
		r, err := hc.Post("https://127.0.0.1:"+strconv.Itoa(port)+"/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery", "application/json", strings.NewReader(body))
		if err != nil {
			return false
		}
		defer r.Body.Close()
		return r.StatusCode == http.StatusOK && json.NewDecoder(r.Body).Decode(&disc) == nil
	}, 30*time.Second, 100*time.Millisecond, "the manager serves the extension")
	require.Equal(t, "Success", disc.Status)
	hooks := map[string]string{}
	for _, h := range disc.Handlers {
		hooks[h.Name] = h.RequestHook.Hook
	}
	require.Equal(t, map[string]string{
		"upgradekit-can-update-machine":    "CanUpdateMachine",
		"upgradekit-can-update-machineset": "CanUpdateMachineSet",
		"upgradekit-update-machine":        "UpdateMachine",
	}, hooks)
}
