package drain_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

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

// Drain evicts what a node runs, except DaemonSet pods, and reports
// what it evicted. The fake clientset stands in for a cluster; its
// eviction reactor deletes the pod as the API server would.
func ExampleDrain() {
	ctx := context.Background()
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	)
	// Advertise the eviction subresource, as a real API server does.
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"},
	}}}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})

	if _, err := drain.Cordon(ctx, cs, "n1", "upgrade-7"); err != nil {
		fmt.Println(err)
		return
	}
	rep, err := drain.Drain(ctx, cs, "n1", drain.WithGracePeriod(0))
	fmt.Println("evicted:", rep.Evicted, "error:", err)
	// Output:
	// evicted: [default/web-1] error: <nil>
}
