package capi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/reference"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// refRecorder keeps each Event as "Type Reason Kind ns/name uid
// [related Kind ns/name]: note", resolving the objects the way
// client-go's recorder does (reference.GetReference), with a scheme that
// knows no Cluster API type: an object without its kind is an error.
type refRecorder struct {
	t      *testing.T
	events []string
}

func (r *refRecorder) Eventf(regarding, related runtime.Object, typ, reason, _, note string, args ...any) {
	s := runtime.NewScheme()
	ref, err := reference.GetReference(s, regarding)
	require.NoError(r.t, err)
	e := fmt.Sprintf("%s %s %s %s/%s %s", typ, reason, ref.Kind, ref.Namespace, ref.Name, ref.UID)
	if related != nil {
		rel, err := reference.GetReference(s, related)
		require.NoError(r.t, err)
		e += fmt.Sprintf(" [related %s %s/%s]", rel.Kind, rel.Namespace, rel.Name)
	}
	r.events = append(r.events, e+": "+fmt.Sprintf(note, args...))
}

func (r *refRecorder) take() []string {
	out := r.events
	r.events = nil
	return out
}

func controllerRef(apiVersion, kind, name, uid string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: new(true)}}
}

// machineSetOf is MachineSet md-0-abc, owned by MachineDeployment md-0
// when owned.
func machineSetOf(owned bool) *clusterv1.MachineSet {
	ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "md-0-abc", UID: "uid-ms"},
		Spec: clusterv1.MachineSetSpec{ClusterName: "demo"}}
	if owned {
		ms.OwnerReferences = controllerRef(clusterv1.GroupVersion.String(), "MachineDeployment", "md-0", "uid-md")
	}
	return ms
}

// TestUpdateMachineFailureEventOnTheOwner: a failed update is recorded,
// once however often Cluster API asks again, on the Machine and on the
// object `kubectl describe` is run on when the rollout stops: its
// KubeadmControlPlane, or its MachineDeployment (found through its
// MachineSet), with the Machine as the related object; on the MachineSet
// when no MachineDeployment owns it or it cannot be read; on nothing
// more for a Machine nothing owns.
func TestUpdateMachineFailureEventOnTheOwner(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cp         bool
		owners     []metav1.OwnerReference
		machineSet *clusterv1.MachineSet // in the management cluster
		want       string                // the owner's Event; "" for none
	}{
		{name: "a KubeadmControlPlane's", cp: true, owners: controllerRef(controlplanev1.GroupVersion.String(), "KubeadmControlPlane", "demo-cp", "uid-kcp"),
			want: "KubeadmControlPlane default/demo-cp uid-kcp"},
		{name: "a MachineDeployment's", owners: controllerRef(clusterv1.GroupVersion.String(), "MachineSet", "md-0-abc", "uid-ms"), machineSet: machineSetOf(true),
			want: "MachineDeployment default/md-0 uid-md"},
		{name: "a bare MachineSet's", owners: controllerRef(clusterv1.GroupVersion.String(), "MachineSet", "md-0-abc", "uid-ms"), machineSet: machineSetOf(false),
			want: "MachineSet default/md-0-abc uid-ms"},
		{name: "a MachineSet's that cannot be read", owners: controllerRef(clusterv1.GroupVersion.String(), "MachineSet", "md-0-abc", "uid-ms"),
			want: "MachineSet default/md-0-abc uid-ms"},
		{name: "a MachineSet's of the same name, another UID", owners: controllerRef(clusterv1.GroupVersion.String(), "MachineSet", "md-0-abc", "uid-old"), machineSet: machineSetOf(true),
			want: "MachineSet default/md-0-abc uid-old"},
		{name: "nobody's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			live := newLiveMachine(tc.cp)
			live.machine.OwnerReferences = tc.owners
			mgmt := live.client(t)
			if tc.machineSet != nil {
				require.NoError(t, mgmt.Create(t.Context(), tc.machineSet))
			}
			rec := &refRecorder{t: t}
			u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: mgmt, EventRecorder: rec})
			require.NoError(t, err)
			call := func() runtimehooksv1.UpdateMachineResponse {
				var resp runtimehooksv1.UpdateMachineResponse
				u.UpdateMachine(t.Context(), live.request(t), &resp)
				return resp
			}
			requireWaiting(t, call(), "upgrade of node cp-0")
			require.Equal(t, []string{"Normal InPlaceUpdateStarted Machine default/cp-0 uid-cp-0: In-place update of node cp-0 from v1.35.4 to v1.36.1 started"}, rec.take())
			finishPod(t, t.Context(), pc.c, pc.onlyPod(), kubeadm.StepKubeadmUpgrade, 3)
			for range 3 { // Cluster API asks again after each Failure
				resp := call()
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Contains(t, resp.Message, observe.FailureStepFailed)
			}
			evs := rec.take()
			require.Len(t, evs, map[bool]int{true: 2, false: 1}[tc.want != ""], "%q", evs)
			require.Regexp(t, `^Warning InPlaceUpdateFailed Machine default/cp-0 uid-cp-0: StepFailed: .*kubeadm-upgrade`, evs[0])
			if tc.want != "" {
				want := "Warning InPlaceUpdateFailed " + tc.want + " [related Machine default/cp-0]: Machine cp-0: " + evs[0][len("Warning InPlaceUpdateFailed Machine default/cp-0 uid-cp-0: "):]
				if diff := cmp.Diff(want, evs[1]); diff != "" {
					t.Fatalf("the owner's Event (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestUpdateMachineFailureWithoutNodeEventOnTheOwner: a failure found
// before any node is known (two Nodes claim the Machine's providerID) is
// recorded on the owner too, once however often Cluster API asks again.
func TestUpdateMachineFailureWithoutNodeEventOnTheOwner(t *testing.T) {
	pc := newPodsCluster(t)
	createNode(t, t.Context(), pc.c, "cp-0-twin", "docker:////cp-0", "v1.35.4")
	live := newLiveMachine(true)
	live.machine.OwnerReferences = controllerRef(controlplanev1.GroupVersion.String(), "KubeadmControlPlane", "demo-cp", "uid-kcp")
	rec := &refRecorder{t: t}
	u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: live.client(t), EventRecorder: rec})
	require.NoError(t, err)
	for range 3 {
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), live.request(t), &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureAmbiguousNode)
	}
	evs := rec.take()
	require.Len(t, evs, 2, "%q", evs)
	require.Regexp(t, `^Warning InPlaceUpdateFailed Machine default/cp-0 uid-cp-0: AmbiguousNode: `, evs[0])
	require.Regexp(t, `^Warning InPlaceUpdateFailed KubeadmControlPlane default/demo-cp uid-kcp \[related Machine default/cp-0\]: Machine cp-0: AmbiguousNode: `, evs[1])
}

// TestUpdateMachineFailureEventNeedsTheLiveMachine: without
// WithManagementReader the request's Machine, which Cluster API sends
// without owner references, is all there is: the failure is recorded on
// the Machine only.
func TestUpdateMachineFailureEventNeedsTheLiveMachine(t *testing.T) {
	pc := newPodsCluster(t)
	rec := &refRecorder{t: t}
	u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, EventRecorder: rec})
	require.NoError(t, err)
	req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)
	req.Desired.Machine.OwnerReferences = controllerRef(controlplanev1.GroupVersion.String(), "KubeadmControlPlane", "demo-cp", "uid-kcp") // not trusted
	var resp runtimehooksv1.UpdateMachineResponse
	u.UpdateMachine(t.Context(), req, &resp)
	requireWaiting(t, resp, "upgrade of node cp-0")
	finishPod(t, t.Context(), pc.c, pc.onlyPod(), kubeadm.StepKubeadmUpgrade, 3)
	u.UpdateMachine(t.Context(), req, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	evs := rec.take()
	require.Len(t, evs, 2, "%q", evs)
	require.Regexp(t, `^Warning InPlaceUpdateFailed Machine default/cp-0 : StepFailed`, evs[1])
}

// canUpdateSetRequest is a CanUpdateMachineSet request for MachineSet
// md-0-abc with settings, changing nothing.
func canUpdateSetRequest(t *testing.T, settings map[string]string) *runtimehooksv1.CanUpdateMachineSetRequest {
	ms := clusterv1.MachineSet{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "md-0-abc"}, Spec: clusterv1.MachineSetSpec{ClusterName: "demo"}}
	desired := ms.DeepCopy()
	desired.Name = "md-0-def"
	tmpl := raw(t, map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachineTemplate",
		"metadata": map[string]any{"name": "md-0", "namespace": "default"}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}})
	return &runtimehooksv1.CanUpdateMachineSetRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: settings},
		Current:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms, InfrastructureMachineTemplate: tmpl},
		Desired:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *desired, InfrastructureMachineTemplate: tmpl},
	}
}

// TestCanUpdateFailureEventOnTheObjectAsked: a CanUpdate* Failure (here an
// ExtensionConfig setting with a typo), which Cluster API v1.14 only logs
// and retries, is recorded as a Warning Event naming the setting on the
// object whose rollout it stops, once however often Cluster API asks
// again: the MachineDeployment of a CanUpdateMachineSet request's current
// MachineSet (read live: the request carries no UID or owner), the
// KubeadmControlPlane of a CanUpdateMachine request's Machine. Another
// Failure message is recorded again; an answer that is not a Failure
// forgets the last one, so the same Failure after it is recorded again.
func TestCanUpdateFailureEventOnTheObjectAsked(t *testing.T) {
	live := newLiveMachine(true)
	live.machine.OwnerReferences = controllerRef(controlplanev1.GroupVersion.String(), "KubeadmControlPlane", "demo-cp", "uid-kcp")
	mgmt := live.client(t)
	require.NoError(t, mgmt.Create(t.Context(), machineSetOf(true)))
	rec := &refRecorder{t: t}
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", diff.CategoryKubernetesVersion)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadmUpdater), capi.ExtensionOptions{EventRecorder: rec, ManagementReader: mgmt})
	require.NoError(t, err)
	askSet := func(settings map[string]string) runtimehooksv1.ResponseStatus {
		var resp runtimehooksv1.CanUpdateMachineSetResponse
		ext.CanUpdateMachineSet(t.Context(), canUpdateSetRequest(t, settings), &resp)
		return resp.Status
	}
	typo := map[string]string{"upgradekit.io/ignroe": "infrastructure.spec.additionalTags"}
	for range 3 {
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, askSet(typo))
	}
	wantSet := `Warning InPlaceUpdateCheckFailed MachineDeployment default/md-0 uid-md [related MachineSet default/md-0-abc]: CanUpdateMachineSet for MachineSet md-0-abc failed, so Cluster API changes nothing and asks again: ` +
		`invalid option: unknown setting "upgradekit.io/ignroe" (known: upgradekit.io/disabled, upgradekit.io/ignore)`
	require.Equal(t, []string{wantSet}, rec.take())

	require.Equal(t, runtimehooksv1.ResponseStatusFailure, askSet(map[string]string{capi.SettingDisabled: "yes"}))
	require.Equal(t, []string{`Warning InPlaceUpdateCheckFailed MachineDeployment default/md-0 uid-md [related MachineSet default/md-0-abc]: CanUpdateMachineSet for MachineSet md-0-abc failed, so Cluster API changes nothing and asks again: ` +
		`invalid option: setting upgradekit.io/disabled: "yes" is not true or false`}, rec.take(), "another Failure")
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, askSet(nil), "the typo fixed")
	require.Empty(t, rec.take())
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, askSet(typo))
	require.Equal(t, []string{wantSet}, rec.take(), "the typo again, after an answer")

	cur, des, curCfg, desCfg, curInfra, desInfra := contractPair()
	cur.Name, des.Name = "cp-0", "cp-0"
	for range 3 {
		resp := canUpdateMachine(t, ext, typo, cur, des, curCfg, desCfg, curInfra, desInfra)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
	}
	require.Equal(t, []string{`Warning InPlaceUpdateCheckFailed KubeadmControlPlane default/demo-cp uid-kcp [related Machine default/cp-0]: CanUpdateMachine for Machine cp-0 failed, so Cluster API changes nothing and asks again: ` +
		`invalid option: unknown setting "upgradekit.io/ignroe" (known: upgradekit.io/disabled, upgradekit.io/ignore)`}, rec.take())

	// A request for an object that is not there (Cluster API's cache
	// ahead of the API server, a forged request): nothing to record on,
	// and the next Failure tries again.
	ghost := canUpdateSetRequest(t, typo)
	ghost.Current.MachineSet.Name = "md-0-gone"
	var resp runtimehooksv1.CanUpdateMachineSetResponse
	ext.CanUpdateMachineSet(t.Context(), ghost, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
	require.Empty(t, rec.take())
	require.NoError(t, mgmt.Create(t.Context(), &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "md-0-gone", UID: "uid-ms2"},
		Spec: clusterv1.MachineSetSpec{ClusterName: "demo"}}))
	ext.CanUpdateMachineSet(t.Context(), ghost, &resp)
	require.Equal(t, []string{`Warning InPlaceUpdateCheckFailed MachineSet default/md-0-gone uid-ms2: CanUpdateMachineSet for MachineSet md-0-gone failed, so Cluster API changes nothing and asks again: ` +
		`invalid option: unknown setting "upgradekit.io/ignroe" (known: upgradekit.io/disabled, upgradekit.io/ignore)`}, rec.take())
}

// TestExtensionEventRecorderNeedsBoth: a recorder without a reader (or
// the other way round) is refused: Events without the UID `kubectl
// describe` matches would be recorded where nobody sees them.
func TestExtensionEventRecorderNeedsBoth(t *testing.T) {
	kubeadmUpdater, err := strategy.ForCategories("kubeadm", diff.CategoryKubernetesVersion)
	require.NoError(t, err)
	mgmt := newLiveMachine(false).client(t)
	for name, opt := range map[string]capi.ExtensionOptions{
		"no reader":   {EventRecorder: &refRecorder{t: t}},
		"no recorder": {ManagementReader: mgmt},
	} {
		_, err := capi.NewExtension(strategy.Updaters(kubeadmUpdater), opt)
		require.ErrorIs(t, err, capi.ErrInvalidOption, name)
		require.ErrorContains(t, err, "ExtensionOptions.EventRecorder", name)
	}
	_, err = capi.NewExtension(strategy.Updaters(kubeadmUpdater), capi.ExtensionOptions{EventRecorder: nil, ManagementReader: nil})
	require.NoError(t, err, "neither: no Events")
}
