package kubeadm_test

import (
	"errors"
	"fmt"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

func ExampleNewPlan() {
	plan, err := kubeadm.NewPlan(kubeadm.Config{
		PlanName: "cp-0-v1-32", Node: "cp-0", Role: kubeadm.RoleFirstControlPlane,
		FromVersion: "v1.35.4", ToVersion: "v1.36.3",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println(s.Name)
	}
	fmt.Println(plan.Steps[6].Argv)

	_, err = kubeadm.NewPlan(kubeadm.Config{Node: "w-1", Role: kubeadm.RoleWorker, FromVersion: "v1.34.2", ToVersion: "v1.36.3"})
	fmt.Println(errors.Is(err, kubeadm.ErrSkippedMinor))
	// Output:
	// bundle
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

// A kubeletExtraArgs change on a worker: max-pods changes, node-labels is
// no longer set, cloud-provider stays. Values reach the node's scripts as
// argv elements; a value systemd would split or unquote is refused with a
// *KubeletArgError naming it.
func ExampleNewKubeletArgsPlan() {
	plan, err := kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{
		PlanName: "w-1-kubelet-args", Node: "w-1",
		Desired:  []kubeadm.KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "max-pods", Value: "250"}},
		Previous: []kubeadm.KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "max-pods", Value: "110"}, {Name: "node-labels", Value: "tier=web"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println(s.Name, s.Argv[4:])
	}

	// What the step does to kubeadm's file, as a pure function.
	f, _ := kubeadm.ParseKubeadmFlags(`KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=110 --node-labels=tier=web"` + "\n")
	fmt.Print(f.WithExtraArgs([]kubeadm.KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "max-pods", Value: "250"}}, []string{"node-labels"}))

	_, err = kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{Node: "w-1",
		Desired: []kubeadm.KubeletArg{{Name: "node-labels", Value: "tier=web zone=a"}}})
	var argErr *kubeadm.KubeletArgError
	fmt.Println(errors.As(err, &argErr), argErr.Field, errors.Is(err, kubeadm.ErrInvalidKubeletArg))
	// Output:
	// kubelet-args [/var/lib/kubelet/kubeadm-flags.env /var/lib/kubelet/upgradekit-kubelet-extra-args /var/lib/upgradekit/backup/w-1-kubelet-args /proc 5 2 --cloud-provider=external --max-pods=250 node-labels]
	// kubelet-args-verify [/var/lib/kubelet/kubeadm-flags.env /var/lib/kubelet/upgradekit-kubelet-extra-args /var/lib/upgradekit/backup/w-1-kubelet-args /proc 5 2 --cloud-provider=external --max-pods=250 node-labels]
	// KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=250"
	// true desired[0].value true
}

// An API server argument changed at the same version: the manifests are
// rendered again from kubeadm-config, then checked.
func ExampleNewControlPlaneConfigPlan() {
	plan, err := kubeadm.NewControlPlaneConfigPlan(kubeadm.ControlPlaneConfig{
		PlanName: "cp-0-config", Node: "cp-0",
		Expect: []kubeadm.ManifestExpectation{{Component: "kube-apiserver", Args: []kubeadm.KubeletArg{{Name: "audit-log-maxage", Value: "30"}}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range plan.Steps {
		fmt.Println(s.Name)
	}
	fmt.Println(plan.Steps[0].Argv)
	// Output:
	// control-plane-config
	// control-plane-config-verify
	// [/usr/bin/kubeadm upgrade node phase control-plane --certificate-renewal=false]
}
