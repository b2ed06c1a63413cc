// Package apiserver starts a real kube-apiserver and etcd with the Cluster API
// CRDs installed, for integration tests of code built on upgradekit.
//
// It wraps controller-runtime's envtest with three things it does not do on
// its own:
//
//   - it installs the CAPI v1beta2 CRDs (core, kubeadm bootstrap, kubeadm
//     control plane) straight from the sigs.k8s.io/cluster-api module your
//     build already depends on, so the schema and validation are exactly the
//     ones that version ships;
//   - it returns a controller-runtime client whose scheme knows core
//     Kubernetes types and CAPI core, bootstrap and controlplane v1beta2;
//   - it finds the kube-apiserver and etcd binaries that
//     hack/envtest-assets.sh builds from the Go module proxy, and when they are
//     missing it says which command produces them instead of failing with an
//     exec error.
//
// Prefer it over the in-memory fake cluster (package fake) whenever the test
// is about what the API server does: validation, defaulting, status
// subresources, resourceVersion conflicts, the Eviction API. It is not a
// cluster: no kubelet, scheduler or controller-manager runs, so Pods never
// start, Deployments create no Pods and PodDisruptionBudget status is whatever
// the test writes.
//
// Binaries are looked up in this order: [WithAssetsDir], the KUBEBUILDER_ASSETS
// environment variable, then the cache directory hack/envtest-assets.sh writes
// to for the versions pinned in [DefaultKubernetesVersion] and
// [DefaultEtcdVersion].
//
// In tests, [StartForTest] skips a test whose binaries are missing, with
// the reason and the command that builds them, so `go test ./...` passes
// on a fresh clone; set [RequireEnvVar] (as `make test` and CI do) to turn
// that skip into a failure, and [SkipEnvVar] to skip such tests even when
// the binaries are there.
package apiserver
