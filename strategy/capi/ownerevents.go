package capi

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// Why Events go on owners: Cluster API v1.14 writes a fixed text on the
// Machine's Updating condition when UpdateMachine answers Failure ("please
// check controller logs"), and only logs a CanUpdate* Failure, from a
// reconcile of the MachineDeployment or KubeadmControlPlane that it fails.
// `kubectl describe` of that object lists the Events whose regarding
// object carries its UID, so the UID comes from the live objects' owner
// references (the hook requests carry none).

// machineOwnerReference is the object a user describes to see why m's
// update is stuck: the MachineDeployment of a MachineSet's Machine (its
// MachineSet when that is owned by nothing else, or cannot be read), the
// controller otherwise (a KubeadmControlPlane). nil when m has no
// controller. The MachineSet is read through r (get on MachineSets); an
// error reading it is returned with the MachineSet's reference.
func machineOwnerReference(ctx context.Context, r client.Reader, m *clusterv1.Machine) (*corev1.ObjectReference, error) {
	owner := metav1.GetControllerOf(m)
	if owner == nil {
		return nil, nil
	}
	ref := referenceTo(m.Namespace, owner)
	if !isClusterAPIKind(owner, "MachineSet") || r == nil {
		return ref, nil
	}
	var ms clusterv1.MachineSet
	if err := r.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: owner.Name}, &ms); err != nil {
		return ref, fmt.Errorf("reading MachineSet %s/%s, the owner of Machine %s: %w", m.Namespace, owner.Name, m.Name, err)
	}
	if ms.UID != owner.UID {
		return ref, fmt.Errorf("MachineSet %s/%s is not the one that owns Machine %s (uid %s, owner reference %s)", m.Namespace, owner.Name, m.Name, ms.UID, owner.UID)
	}
	return machineSetOwnerReference(&ms), nil
}

// machineSetOwnerReference is ms's MachineDeployment, or ms itself when
// no MachineDeployment controls it.
func machineSetOwnerReference(ms *clusterv1.MachineSet) *corev1.ObjectReference {
	if owner := metav1.GetControllerOf(ms); owner != nil && isClusterAPIKind(owner, "MachineDeployment") {
		return referenceTo(ms.Namespace, owner)
	}
	return &corev1.ObjectReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Namespace: ms.Namespace, Name: ms.Name, UID: ms.UID}
}

func isClusterAPIKind(o *metav1.OwnerReference, kind string) bool {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	return err == nil && gv.Group == clusterv1.GroupVersion.Group && o.Kind == kind
}

func referenceTo(namespace string, o *metav1.OwnerReference) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: namespace, Name: o.Name, UID: o.UID}
}

// ownerEvent records a failed update's Event on m's owner (see
// machineOwnerReference) as well, with m as the related object, when a
// recorder is set and m is the live Machine (UpdaterOptions.ManagementReader: the
// request's copy has no owner references).
func (u *MachineUpdater) ownerEvent(ctx context.Context, log logr.Logger, m *clusterv1.Machine, note string) {
	if u.recorder == nil || u.mgmt == nil {
		return
	}
	ref, err := machineOwnerReference(ctx, u.mgmt, m)
	if err != nil {
		log.V(1).Info("the Machine's MachineDeployment is unknown: the Event goes on its MachineSet", "error", err.Error())
	}
	if ref == nil {
		return
	}
	obj := m.DeepCopy()
	obj.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	u.recorder.Eventf(ref, obj, eventWarning, observe.EventReasonUpdateFailed, "Update", "Machine %s: %s", m.Name, note)
}

// canUpdateEvents records, for an Extension, a Warning Event on the object
// Cluster API asked about when a CanUpdate* answer is a Failure, once per
// failure (a retried Failure with the same message records nothing).
type canUpdateEvents struct {
	recorder events.EventRecorder
	mgmt     client.Reader

	mu   sync.Mutex
	last map[string]string // hook + request object -> message last recorded
}

// canUpdateSubject is the object a CanUpdate* request is about.
type canUpdateSubject struct {
	hook      string // CanUpdateMachine or CanUpdateMachineSet
	kind      string // Machine or MachineSet
	namespace string
	name      string
}

func (s canUpdateSubject) key() string {
	return s.hook + "\x00" + s.namespace + "/" + s.name
}

// answered records err's Event (once) when err is a Failure, and forgets
// the subject's last failure otherwise.
func (ev *canUpdateEvents) answered(ctx context.Context, log logr.Logger, s canUpdateSubject, err error) {
	if ev == nil || s.name == "" {
		return
	}
	key := s.key()
	ev.mu.Lock()
	if err == nil {
		delete(ev.last, key)
		ev.mu.Unlock()
		return
	}
	msg := errtext.Clip(err.Error())
	prev, known := ev.last[key]
	if known && prev == msg {
		ev.mu.Unlock()
		return
	}
	if !known && len(ev.last) >= maxRememberedFailures {
		for k := range ev.last { // forget one: a repeat may be recorded again
			delete(ev.last, k)
			break
		}
	}
	ev.last[key] = msg
	ev.mu.Unlock()

	regarding, related, err := ev.target(ctx, s)
	if err != nil {
		log.Info("cannot record the Failure as an Event: the object Cluster API asked about is not readable", "error", err.Error())
		ev.mu.Lock()
		delete(ev.last, key) // try again on the next Failure
		ev.mu.Unlock()
		return
	}
	var rel runtime.Object // a nil *ObjectReference is not a nil Object
	if related != nil {
		rel = related
	}
	ev.recorder.Eventf(regarding, rel, eventWarning, observe.EventReasonCanUpdateFailed, "CanUpdate",
		"%s for %s %s failed, so Cluster API changes nothing and asks again: %s", s.hook, s.kind, s.name, msg)
}

// target finds the object to record s's Failure on, and the object asked
// about (the related object: client-go's recorder counts an Event with
// the same reason, regarding and related objects as a repeat of the last,
// whatever its note, so Failures for two Machines of one
// KubeadmControlPlane stay two Events).
func (ev *canUpdateEvents) target(ctx context.Context, s canUpdateSubject) (regarding, related *corev1.ObjectReference, _ error) {
	key := types.NamespacedName{Namespace: s.namespace, Name: s.name}
	switch s.kind {
	case "MachineSet":
		var ms clusterv1.MachineSet
		if err := ev.mgmt.Get(ctx, key, &ms); err != nil {
			return nil, nil, fmt.Errorf("reading MachineSet %s: %w", key, err)
		}
		self := &corev1.ObjectReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Namespace: ms.Namespace, Name: ms.Name, UID: ms.UID}
		if owner := machineSetOwnerReference(&ms); owner.Kind != "MachineSet" {
			return owner, self, nil
		}
		return self, nil, nil
	default:
		var m clusterv1.Machine
		if err := ev.mgmt.Get(ctx, key, &m); err != nil {
			return nil, nil, fmt.Errorf("reading Machine %s: %w", key, err)
		}
		self := &corev1.ObjectReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Namespace: m.Namespace, Name: m.Name, UID: m.UID}
		// A MachineSet that cannot be read leaves its own reference:
		// good enough to record on.
		if owner, _ := machineOwnerReference(ctx, ev.mgmt, &m); owner != nil {
			return owner, self, nil
		}
		return self, nil, nil
	}
}
