package diff_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// fixture returns a realistic worker machine: a Machine, its KubeadmConfig
// (several files, commands, users, kubelet args) and an AWSMachine.
func fixture() (*clusterv1.Machine, *bootstrapv1.KubeadmConfig, *unstructured.Unstructured) {
	m := &clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "md-0-abcde", Namespace: "default",
			Labels:      map[string]string{clusterv1.ClusterNameLabel: "demo", "pool": "md-0"},
			Annotations: map[string]string{"owner": "platform"},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: "demo",
			Version:     "v1.30.4",
			ProviderID:  "aws:///us-east-1a/i-0123456789",
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "md-0-abcde",
			}, DataSecretName: ptr.To("md-0-abcde")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: "md-0-abcde",
			},
			FailureDomain:   "us-east-1a",
			MinReadySeconds: ptr.To[int32](10),
			ReadinessGates:  []clusterv1.MachineReadinessGate{{ConditionType: "NetworkReady"}},
			Deletion:        clusterv1.MachineDeletionSpec{NodeDrainTimeoutSeconds: ptr.To[int32](600)},
			Taints:          []clusterv1.MachineTaint{{Key: "dedicated", Value: "infra", Effect: "NoSchedule", Propagation: clusterv1.MachineTaintPropagationAlways}},
		},
	}
	cfg := &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: "bootstrap.cluster.x-k8s.io/v1beta2", Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: "md-0-abcde", Namespace: "default"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{
				NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					Name: "{{ ds.meta_data.local_hostname }}",
					KubeletExtraArgs: []bootstrapv1.Arg{
						{Name: "cloud-provider", Value: ptr.To("external")},
						{Name: "node-labels", Value: ptr.To("pool=md-0")},
						{Name: "max-pods", Value: ptr.To("110")},
					},
				},
			},
			Files: []bootstrapv1.File{
				{Path: "/etc/motd", Content: "managed by upgradekit", Permissions: "0644", Owner: "root:root"},
				{Path: "/etc/kubernetes/audit.yaml", Content: "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n", Permissions: "0600"},
				{Path: "/etc/containerd/config.d/mirror.toml", Content: "[plugins]\n", Permissions: "0644"},
				{Path: "/etc/sysctl.d/90-kube.conf", Content: "vm.overcommit_memory=1\n", Permissions: "0644"},
			},
			PreKubeadmCommands:  []string{"systemctl restart containerd", "sysctl --system"},
			PostKubeadmCommands: []string{"echo done > /var/log/bootstrap.done"},
			Users: []bootstrapv1.User{
				{Name: "ops", Sudo: "ALL=(ALL) NOPASSWD:ALL", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample ops@example"}},
				{Name: "audit", Shell: "/bin/bash", LockPassword: ptr.To(true)},
			},
			NTP:    bootstrapv1.NTP{Servers: []string{"169.254.169.123"}, Enabled: ptr.To(true)},
			Format: bootstrapv1.CloudConfig,
		},
	}
	infra := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
		"kind":       "AWSMachine",
		"metadata":   map[string]any{"name": "md-0-abcde", "namespace": "default"},
		"spec": map[string]any{
			"ami":                map[string]any{"id": "ami-0aaaaaaaaaaaaaaaa"},
			"instanceType":       "m6i.large",
			"iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
			"sshKeyName":         "default",
			"providerID":         "aws:///us-east-1a/i-0123456789",
			"rootVolume":         map[string]any{"size": int64(80), "type": "gp3"},
			"additionalTags":     map[string]any{"team": "platform"},
		},
	}}
	return m, cfg, infra
}

func state() diff.State {
	m, cfg, infra := fixture()
	return diff.State{Machine: m, Bootstrap: cfg, Infrastructure: infra}
}
