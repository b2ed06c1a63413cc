package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/simulator"
)

// dockerMachineGVK is the infrastructure machine kind markForUpdate uses.
var dockerMachineGVK = schema.FromAPIVersionAndKind(simulator.DockerMachine.APIVersion, simulator.DockerMachine.Kind)

// mgmtScheme is a scheme for a fake management cluster client: client-go's
// and Cluster API's types, and DockerMachines (unstructured).
func mgmtScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, clusterv1.AddToScheme(s))
	s.AddKnownTypeWithName(dockerMachineGVK, &unstructured.Unstructured{})
	return s
}

// markForUpdate does to the management cluster what Cluster API does
// before it calls UpdateMachine for live (a Machine without a bootstrap
// config): it creates live's DockerMachine marked with the
// update-in-progress annotation, and marks live (not written: the caller
// creates or updates it) with that annotation and the UpdateMachine hook
// pending. It returns the infrastructure machine as the request carries it.
func markForUpdate(ctx context.Context, t *testing.T, mgmt client.Client, live *clusterv1.Machine) runtime.RawExtension {
	t.Helper()
	infra := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"providerID": live.Spec.ProviderID}}}
	infra.SetGroupVersionKind(dockerMachineGVK)
	infra.SetNamespace(live.Namespace)
	infra.SetName(live.Name)
	infra.SetAnnotations(map[string]string{clusterv1.UpdateInProgressAnnotation: ""})
	require.NoError(t, mgmt.Create(ctx, infra))
	live.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: dockerMachineGVK.Group, Kind: dockerMachineGVK.Kind, Name: live.Name}
	if live.Annotations == nil {
		live.Annotations = map[string]string{}
	}
	live.Annotations[clusterv1.UpdateInProgressAnnotation] = ""
	live.Annotations[runtimev1.PendingHooksAnnotation] = "UpdateMachine"
	raw, err := json.Marshal(infra)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: raw}
}
