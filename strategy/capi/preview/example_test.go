package preview_test

import (
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// A change is what kubectl apply -f would take: here a MachineDeployment
// moved to a new Kubernetes version and a new infrastructure template.
func ExampleParseChange() {
	objs, err := preview.ParseChange(strings.NewReader(`
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: md-0, namespace: default}
spec:
  template:
    spec: {version: v1.36.4}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata: {name: md-0-v2}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range objs {
		fmt.Println(o.GetKind(), o.GetName())
	}
	_, err = preview.ParseChange(strings.NewReader("apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata: {name: md-0}\n"))
	fmt.Println(err)
	// Output:
	// MachineDeployment md-0
	// DockerMachineTemplate md-0-v2
	// invalid change: document 1 (MachineDeployment md-0): apiVersion cluster.x-k8s.io/v1beta1: the preview reads Cluster API's v1beta2 only
}
