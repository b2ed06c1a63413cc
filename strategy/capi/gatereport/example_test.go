package gatereport_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

// gatesAt peeks at gates at a fixed time; an extension passes its
// capi.MachineUpdater, which peeks at UpdaterOptions.Gates.
type gatesAt struct {
	gates strategy.Gates
	now   time.Time
}

func (g gatesAt) PeekGates(ctx context.Context, m *clusterv1.Machine) []strategy.GateResult {
	return g.gates.PeekEach(ctx, strategy.GateRequest{Cluster: m.Namespace + "/" + m.Spec.ClusterName, Machine: m.Name, Node: m.Status.NodeRef.Name, Now: g.now})
}

// An extension serves the report; a preview asks it which machines its
// gates would let go now.
func Example() {
	nightly, err := strategy.MaintenanceWindow("nightly", "0 2 * * *", 3*time.Hour, "UTC")
	if err != nil {
		panic(err)
	}
	s := runtime.NewScheme()
	_ = clusterv1.AddToScheme(s)
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-md-0-abcde"}, Spec: clusterv1.MachineSpec{ClusterName: "demo"}}
	mgmt := crfake.NewClientBuilder().WithScheme(s).WithObjects(m).Build()

	noon := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(gatereport.NewHandler(mgmt, gatesAt{strategy.Gates{nightly}, noon}, logr.Discard()))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)

	rep, err := gatereport.Post(context.Background(), srv.Client(), base, &gatereport.Request{
		Cluster: gatereport.ClusterRef{Namespace: "default", Name: "demo"}, Machines: []string{"demo-md-0-abcde"}})
	if err != nil {
		panic(err)
	}
	for _, mr := range rep.Machines {
		fmt.Println(mr.Name, mr.Verdict)
		for _, a := range mr.Gates {
			fmt.Printf("  %s: %s, retry after %s\n", a.Gate, a.Verdict, a.RetryAfter.Duration)
		}
	}
	// Output:
	// demo-md-0-abcde Wait
	//   nightly: Wait, retry after 14h0m0s
}
