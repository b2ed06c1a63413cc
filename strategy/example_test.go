package strategy_test

import (
	"context"
	"fmt"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
)

// Two updaters behind one decision: the Kubernetes version can be changed
// in place, a new machine image cannot.
func ExampleUpdaters() {
	k8s, _ := strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion)
	etcd, _ := strategy.ForPaths("etcd", "bootstrap.spec.clusterConfiguration.etcd")
	decider := strategy.Updaters(k8s, etcd)

	cur := diff.State{
		Machine:        &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.35.4"}},
		Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{"ami": map[string]any{"id": "ami-1"}}},
	}
	des := diff.State{
		Machine:        &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.36.1"}},
		Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{"ami": map[string]any{"id": "ami-2"}}},
	}
	cs, _ := diff.Machines(cur, des)
	d, _ := decider.Decide(context.Background(), cs)
	fmt.Println(d.Outcome)
	fmt.Println(d.Message)
	// Output:
	// Replace
	// cannot update in place: 1 change not covered: infrastructure.spec.ami.id (InfrastructureImage)
}
