package drift_test

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// A Karpenter-like NodePool, shaped like sigs.k8s.io/karpenter v1 (the
// parts that matter for hashing), defined here to keep the package free of
// a Karpenter dependency.

type NodeClassReference struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

type NodeSelectorRequirementWithMinValues struct {
	corev1.NodeSelectorRequirement `json:",inline"`
	MinValues                      *int `json:"minValues,omitempty"`
}

type ObjectMeta struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type NodeClaimTemplateSpec struct {
	Taints                 []corev1.Taint                         `json:"taints,omitempty"`
	StartupTaints          []corev1.Taint                         `json:"startupTaints,omitempty"`
	Requirements           []NodeSelectorRequirementWithMinValues `json:"requirements" hash:"ignore"`
	NodeClassRef           *NodeClassReference                    `json:"nodeClassRef"`
	ExpireAfter            *metav1.Duration                       `json:"expireAfter,omitempty"`
	TerminationGracePeriod *metav1.Duration                       `json:"terminationGracePeriod,omitempty"`
}

type NodeClaimTemplate struct {
	ObjectMeta ObjectMeta            `json:"metadata,omitempty"`
	Spec       NodeClaimTemplateSpec `json:"spec"`
}

type Disruption struct {
	ConsolidateAfter    *metav1.Duration `json:"consolidateAfter,omitempty"`
	ConsolidationPolicy string           `json:"consolidationPolicy,omitempty"`
}

type NodePoolSpec struct {
	Template   NodeClaimTemplate   `json:"template"`
	Disruption Disruption          `json:"disruption"`
	Limits     corev1.ResourceList `json:"limits,omitempty"`
	Weight     *int32              `json:"weight,omitempty"`
}

func nodePoolTemplate() *NodeClaimTemplate {
	return &NodeClaimTemplate{
		ObjectMeta: ObjectMeta{
			Labels: map[string]string{
				"team":                         "payments",
				"app.kubernetes.io/part-of":    "checkout",
				"node.kubernetes.io/lifecycle": "spot",
				"upgradekit.io/wave":           "2",
			},
			Annotations: map[string]string{
				"example.com/owner": "sre",
				"example.com/cost":  "cc-1234",
			},
		},
		Spec: NodeClaimTemplateSpec{
			Taints: []corev1.Taint{
				{Key: "dedicated", Value: "payments", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/gpu", Effect: corev1.TaintEffectNoExecute},
			},
			StartupTaints: []corev1.Taint{
				{Key: "node.cilium.io/agent-not-ready", Value: "true", Effect: corev1.TaintEffectNoExecute},
			},
			Requirements: []NodeSelectorRequirementWithMinValues{
				{NodeSelectorRequirement: corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"}}},
				{NodeSelectorRequirement: corev1.NodeSelectorRequirement{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}}},
				{NodeSelectorRequirement: corev1.NodeSelectorRequirement{Key: "karpenter.k8s.aws/instance-generation", Operator: corev1.NodeSelectorOpGt, Values: []string{"5"}}},
				{NodeSelectorRequirement: corev1.NodeSelectorRequirement{Key: "karpenter.k8s.aws/instance-family", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"t3", "t3a"}}, MinValues: ptr.To(3)},
			},
			NodeClassRef:           &NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			ExpireAfter:            &metav1.Duration{Duration: 720 * time.Hour},
			TerminationGracePeriod: &metav1.Duration{Duration: 48 * time.Hour},
		},
	}
}

func nodePoolSpec() *NodePoolSpec {
	return &NodePoolSpec{
		Template:   *nodePoolTemplate(),
		Disruption: Disruption{ConsolidateAfter: &metav1.Duration{Duration: 30 * time.Second}, ConsolidationPolicy: "WhenEmptyOrUnderutilized"},
		Limits:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("1000Gi")},
		Weight:     ptr.To[int32](10),
	}
}

func capiMachine() *clusterv1.Machine {
	return &clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "prod-md-0-abcde-xyz12",
			Namespace: "default",
			Labels: map[string]string{
				clusterv1.ClusterNameLabel:           "prod",
				clusterv1.MachineDeploymentNameLabel: "prod-md-0",
				clusterv1.MachineSetNameLabel:        "prod-md-0-abcde",
				"node-pool":                          "general",
			},
			Annotations: map[string]string{
				"controlplane.cluster.x-k8s.io/kubeadm-cluster-configuration": `{"etcd":{}}`,
			},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: "prod",
			Bootstrap: clusterv1.Bootstrap{
				ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: "prod-md-0-abcde-xyz12",
				},
				DataSecretName: ptr.To("prod-md-0-abcde-xyz12"),
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: "prod-md-0-abcde-xyz12",
			},
			Version:         "v1.33.4",
			ProviderID:      "aws:///us-west-2a/i-0123456789abcdef0",
			FailureDomain:   "us-west-2a",
			MinReadySeconds: ptr.To[int32](10),
			ReadinessGates:  []clusterv1.MachineReadinessGate{{ConditionType: "example.com/Ready"}},
			Deletion: clusterv1.MachineDeletionSpec{
				NodeDrainTimeoutSeconds:        ptr.To[int32](600),
				NodeVolumeDetachTimeoutSeconds: ptr.To[int32](300),
			},
		},
	}
}

func kubeadmConfig() *bootstrapv1.KubeadmConfig {
	return &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: "prod-md-0-abcde-xyz12", Namespace: "default"},
		Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{
				NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					Name:      "{{ ds.meta_data.local_hostname }}",
					CRISocket: "unix:///var/run/containerd/containerd.sock",
					KubeletExtraArgs: []bootstrapv1.Arg{
						{Name: "cloud-provider", Value: ptr.To("external")},
						{Name: "node-labels", Value: ptr.To("node-pool=general")},
						{Name: "max-pods", Value: ptr.To("110")},
					},
					Taints: &[]corev1.Taint{},
				},
			},
			Files: []bootstrapv1.File{
				{Path: "/etc/sysctl.d/99-k8s.conf", Owner: "root:root", Permissions: "0644", Content: "net.ipv4.ip_forward = 1\nvm.max_map_count = 262144\n"},
				{Path: "/etc/containerd/config.d/mirror.toml", Owner: "root:root", Permissions: "0600",
					ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "registry-mirror", Key: "mirror.toml"}}},
			},
			PreKubeadmCommands:  []string{"systemctl restart containerd", "sysctl --system"},
			PostKubeadmCommands: []string{"echo done > /var/log/bootstrap.done"},
			Users: []bootstrapv1.User{{
				Name:              "ops",
				Sudo:              "ALL=(ALL) NOPASSWD:ALL",
				SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG0p ops@example.com"},
			}},
			NTP:       bootstrapv1.NTP{Servers: []string{"169.254.169.123"}, Enabled: ptr.To(true)},
			Format:    bootstrapv1.CloudConfig,
			Verbosity: ptr.To[int32](4),
		},
	}
}

// machineAndConfig is the realistic CAPI object pair a machine's desired
// state consists of.
type machineAndConfig struct {
	Machine      *clusterv1.Machine         `json:"machine"`
	BootstrapCfg *bootstrapv1.KubeadmConfig `json:"bootstrapConfig"`
}

func capiPair() *machineAndConfig {
	return &machineAndConfig{Machine: capiMachine(), BootstrapCfg: kubeadmConfig()}
}
