package simulator_test

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// Build a cluster, give every node a simulated host, and upgrade the first
// control plane node and a worker from v1.35.4 to v1.36.3 with the real
// kubeadm plans and nodeexec's Runner. The Nodes report the new kubelet
// version; an injected API conflict is retried by the host.
func Example() {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")

	faults := simulator.NewFaults(1).APIError("update/status", "Node", simulator.APIFaultConflict, 1)
	c, err := cl.Client(simulator.WithInterceptor(faults.Interceptor()))
	if err != nil {
		fmt.Println(err)
		return
	}
	fleet, err := simulator.NewFleet(cl, simulator.WithNodeClient(c))
	if err != nil {
		fmt.Println(err)
		return
	}
	journal, _ := os.MkdirTemp("", "fake-example")
	defer os.RemoveAll(journal)

	upgrade := func(node string, role kubeadm.Role) {
		h := fleet.Host(node)
		h.Stage(simulator.Staging{Kubernetes: "v1.36.3", Containerd: "2.0.5", CNI: "v1.7.1"})
		plan, err := kubeadm.NewPlan(kubeadm.Config{Node: node, Role: role, FromVersion: "v1.35.4", ToVersion: "v1.36.3"})
		if err != nil {
			fmt.Println(err)
			return
		}
		runner, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: journal})
		if err != nil {
			fmt.Println(err)
			return
		}
		out, err := runner.Run(ctx, plan)
		fmt.Println(node, out.State, err)
	}
	upgrade("demo-control-plane-0", kubeadm.RoleFirstControlPlane)
	upgrade("demo-md-0-0", kubeadm.RoleWorker)

	var nodes corev1.NodeList
	_ = c.List(ctx, &nodes)
	for _, n := range nodes.Items {
		fmt.Println(n.Name, n.Spec.ProviderID, n.Status.NodeInfo.KubeletVersion)
	}
	fmt.Println("injected:", faults.Injected())

	// API faults are real API errors.
	faults.APIError("get", "Node", simulator.APIFaultThrottled, 1)
	err = c.Get(ctx, client.ObjectKey{Name: "demo-md-0-1"}, &corev1.Node{})
	fmt.Println(apierrors.IsTooManyRequests(err))
	// Output:
	// demo-control-plane-0 Succeeded <nil>
	// demo-md-0-0 Succeeded <nil>
	// demo-control-plane-0 docker:////demo-control-plane-0 v1.36.3
	// demo-md-0-0 docker:////demo-md-0-0 v1.36.3
	// demo-md-0-1 docker:////demo-md-0-1 v1.35.4
	// injected: [update/status Node: Conflict]
	// true
}

// Run a whole rollout over a fake cluster on a virtual clock: a 1.35 ->
// 1.36 upgrade of one control plane machine and three workers, in place,
// while the upgrader on one worker crashes mid-step (a new runner resumes
// from the journal) and another worker's kubeadm upgrade keeps failing
// (its plan rolls back the steps before it, and the node is schedulable
// again at its old version). Copy this into your own tests and swap in your
// planner (Options.Planner) or strategy (Options.Strategy).
func ExampleSimulator() {
	ctx := context.Background()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 3, "v1.35.4")
	faults := simulator.NewFaults(42).
		CrashRunner("demo-md-0-0", "kubelet", simulator.CrashPointDuring).
		FailStep("demo-md-0-2", "kubeadm-upgrade", 100)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults, Strategy: strategy.NeverReplaceStrategy()})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := sim.Run(ctx, simulator.Rollout{ToVersion: "v1.36.3"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("batches:", len(res.Plan.Batches), "took:", res.End.Sub(res.Start))
	fmt.Println("failed:", res.Failed, "runner restarts:", res.Restarts)
	fmt.Println("violations:", len(res.Violations), "left cordoned:", res.LeftCordoned)
	for _, e := range res.Events {
		if e.Machine == "demo-md-0-2" && e.Outcome != "Succeeded" {
			fmt.Println(e.Machine, e.Step, e.Outcome)
		}
	}
	for _, n := range []string{"demo-control-plane-0", "demo-md-0-0", "demo-md-0-2"} {
		var node corev1.Node
		_ = sim.Client().Get(ctx, client.ObjectKey{Name: n}, &node)
		fmt.Println(n, node.Status.NodeInfo.KubeletVersion, "unschedulable:", node.Spec.Unschedulable)
	}
	// Output:
	// batches: 4 took: 23m10s
	// failed: [demo-md-0-2] runner restarts: 1
	// violations: 0 left cordoned: []
	// demo-md-0-2 kubeadm-upgrade Failed
	// demo-md-0-2 kubeadm-binary RolledBack
	// demo-md-0-2 cni-plugins RolledBack
	// demo-md-0-2 containerd RolledBack
	// demo-md-0-2 failed-update-retried Blocked
	// demo-control-plane-0 v1.36.3 unschedulable: false
	// demo-md-0-0 v1.36.3 unschedulable: false
	// demo-md-0-2 v1.35.4 unschedulable: false
}

// Play the kubelet for an upgrader pod. A plan that stops the kubelet in
// one step (one init container) and starts it in the next gets stuck: the
// stopped kubelet cannot start the container that would start it. The
// stopping container still looks Running, because the kubelet died before
// it could report the exit. The kubeadm plans restart it within one step.
func ExamplePodRunner() {
	h, _ := simulator.NewHost("w-0", strategy.RoleWorker, "v1.36.3")
	plan := nodeexec.Plan{Name: "split-restart", Node: "w-0", Steps: []nodeexec.Step{
		{Name: "stop", Argv: []string{"systemctl", "stop", "kubelet"}},
		{Name: "start", Argv: []string{"systemctl", "start", "kubelet"}},
	}}
	pod, _ := nodepod.Build(plan, nodepod.WithImage("registry.local/upgrader:v1"))
	pr, err := simulator.NewPodRunner(h, pod)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := pr.Run(context.Background())
	fmt.Println(res.Phase, "before", res.Container+":", res.Reason)
	fmt.Println("pod status says:", nodepod.ReadStatus(pr.Pod()).Phase)
	// Output:
	// Stuck before start: kubelet is inactive
	// pod status says: Running
}
