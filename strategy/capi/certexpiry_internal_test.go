package capi

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// readOnly hides a client's writer.
type readOnly struct{ client.Reader }

// TestForgetCertificatesExpiry: the stale certificate expiry date goes
// from the KubeadmConfig only after a control plane's update to a new
// version (kubeadm upgrade renewed the certificates), nothing else of the
// KubeadmConfig changes, and a read-only management client changes
// nothing.
func TestForgetCertificatesExpiry(t *testing.T) {
	const date = "2027-01-06T00:00:00Z"
	succeeded := metav1.Now()
	cp := &observe.UpdateRecord{Role: string(kubeadm.RoleControlPlane), FromVersion: "v1.35.4", Version: "v1.36.3", Succeeded: &succeeded}
	for _, tc := range []struct {
		name     string
		rec      observe.UpdateRecord
		readOnly bool
		removed  bool
	}{
		{name: "control plane, new version", rec: *cp, removed: true},
		{name: "first control plane", rec: func() observe.UpdateRecord { r := *cp; r.Role = string(kubeadm.RoleFirstControlPlane); return r }(), removed: true},
		{name: "worker", rec: func() observe.UpdateRecord { r := *cp; r.Role = string(kubeadm.RoleWorker); return r }()},
		{name: "same version: files or kubelet arguments only", rec: func() observe.UpdateRecord { r := *cp; r.FromVersion = r.Version; return r }()},
		{name: "not proven done", rec: func() observe.UpdateRecord { r := *cp; r.Succeeded = nil; return r }()},
		{name: "read-only management client", rec: *cp, readOnly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			require.NoError(t, bootstrapv1.AddToScheme(scheme))
			require.NoError(t, clusterv1.AddToScheme(scheme))
			cfg := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cp-1", Annotations: map[string]string{
				clusterv1.MachineCertificatesExpiryDateAnnotation: date, "keep": "me"}}}
			c := fakeclient.NewClientBuilder().WithScheme(scheme).WithObjects(cfg).Build()
			u := &MachineUpdater{mgmt: c}
			if tc.readOnly {
				u.mgmt = readOnly{c}
			}
			m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cp-1"}}
			m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: "cp-1"}
			rec := tc.rec
			require.NoError(t, u.forgetCertificatesExpiry(context.Background(), &call{machine: m, log: logr.Discard()}, &rec))

			var got bootstrapv1.KubeadmConfig
			require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(cfg), &got))
			want := map[string]string{clusterv1.MachineCertificatesExpiryDateAnnotation: date, "keep": "me"}
			if tc.removed {
				want = map[string]string{"keep": "me"}
			}
			require.Equal(t, want, got.Annotations)
		})
	}
}
