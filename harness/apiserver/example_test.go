package apiserver_test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// Start a real kube-apiserver with the CAPI CRDs, create a Machine and read
// the server's answer. In a test, prefer apiserver.StartForTest(t).
func ExampleStart() {
	ctx := context.Background()
	env, err := apiserver.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = env.Stop() }()

	_ = env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "example"}})
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m-1", Namespace: "example"},
		Spec: clusterv1.MachineSpec{
			ClusterName: "demo",
			Version:     "v1.36.1",
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: "m-1",
			},
		},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created", m.Name, "at", m.Spec.Version, "uid set:", m.UID != "")
	// Not run by go test (an example cannot skip when the binaries are
	// missing); TestRealAPIServerRoundTrip does the same.
}

// Without the binaries Start says which are missing and how to build them;
// StartForTest turns that into a skip (or, with RequireEnvVar set, a
// failure).
func ExampleAssetsMissingError() {
	_, err := apiserver.Start(context.Background(), apiserver.WithAssetsDir("/nonexistent/envtest-assets"))
	var missing *apiserver.AssetsMissingError
	if errors.As(err, &missing) {
		fmt.Println(errors.Is(err, apiserver.ErrAssetsMissing), missing.Missing, missing.Source)
	}
	// Output: true [kube-apiserver etcd] WithAssetsDir
}
