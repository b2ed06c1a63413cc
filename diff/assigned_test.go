package diff_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// runningAWSMachine is a machine as it runs: named by its MachineSet, with
// the providerID and instance ID its provider filled in, or, with
// providerID empty, as built from templates (other names, nothing
// assigned).
func runningAWSMachine(name, version, providerID, instanceID, instanceType string) diff.State {
	spec := map[string]any{"ami": map[string]any{"id": "ami-0aaa"}, "instanceType": instanceType}
	if instanceID != "" {
		spec["instanceID"] = instanceID
		spec["providerID"] = providerID
	}
	return diff.State{
		Machine: &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: clusterv1.MachineSpec{
			ClusterName: "prod", Version: version, ProviderID: providerID,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: name},
			Bootstrap: clusterv1.Bootstrap{
				ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: name},
				DataSecretName: ptr.To(name),
			},
		}},
		Bootstrap: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "hi"}}}},
		Infrastructure: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}},
	}
}

func TestInPlaceProposalIgnoresWhatProvidersAssign(t *testing.T) {
	current := runningAWSMachine("md-0-7c9f4-x2kq", "v1.35.4", "aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0", "m5.large")
	for _, tc := range []struct {
		name    string
		desired diff.State
		opts    []diff.Option
		want    []string
	}{{
		name:    "no options: every assigned field counts",
		desired: runningAWSMachine("md-0-template", "v1.36.1", "", "", "m5.large"),
		want: []string{
			"machine.spec.bootstrap.configRef.name", "machine.spec.bootstrap.dataSecretName", "machine.spec.infrastructureRef.name",
			"machine.spec.providerID", "machine.spec.version", "infrastructure.spec.instanceID", "infrastructure.spec.providerID",
		},
	}, {
		name:    "InPlaceProposal: only the version",
		desired: runningAWSMachine("md-0-template", "v1.36.1", "", "", "m5.large"),
		opts:    []diff.Option{diff.InPlaceProposal()},
		want:    []string{"machine.spec.version"},
	}, {
		name:    "InPlaceProposal still sees what the user changed",
		desired: runningAWSMachine("md-0-template", "v1.36.1", "", "", "m5.xlarge"),
		opts:    []diff.Option{diff.InPlaceProposal()},
		want:    []string{"machine.spec.version", "infrastructure.spec.instanceType"},
	}, {
		name:    "IgnoreAssigned alone keeps the other default rules",
		desired: runningAWSMachine("md-0-template", "v1.35.4", "", "", "m5.large"),
		opts:    []diff.Option{diff.IgnoreAssigned()},
		want:    nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Machines(current, tc.desired, tc.opts...)
			require.NoError(t, err)
			require.ElementsMatch(t, tc.want, fields(cs), "%s", cs)
		})
	}
}

func TestAssignedPathsParse(t *testing.T) {
	require.NotEmpty(t, diff.AssignedPaths())
	for _, p := range diff.AssignedPaths() {
		_, err := diff.ParsePattern(p)
		require.NoError(t, err, p)
	}
}
