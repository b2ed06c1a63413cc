package diff_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/upgradekit/upgradekit/diff"
)

// TestInPlaceUpdatePreset: after an extension's patches, CAPI compares only
// version and failure domain of the Machine, and whole specs of the others.
func TestInPlaceUpdatePreset(t *testing.T) {
	m, cfg, infra := fixture()
	m2, cfg2, infra2 := fixture()
	m2.Spec.ProviderID = "other"
	m2.Spec.Bootstrap.ConfigRef.Name = "new"
	m2.Spec.Taints = nil
	m2.Labels["x"] = "y"
	cs, err := diff.Machines(diff.State{Machine: m, Bootstrap: cfg, Infrastructure: infra},
		diff.State{Machine: m2, Bootstrap: cfg2, Infrastructure: infra2}, diff.InPlaceUpdate())
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)

	m2.Spec.FailureDomain = "us-east-1b"
	cfg2.Spec.PreKubeadmCommands = append(cfg2.Spec.PreKubeadmCommands, "echo hi")
	cs, err = diff.Machines(diff.State{Machine: m, Bootstrap: cfg, Infrastructure: infra},
		diff.State{Machine: m2, Bootstrap: cfg2, Infrastructure: infra2}, diff.InPlaceUpdate())
	require.NoError(t, err)
	require.Equal(t, []string{"machine.spec.failureDomain", "bootstrap.spec.preKubeadmCommands[2]"}, fieldsOf(cs))
}

func fieldsOf(cs diff.ChangeSet) []string {
	var out []string
	for _, c := range cs.Changes {
		out = append(out, c.Field)
	}
	return out
}

// TestClonedFromTemplate covers CAPI's TestMatchesInfraMachine cases.
func TestClonedFromTemplate(t *testing.T) {
	ref := diff.TemplateRef{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestInfrastructureMachineTemplate", Name: "infra-machine-template1"}
	infra := func(ann map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": "TestInfrastructureMachine", "metadata": map[string]any{"annotations": ann}}}
	}
	cases := []struct {
		name   string
		ann    map[string]any
		match  bool
		reason string
	}{
		{"no annotations", map[string]any{}, true, ""},
		{"both differ", map[string]any{diff.ClonedFromNameAnnotation: "different-infra-machine-template1", diff.ClonedFromGroupKindAnnotation: "DifferentTestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io"}, false,
			"Infrastructure template on KCP rotated from DifferentTestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io different-infra-machine-template1 to TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io infra-machine-template1"},
		{"only group kind matches", map[string]any{diff.ClonedFromNameAnnotation: "other", diff.ClonedFromGroupKindAnnotation: "TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io"}, false,
			"Infrastructure template on KCP rotated from TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io other to TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io infra-machine-template1"},
		{"only name matches", map[string]any{diff.ClonedFromNameAnnotation: "infra-machine-template1", diff.ClonedFromGroupKindAnnotation: "Other.infrastructure.cluster.x-k8s.io"}, false,
			"Infrastructure template on KCP rotated from Other.infrastructure.cluster.x-k8s.io infra-machine-template1 to TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io infra-machine-template1"},
		{"both match", map[string]any{diff.ClonedFromNameAnnotation: "infra-machine-template1", diff.ClonedFromGroupKindAnnotation: "TestInfrastructureMachineTemplate.infrastructure.cluster.x-k8s.io"}, true, ""},
		{"only one annotation: older or adopted machine", map[string]any{diff.ClonedFromNameAnnotation: "x"}, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason, err := diff.ClonedFromTemplate(infra(tc.ann), ref)
			require.NoError(t, err)
			require.Equal(t, tc.match, ok)
			require.Equal(t, tc.reason, reason)
		})
	}
}
