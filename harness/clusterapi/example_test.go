package clusterapi_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
)

// In a test of your own: a real API server, then Cluster API's managers
// (built once per version by hack/capi-managers.sh) against it.
func Example() {
	t := &testing.T{} // your test's t
	env := apiserver.StartForTest(t)
	m := clusterapi.StartForTest(t, env, clusterapi.WithManagers(clusterapi.ManagerCore))
	_ = m.LogPath(clusterapi.ManagerCore) // where the core manager logs
}

// The objects of a MachineDeployment on the harness: its bootstrap and
// infrastructure templates and the MachineDeployment, ready to create.
func ExampleMachineDeploymentObjects() {
	for _, o := range clusterapi.MachineDeploymentObjects("default", "demo", "md-0", 3, "v1.35.4") {
		kind := o.GetObjectKind().GroupVersionKind().Kind // set on unstructured objects
		if kind == "" {
			kind = reflect.TypeOf(o).Elem().Name() // typed ones
		}
		fmt.Println(kind, o.GetName())
	}
	// Output:
	// KubeadmConfigTemplate md-0-0
	// TestMachineTemplate md-0-0
	// MachineDeployment md-0
}
