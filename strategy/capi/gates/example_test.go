package gates_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// A soak holds the next update until every other node has been Ready
// long enough; an extension passes it to capi.UpdaterOptions.Gates.
func Example() {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	node := func(name string, readySince time.Time) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}}}}
	}
	cluster := crfake.NewClientBuilder().WithObjects(
		node("w-0", now.Add(-time.Hour)),
		node("w-1", now.Add(-2*time.Minute)), // updated a moment ago
		node("w-2", now.Add(-time.Hour)),
	).Build()
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return cluster, nil }

	soak, err := gates.Soak(workload, 10*time.Minute, nil)
	if err != nil {
		panic(err)
	}
	res := soak.Check(context.Background(), strategy.GateRequest{Cluster: "default/demo", Machine: "demo-md-0-x", Node: "w-2", Now: now})
	fmt.Println(res)
	// Output:
	// Wait by soak: nodes not yet Ready for 10m0s: w-1 (Ready for 2m0s) (retry after 8m0s)
}
