package capi

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// findNode finds the Node whose spec.providerID is id. The name found last
// time is tried first with a Get (one object, not a list of every node on
// every call) and used if its providerID still matches; otherwise all
// Nodes are listed, and two Nodes with the same providerID are an error:
// updating either could update the wrong machine.
func (u *MachineUpdater) findNode(ctx context.Context, c client.Client, cluster types.NamespacedName, id string) (*corev1.Node, error) {
	cacheKey := cluster.String() + "\x00" + id
	u.mu.Lock()
	name, ok := u.nodeNames[cacheKey]
	u.mu.Unlock()
	if ok {
		var n corev1.Node
		err := c.Get(ctx, types.NamespacedName{Name: name}, &n)
		if err == nil && n.Spec.ProviderID == id {
			return &n, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var found []*corev1.Node
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == id {
			found = append(found, &nodes.Items[i])
		}
	}
	switch len(found) {
	case 0:
		u.mu.Lock()
		delete(u.nodeNames, cacheKey)
		u.mu.Unlock()
		return nil, fmt.Errorf("%w with spec.providerID %s", errNoNode, errtext.Quote(id))
	case 1:
		u.mu.Lock()
		u.nodeNames[cacheKey] = found[0].Name
		u.mu.Unlock()
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, n := range found {
		names[i] = n.Name
	}
	return nil, fmt.Errorf("%w with spec.providerID %s: %s", errAmbiguousNode, errtext.Quote(id), errtext.Clip(strings.Join(names, ", ")))
}

// nodeGoneConfigMap is the ConfigMap, in the upgrader pods' namespace of
// the workload cluster, where MachineUpdater records since when each
// machine's Node has been missing (key "<namespace>.<machine>", value an
// RFC 3339 time): the Node, which holds every other piece of an update's
// state, is what is gone, and the node-gone grace must survive a restart
// of the extension.
const nodeGoneConfigMap = "upgradekit-nodes-gone"

// nodeGoneKey is the ConfigMap key of a machine ("namespace/name"):
// namespaces have no dots, so "namespace.name" is unique.
func nodeGoneKey(machine string) string { return strings.Replace(machine, "/", ".", 1) }

// nodeMissingFor returns how long the machine's node has been missing,
// counting from the first call that did not find it, as recorded in
// nodeGoneConfigMap (and in memory, when the record cannot be written:
// then a restarted extension starts counting again).
func (u *MachineUpdater) nodeMissingFor(ctx context.Context, c client.Client, machine string, now time.Time) time.Duration {
	u.mu.Lock()
	since, ok := u.missingSince[machine]
	if !ok {
		since = now
		u.missingSince[machine] = now
	}
	u.mu.Unlock()
	key := nodeGoneKey(machine)
	var cm corev1.ConfigMap
	err := c.Get(ctx, types.NamespacedName{Namespace: u.podNamespace, Name: nodeGoneConfigMap}, &cm)
	switch {
	case err == nil:
		if t, perr := time.Parse(time.RFC3339, cm.Data[key]); perr == nil {
			if t.Before(since) {
				since = t
			}
			break
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = since.UTC().Format(time.RFC3339)
		_ = c.Update(ctx, &cm) // a conflict is retried on the next call
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: u.podNamespace, Name: nodeGoneConfigMap,
			Labels: map[string]string{nodepod.LabelManagedBy: nodepod.ManagedByValue}},
			Data: map[string]string{key: since.UTC().Format(time.RFC3339)}}
		_ = c.Create(ctx, &cm) // no namespace yet: counted in memory only
	}
	return now.Sub(since)
}

// nodeFound forgets that the machine's node was missing. The ConfigMap is
// read only when this process saw it missing, or once per process and
// machine otherwise, so that found nodes cost no extra read on every call.
func (u *MachineUpdater) nodeFound(ctx context.Context, c client.Client, machine string) {
	u.mu.Lock()
	_, wasMissing := u.missingSince[machine]
	delete(u.missingSince, machine)
	checked := u.goneChecked[machine]
	u.goneChecked[machine] = true
	u.mu.Unlock()
	if !wasMissing && checked {
		return
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: u.podNamespace, Name: nodeGoneConfigMap}, &cm); err != nil {
		return
	}
	if _, ok := cm.Data[nodeGoneKey(machine)]; ok {
		delete(cm.Data, nodeGoneKey(machine))
		_ = c.Update(ctx, &cm) // best effort; a failed update is retried by the next process that finds the node
	}
}
