// Package extensionserver is upgradekit's Cluster API in-place update
// runtime extension, ready to embed: one constructor gives the server, the
// hook catalog and the three handlers (CanUpdateMachine,
// CanUpdateMachineSet, UpdateMachine) of package capi, wired as they must
// be for the in-place contract to hold. A provider's main starts it in a
// few lines, alone or in its controller-runtime manager:
//
//	ext, err := extensionserver.New(mgr.GetClient(), extensionserver.Options{
//		UpgraderImage:      "registry.example/upgradekit-upgrader@sha256:<digest>",
//		BundleChecksumsDir: "/etc/upgradekit/bundle-checksums",
//		UpdaterOptions:     capi.UpdaterOptions{EventRecorder: mgr.GetEventRecorder("upgradekit")},
//	})
//	if err != nil {
//		return err
//	}
//	if err := mgr.Add(ext); err != nil { // or ext.Start(ctx)
//		return err
//	}
//
// What New sets up:
//
//   - CanUpdate* accept only what UpdateMachine applies and verifies: the
//     Kubernetes version (Options.Categories narrows it), the kubelet's
//     extra arguments, the control plane's static pod configuration and the
//     KubeadmConfig's inline files; with capi.WorkloadReachableCheck (a
//     cluster whose kubeconfig secret the extension cannot read, say in a
//     namespace without its RoleBindings, is declined: UpdateMachine could
//     never reach it), capi.ControlPlaneSkewCheck, and,
//     with UpdaterOptions.Images, a Failure (capi.ErrVersionNotConfigured,
//     asked again by Cluster API, never remembered as a decline) for a
//     version that has no bundle, and one for a version that has no
//     bundle checksums;
//   - what runs as root on the nodes is pinned: upgrader images by digest
//     (AllowMutableUpgraderImages accepts tags), and each plan's bundle
//     step verifies the target version's SHA-256 checksums
//     (BundleChecksums, BundleChecksumsDir) on the node before it runs
//     anything staged (AllowUnverifiedBundles skips that); both
//     opt-outs are logged as warnings; a bundle whose checksums lack what
//     a step not left out by SkipSteps needs (etcdctl for the first
//     control plane's etcd snapshot, say) is refused at start-up, not
//     found missing on a drained node;
//   - UpdateMachine checks every request against the live Machine, drains
//     the node, runs the kubeadm plan in an upgrader pod built from the
//     image of the target version, staged from the image's /staging
//     (StageFrom), with the steps the bundle does not carry left out
//     (SkipSteps), in a namespace it creates with the privileged Pod
//     Security level when missing, and refuses when it exists without
//     upgradekit's managed-by label (EnsureNamespace); a workload cluster
//     it cannot reach is waited for at most
//     UpdaterOptions.WorkloadUnreachableTimeout, counted in the management
//     cluster;
//   - with UpdaterOptions.Gates, UpdateMachine asks gates (a maintenance
//     window, a concurrency limit across replicas, a soak time, the
//     workloads, the control plane, a circuit breaker, Prometheus alerts)
//     before it touches a node;
//   - beside the hooks, at gatereport.Path, what those gates would answer
//     now about machines of a cluster, taking nothing (no concurrency
//     slot), for a preview (gatereport); each machine is read from the
//     management cluster and must belong to the cluster asked about;
//   - TLS from the certificate directory, HTTP/1.1 only, handler timeouts
//     announced in discovery; metrics on controller-runtime's registry;
//   - limits on what any caller can make the server hold
//     (Options.HTTPLimits): request bodies of at most 2 MiB (413), 16
//     requests at once (429), 32 KiB of header (431), read, write and idle
//     timeouts, so that a caller who reaches the port can neither exhaust
//     the extension's memory nor keep connections open.
//
// Options is one struct whose zero fields are their defaults; it embeds
// capi.UpdaterOptions, which configure UpdateMachine (and, for Images,
// Logger, EventRecorder and Metrics, CanUpdate* too). Every field is
// checked by New (and by Validate, for a command checking its flags
// before it connects anywhere); errors are *capi.OptionError, match
// capi.ErrInvalidOption and name the field ("Options.SkipSteps",
// "UpdaterOptions.Gates").
//
// What it is not: it does not serve metrics or health probes (a manager's
// servers do), create the ExtensionConfig, or provision certificates
// (cert-manager does, see examples/inplace-extension/deploy). For other
// shapes (your own updaters, your own UpdateMachine) use package capi
// directly; Handlers gives these handlers to a runtime server of your own.
// examples/inplace-extension is a command line over this package.
package extensionserver
