package extensionserver_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// A decide-only extension: CanUpdateMachine and CanUpdateMachineSet for
// another extension's UpdateMachine, which applies the version and files.
func Example_decideOnly() {
	m, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
	if err != nil {
		panic(err)
	}
	ext, err := extensionserver.New(nil, extensionserver.Options{
		DecideOnly:     true,
		Categories:     []diff.Category{diff.CategoryKubernetesVersion, diff.CategoryFiles},
		UpdaterOptions: capi.UpdaterOptions{Metrics: m},
	})
	if err != nil {
		panic(err)
	}
	for _, h := range ext.Handlers() {
		fmt.Println(h.Name)
	}
	// Output:
	// upgradekit-can-update-machine
	// upgradekit-can-update-machineset
}

// A misspelt category is refused, with the option and the valid names.
func ExampleValidate() {
	err := extensionserver.Validate(extensionserver.Options{DecideOnly: true, Categories: []diff.Category{"KubernetesVerison"}})
	fmt.Println(err)
	// Output:
	// invalid option: Options.Categories: unknown category "KubernetesVerison" (categories: KubernetesVersion, EtcdVersion, Addons, ControlPlaneConfig, KubeletConfig, KubeadmConfig, Files, Commands, Users, NTP, Disks, InfrastructureImage, InfrastructureSize, FailureDomain, Metadata, References, Other)
}

// The extension in a provider's manager: the whole of what its main adds.
func ExampleNew() {
	run := func(ctx context.Context) error {
		mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
		if err != nil {
			return err
		}
		ext, err := extensionserver.New(mgr.GetClient(), extensionserver.Options{
			// By digest: a tag could be moved to other content.
			UpgraderImage: "registry.example/upgradekit-upgrader@sha256:" + strings.Repeat("0", 64),
			// The SHA256SUMS of each version's bundle, from the release
			// process (a mounted ConfigMap), never from the image.
			BundleChecksumsDir: "/etc/upgradekit/bundle-checksums",
			UpdaterOptions:     capi.UpdaterOptions{EventRecorder: mgr.GetEventRecorder("upgradekit")},
		})
		if err != nil {
			return err
		}
		if err := mgr.Add(ext); err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
	_ = run
}
