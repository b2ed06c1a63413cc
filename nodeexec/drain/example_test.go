package drain_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
)

// Cordon ownership: an operator had already cordoned the node, so our
// uncordon leaves it cordoned; another upgrader cannot take the cordon.
func ExampleCordon() {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}})

	rec, _ := drain.Cordon(ctx, cs, "n1", "upgrade-7")
	fmt.Println("prior unschedulable:", rec.PriorUnschedulable)

	_, err := drain.Cordon(ctx, cs, "n1", "upgrade-8")
	fmt.Println(errors.Is(err, drain.ErrCordonedByOther))

	res, _ := drain.Uncordon(ctx, cs, "n1", "upgrade-7")
	n, _ := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	fmt.Println("uncordoned:", res.Uncordoned, "still unschedulable:", n.Spec.Unschedulable)
	// Output:
	// prior unschedulable: true
	// true
	// uncordoned: false still unschedulable: true
}
