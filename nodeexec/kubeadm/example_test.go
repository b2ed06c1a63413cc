package kubeadm_test

import (
	"errors"
	"fmt"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

func ExampleNewPlan() {
	plan, err := kubeadm.NewPlan(kubeadm.Config{
		PlanName: "cp-0-v1-32", Node: "cp-0", Role: kubeadm.RoleFirstControlPlane,
		FromVersion: "v1.31.4", ToVersion: "v1.32.0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println(s.Name)
	}
	fmt.Println(plan.Steps[5].Argv)

	_, err = kubeadm.NewPlan(kubeadm.Config{Node: "w-1", Role: kubeadm.RoleWorker, FromVersion: "v1.30.2", ToVersion: "v1.32.0"})
	fmt.Println(errors.Is(err, kubeadm.ErrSkippedMinor))
	// Output:
	// etcd-snapshot
	// containerd
	// cni-plugins
	// kubeadm-binary
	// kubeadm-config
	// kubeadm-upgrade
	// kubectl-binary
	// kubelet
	// verify
	// [/usr/bin/kubeadm upgrade apply --config /var/lib/upgradekit/staging/kubeadm-upgrade-config.yaml --yes]
	// true
}
