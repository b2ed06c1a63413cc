package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
)

// awsMachine is a machine as it runs (providerID and instance ID filled
// in, named by its MachineSet) or, with providerID empty, as a user
// builds the desired one from templates.
func awsMachine(name, version, providerID, instanceID string) diff.State {
	spec := map[string]any{"ami": map[string]any{"id": "ami-0aaa"}}
	if instanceID != "" {
		spec["instanceID"] = instanceID
	}
	return diff.State{
		Machine: &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: clusterv1.MachineSpec{
			Version: version, ProviderID: providerID,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: name},
		}},
		Infrastructure: &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}},
	}
}

func TestDecideNamesAnUnsuitableDiff(t *testing.T) {
	current := awsMachine("md-0-7c9f4-x2kq", "v1.35.4", "aws:///us-east-1a/i-0123456789abcdef0", "i-0123456789abcdef0")
	desired := awsMachine("md-0-template", "v1.36.1", "", "")
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	decider := strategy.Updaters(kubeadm)

	raw, err := diff.Machines(current, desired)
	require.NoError(t, err)
	d, err := decider.Decide(context.Background(), raw)
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeReplace, d.Outcome)
	require.ErrorIs(t, d.Warning, strategy.ErrUnsuitableDiff)
	for _, f := range []string{"machine.spec.infrastructureRef.name", "machine.spec.providerID", "infrastructure.spec.instanceID"} {
		require.Contains(t, d.Warning.Error(), f)
	}
	require.Contains(t, d.Message, "diff.InPlaceProposal()", "the message leads to the preset")
	require.Contains(t, d.Message, "machine.spec.providerID")

	proposal, err := diff.Machines(current, desired, diff.InPlaceProposal())
	require.NoError(t, err)
	d, err = decider.Decide(context.Background(), proposal)
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeInPlace, d.Outcome, d.Message)
	require.NoError(t, d.Warning)
	require.Equal(t, "in place by kubeadm: machine.spec.version", d.Message)

	// A policy that ignores the assigned fields has nothing to warn about.
	var rules []strategy.Rule
	for _, path := range diff.AssignedPaths() {
		rules = append(rules, strategy.Rule{Path: path, Action: strategy.ActionIgnore})
	}
	rules = append(rules, strategy.Rule{Category: diff.CategoryKubernetesVersion, Action: strategy.ActionInPlace})
	p, err := strategy.NewPolicy(rules, strategy.ActionReplace, kubeadm)
	require.NoError(t, err)
	d, err = p.Decide(context.Background(), raw)
	require.NoError(t, err)
	require.NoError(t, d.Warning)
	require.Equal(t, strategy.OutcomeInPlace, d.Outcome, d.Message)
}

// A running machine (providerID and instance ID filled in) against one
// built from templates: diffed without a preset, the decision is Replace
// and its Warning names the fields Cluster API never compares.
func ExampleDecision_warning() {
	running := diff.State{
		Machine:        &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.35.4", ProviderID: "aws:///us-east-1a/i-0abc"}},
		Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{"instanceID": "i-0abc"}},
	}
	proposed := diff.State{
		Machine:        &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.36.1"}},
		Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{}},
	}
	kubeadm, _ := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	decider := strategy.Updaters(kubeadm)

	cs, _ := diff.Machines(running, proposed)
	d, _ := decider.Decide(context.Background(), cs)
	fmt.Println(d.Outcome, errors.Is(d.Warning, strategy.ErrUnsuitableDiff))
	fmt.Println(d.Warning)

	cs, _ = diff.Machines(running, proposed, diff.InPlaceProposal())
	d, _ = decider.Decide(context.Background(), cs)
	fmt.Println(d.Outcome, d.Warning)
	// Output:
	// Replace true
	// change set unsuitable for an in-place decision: it compares machine.spec.providerID, infrastructure.spec.instanceID, which a provider or Cluster API assigns to a running machine (Cluster API's own desired objects carry them over, a machine built from templates lacks them); diff with diff.InPlaceProposal() (or diff.InPlaceUpdate() for a Cluster API request's objects)
	// InPlace <nil>
}
