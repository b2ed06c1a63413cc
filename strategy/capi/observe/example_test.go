package observe_test

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// A tool reads how a node's in-place update goes from the Node alone: the
// condition says the phase, the annotation the update's record.
func ExampleInPlaceUpdateCondition() {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "md-0-abc", Annotations: map[string]string{
			observe.AnnotationInPlaceUpdate: `{"machine":"md-0-abc","version":"v1.36.3","started":"2026-11-28T10:00:00Z","fromVersion":"v1.35.4"}`,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: observe.ConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: observe.ReasonDraining,
		}}},
	}
	if c := observe.InPlaceUpdateCondition(node); c != nil && c.Status == corev1.ConditionTrue {
		fmt.Println("updating:", c.Reason)
	}
	var rec observe.UpdateRecord
	if err := json.Unmarshal([]byte(node.Annotations[observe.AnnotationInPlaceUpdate]), &rec); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %s -> %s since %s\n", rec.Machine, rec.FromVersion, rec.Version, rec.Started.UTC().Format("15:04"))
	// Output:
	// updating: Draining
	// md-0-abc: v1.35.4 -> v1.36.3 since 10:00
}
