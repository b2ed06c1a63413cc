package diff_test

import (
	"fmt"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// Diff a machine we have against the machine we want, then build the JSON
// patch CAPI's CanUpdateMachine response carries for the bootstrap config.
func ExampleMachines() {
	current := diff.State{
		Machine: &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.35.4"}},
		Bootstrap: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
			Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "hello"}},
		}},
	}
	desired := diff.State{
		Machine: &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.36.3"}},
		Bootstrap: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
			Files: []bootstrapv1.File{
				{Path: "/etc/motd", Content: "hello"},
				{Path: "/etc/kubernetes/audit.yaml", Content: "kind: Policy"},
			},
		}},
	}
	cs, err := diff.Machines(current, desired)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cs)
	patch, _ := cs.JSONPatch(diff.ObjectBootstrap)
	fmt.Println(string(patch))
	// Output:
	// machine.spec.version: replace "v1.35.4" -> "v1.36.3" (KubernetesVersion)
	// bootstrap.spec.files[path=/etc/kubernetes/audit.yaml]: add {"content":"<redacted sha256:9178b5f2, 12 bytes>","path":"/etc/kubernetes/audit.yaml"} (Files)
	// [{"op":"replace","path":"/spec/files","value":[{"content":"hello","path":"/etc/motd"},{"content":"kind: Policy","path":"/etc/kubernetes/audit.yaml"}]}]
}

// Compile options once and reuse the Differ on hot paths; CAPI's
// KubeadmControlPlane rules make an init configuration compare as a join
// configuration and ignore what KCP updates in place.
func ExampleNew() {
	d, err := diff.New(diff.KubeadmControlPlane("v1.36.1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	firstControlPlane := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "cp"}},
		ClusterConfiguration: bootstrapv1.ClusterConfiguration{
			ControlPlaneEndpoint: "10.0.0.1:6443", // ignored: KCP updates it in place
		},
	}}
	kcpSpec := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "cp"}},
	}}
	cs, _ := d.Objects(diff.ObjectBootstrap, firstControlPlane, kcpSpec)
	fmt.Println(cs)
	// Output: no changes
}

// Register where a provider keeps its image so strategies can tell an
// image change from the rest.
func ExampleCategorize() {
	cur := map[string]any{"kind": "AcmeMachine", "spec": map[string]any{"osImage": "ubuntu-2204-v1", "cpu": 4}}
	des := map[string]any{"kind": "AcmeMachine", "spec": map[string]any{"osImage": "ubuntu-2404-v1", "cpu": 8}}
	cs, _ := diff.Objects(diff.ObjectInfrastructure, cur, des,
		diff.Categorize(diff.CategoryImage, "infrastructure(AcmeMachine).spec.osImage"),
		diff.Categorize(diff.CategoryInstanceType, "infrastructure(AcmeMachine).spec.cpu"))
	fmt.Println(cs)
	// Output:
	// infrastructure.spec.cpu: replace 4 -> 8 (InfrastructureSize)
	// infrastructure.spec.osImage: replace "ubuntu-2204-v1" -> "ubuntu-2404-v1" (InfrastructureImage)
}
