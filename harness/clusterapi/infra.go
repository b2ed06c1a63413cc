package clusterapi

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The harness's infrastructure provider: its API group, version and kinds.
// Clusters use InfraClusterKind; Machines use InfraMachineKind through a
// template of InfraTemplateKind, as with any provider.
const (
	InfraGroup        = "infrastructure.upgradekit.dev"
	InfraVersion      = "v1alpha1"
	InfraClusterKind  = "TestCluster"
	InfraMachineKind  = "TestMachine"
	InfraTemplateKind = "TestMachineTemplate"
	// InfraClusterTemplateKind is the template a ClusterClass makes a
	// topology cluster's TestCluster from (ClusterClassObjects).
	InfraClusterTemplateKind = "TestClusterTemplate"
)

// InfraClusterGVK, InfraMachineGVK and InfraTemplateGVK are the
// provider's kinds.
var (
	InfraClusterGVK  = schema.GroupVersionKind{Group: InfraGroup, Version: InfraVersion, Kind: InfraClusterKind}
	InfraMachineGVK  = schema.GroupVersionKind{Group: InfraGroup, Version: InfraVersion, Kind: InfraMachineKind}
	InfraTemplateGVK = schema.GroupVersionKind{Group: InfraGroup, Version: InfraVersion, Kind: InfraTemplateKind}
	// InfraClusterTemplateGVK is the kind of InfraClusterTemplateKind.
	InfraClusterTemplateGVK = schema.GroupVersionKind{Group: InfraGroup, Version: InfraVersion, Kind: InfraClusterTemplateKind}
)

// ProviderIDPrefix starts every spec.providerID the provider sets; the
// rest is <namespace>/<machine name>.
const ProviderIDPrefix = "upgradekit-test://"

// InfrastructureCRDs returns the CRDs of the harness's infrastructure
// provider (TestCluster, TestMachine, TestMachineTemplate, and the
// TestClusterTemplate a ClusterClass refers to), labelled for Cluster API's
// v1beta2 contract so Cluster API's controllers accept them as
// infrastructure kinds. Their schemas keep unknown fields, so any spec
// (an image, a flavour) can be set and changed to drive a rollout.
func InfrastructureCRDs() []*apiextensionsv1.CustomResourceDefinition {
	open := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}
	crd := func(kind string, status bool) *apiextensionsv1.CustomResourceDefinition {
		plural := lowerKind(kind) + "s"
		props := map[string]apiextensionsv1.JSONSchemaProps{"spec": open}
		v := apiextensionsv1.CustomResourceDefinitionVersion{Name: InfraVersion, Served: true, Storage: true}
		if status {
			props["status"] = open
			v.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
		}
		v.Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}}
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + InfraGroup,
				// Cluster API reads the contract a CRD follows from this label.
				Labels: map[string]string{"cluster.x-k8s.io/v1beta2": InfraVersion}},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: InfraGroup, Scope: apiextensionsv1.NamespaceScoped,
				Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: lowerKind(kind), Kind: kind, ListKind: kind + "List"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{v},
			},
		}
	}
	return []*apiextensionsv1.CustomResourceDefinition{crd(InfraClusterKind, true), crd(InfraMachineKind, true), crd(InfraTemplateKind, false), crd(InfraClusterTemplateKind, false)}
}

func lowerKind(k string) string {
	return map[string]string{InfraClusterKind: "testcluster", InfraMachineKind: "testmachine", InfraTemplateKind: "testmachinetemplate", InfraClusterTemplateKind: "testclustertemplate"}[k]
}
