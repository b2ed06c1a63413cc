package capi

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/upgradekit/upgradekit/diff"
)

// kubeletLocalModeGate is kubeadm's ControlPlaneKubeletLocalMode feature
// gate: a control plane node's kubelet talks to its own API server rather
// than to the control plane endpoint. Alpha in kubeadm v1.31, GA and
// locked on in v1.35, removed in v1.36 (the behaviour stays: `kubeadm
// upgrade` rewrites kubelet.conf to the local API server, unconditionally
// since v1.35).
const kubeletLocalModeGate = "ControlPlaneKubeletLocalMode"

const featureGatesField = "bootstrap.spec.clusterConfiguration.featureGates"

// versionImplied reports whether c is a change Cluster API makes only
// because of the version change from -> to, and that the version change
// itself brings about on the node, so that whoever applies the version
// applies it too: KubeadmControlPlane (v1.14, DefaultFeatureGates) sets
// featureGates.ControlPlaneKubeletLocalMode: true on its KubeadmConfigs
// for 1.31 <= version < 1.36 and drops it from 1.36, so a v1.35 -> v1.36
// update of a control plane machine removes it. kubeadm v1.35 had it
// locked on, so the node already runs in local mode, and `kubeadm upgrade`
// keeps it so at v1.36, where the gate no longer exists (Cluster API
// removes it from kubeadm-config before the upgrade).
//
// Only that removal, of the value true, is implied. Its addition (a
// v1.30 -> v1.31 update) is not: switching a running kubelet to the local
// API server is a change no updater applies here, so it stays a
// ControlPlaneConfig change and is declined unless something covers it.
func versionImplied(c diff.Change, from, to string) bool {
	if c.Object != diff.ObjectBootstrap || c.Op != diff.OpRemove || !crossesKubeletLocalModeRemoval(from, to) {
		return false
	}
	switch strings.TrimPrefix(c.Field, featureGatesField) {
	case "." + kubeletLocalModeGate:
		return c.Old == true
	case "":
		// The gate was the only one: the whole map goes.
		return reflect.DeepEqual(c.Old, map[string]any{kubeletLocalModeGate: true})
	}
	return false
}

// crossesKubeletLocalModeRemoval: from is at v1.35 or later (the gate
// locked on) and to is at v1.36 or later (the gate gone), pre-releases
// counting as their release, as Cluster API counts them.
func crossesKubeletLocalModeRemoval(from, to string) bool {
	f, err := version.ParseSemantic(strings.TrimSpace(from))
	if err != nil {
		return false
	}
	t, err := version.ParseSemantic(strings.TrimSpace(to))
	if err != nil {
		return false
	}
	minor := func(v *version.Version) *version.Version { return version.MajorMinor(v.Major(), v.Minor()) }
	return f.LessThan(t) && !minor(f).LessThan(version.MajorMinor(1, 35)) && !minor(t).LessThan(version.MajorMinor(1, 36))
}

// withVersionImplied returns cs with the changes versionImplied finds
// categorised as the Kubernetes version change they come with, so that the
// updater applying the version covers them and nothing else does.
func withVersionImplied(cs diff.ChangeSet, from, to string) diff.ChangeSet {
	var out diff.ChangeSet
	for i, c := range cs.Changes {
		if !versionImplied(c, from, to) {
			continue
		}
		if out.Changes == nil {
			out = cs
			out.Changes = append([]diff.Change(nil), cs.Changes...)
		}
		out.Changes[i].Category = diff.CategoryKubernetesVersion
	}
	if out.Changes == nil {
		return cs
	}
	return out
}
