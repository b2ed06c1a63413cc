package workload_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// An extension reaches each workload cluster through the kubeconfig
// secret Cluster API keeps in the management cluster.
func Example() {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["demo"] = &clientcmdapi.Cluster{Server: "https://demo.example:6443"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["demo"] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: "admin"}
	kc.CurrentContext = "demo"
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		panic(err)
	}
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	mgmt := crfake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-kubeconfig"}, Data: map[string][]byte{"value": raw}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "broken-kubeconfig"}, Data: map[string][]byte{"other": raw}},
	).Build()
	ctx := context.Background()

	clientsets := workload.KubeconfigClientset(mgmt)
	cs, err := clientsets(ctx, types.NamespacedName{Namespace: "default", Name: "demo"})
	if err != nil {
		panic(err)
	}
	fmt.Println("demo:", cs.CoreV1().RESTClient().Get().URL().Host)

	clients := workload.KubeconfigClient(mgmt, s)
	_, err = clients(ctx, types.NamespacedName{Namespace: "default", Name: "broken"})
	fmt.Println("broken unusable:", errors.Is(err, workload.ErrKubeconfigUnusable))
	// Output:
	// demo: demo.example:6443
	// broken unusable: true
}
