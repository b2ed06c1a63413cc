package capi_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// An Extension counting its decisions. Pass nil instead of a registry to
// register on controller-runtime's, which a manager's metrics server
// serves.
func ExampleNewMetrics() {
	reg := prometheus.NewRegistry()
	metrics, err := capi.NewMetrics(reg, capi.MetricsOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	k8s, _ := strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion)
	ext, _ := capi.NewExtension(strategy.Updaters(k8s), capi.ExtensionOptions{Metrics: metrics})

	machine := func(version, image string) runtimehooksv1.CanUpdateMachineRequestObjects {
		infra, _ := json.Marshal(map[string]any{"kind": "DockerMachine", "spec": map[string]any{"customImage": image}})
		return runtimehooksv1.CanUpdateMachineRequestObjects{
			Machine:               clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "demo-md-0-abcde"}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: version}},
			InfrastructureMachine: runtime.RawExtension{Raw: infra},
		}
	}
	for _, desired := range []runtimehooksv1.CanUpdateMachineRequestObjects{
		machine("v1.36.1", "kindest/node:v1.35.4"), // a version change: in place
		machine("v1.36.1", "kindest/node:v1.36.1"), // a new image: declined
	} {
		var resp runtimehooksv1.CanUpdateMachineResponse
		ext.CanUpdateMachine(context.Background(), &runtimehooksv1.CanUpdateMachineRequest{
			Current: machine("v1.35.4", "kindest/node:v1.35.4"), Desired: desired,
		}, &resp)
	}

	families, _ := reg.Gather()
	for _, mf := range families {
		if mf.GetName() != observe.MetricDecisions {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				fmt.Printf("%s{hook=%q,outcome=%q} %v\n", mf.GetName(), m.GetLabel()[0].GetValue(), m.GetLabel()[1].GetValue(), v)
			}
		}
	}
	// Output:
	// upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="accept"} 1
	// upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="decline"} 1
}

// Reading the progress MachineUpdater writes on a workload cluster's Node,
// as `kubectl describe node` shows it.
func ExampleInPlaceUpdateCondition() {
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
		{Type: observe.ConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: observe.ReasonDrainBlocked,
			Message: "draining node md-0-a for 4m0s (deadline 30m0s): PDB apps/web-pdb (disruptionsAllowed=0, healthy 2/2, desired 2) holds apps/web-0"},
	}}}
	if c := observe.InPlaceUpdateCondition(node); c != nil {
		fmt.Println(c.Type, c.Status, c.Reason)
		fmt.Println("updating:", c.Status == corev1.ConditionTrue, "blocked:", c.Reason == observe.ReasonDrainBlocked)
	}
	// Output:
	// upgradekit.io/InPlaceUpdate True DrainBlocked
	// updating: true blocked: true
}
