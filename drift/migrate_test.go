package drift_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/upgradekit/upgradekit/drift"
)

// The Karpenter v1beta1 -> v1 move, reduced to what matters for hashing:
// kubelet settings move from the NodePool template to the node class,
// expireAfter moves from spec.disruption into the template, and
// nodeClassRef.apiVersion becomes group.

type kubeletV1beta1 struct {
	MaxPods        *int32            `json:"maxPods,omitempty"`
	SystemReserved map[string]string `json:"systemReserved,omitempty"`
}

type nodeClassRefV1beta1 struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name"`
}

type templateSpecV1beta1 struct {
	Taints       []corev1.Taint                   `json:"taints,omitempty"`
	Requirements []corev1.NodeSelectorRequirement `json:"requirements" hash:"ignore"`
	NodeClassRef *nodeClassRefV1beta1             `json:"nodeClassRef"`
	Kubelet      *kubeletV1beta1                  `json:"kubelet,omitempty"`
}

type templateV1beta1 struct {
	ObjectMeta ObjectMeta          `json:"metadata,omitempty"`
	Spec       templateSpecV1beta1 `json:"spec"`
}

type nodePoolV1beta1 struct {
	Template   templateV1beta1 `json:"template"`
	Disruption struct {
		ExpireAfter         *metav1.Duration `json:"expireAfter,omitempty"`
		ConsolidationPolicy string           `json:"consolidationPolicy,omitempty"`
	} `json:"disruption"`
}

type nodeClassV1beta1 struct {
	AMIFamily string `json:"amiFamily"`
	Role      string `json:"role"`
}

type nodeClassV1 struct {
	AMISelectorTerms []struct {
		Alias string `json:"alias,omitempty"`
	} `json:"amiSelectorTerms"`
	Role    string          `json:"role"`
	Kubelet *kubeletV1beta1 `json:"kubelet,omitempty"`
}

func oldPool() nodePoolV1beta1 {
	var p nodePoolV1beta1
	p.Template.ObjectMeta.Labels = map[string]string{"team": "payments"}
	p.Template.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "payments", Effect: corev1.TaintEffectNoSchedule}}
	p.Template.Spec.NodeClassRef = &nodeClassRefV1beta1{APIVersion: "karpenter.k8s.aws/v1beta1", Kind: "EC2NodeClass", Name: "default"}
	p.Template.Spec.Kubelet = &kubeletV1beta1{MaxPods: ptr.To[int32](110), SystemReserved: map[string]string{"cpu": "100m"}}
	p.Disruption.ExpireAfter = &metav1.Duration{Duration: 720 * time.Hour}
	p.Disruption.ConsolidationPolicy = "WhenUnderutilized"
	return p
}

func oldClass() nodeClassV1beta1 {
	return nodeClassV1beta1{AMIFamily: "AL2023", Role: "KarpenterNodeRole"}
}

// convertPool is the v1beta1 -> v1 conversion of the hashed part of a
// NodePool: the v1 template (with expireAfter, without kubelet).
func convertPool(p nodePoolV1beta1) *NodeClaimTemplate {
	group := "karpenter.k8s.aws"
	return &NodeClaimTemplate{
		ObjectMeta: ObjectMeta{Labels: maps.Clone(p.Template.ObjectMeta.Labels), Annotations: maps.Clone(p.Template.ObjectMeta.Annotations)},
		Spec: NodeClaimTemplateSpec{
			Taints:       append([]corev1.Taint(nil), p.Template.Spec.Taints...),
			NodeClassRef: &NodeClassReference{Group: group, Kind: p.Template.Spec.NodeClassRef.Kind, Name: p.Template.Spec.NodeClassRef.Name},
			ExpireAfter:  p.Disruption.ExpireAfter,
		},
	}
}

// convertClass is the v1beta1 -> v1 conversion of the node class: the
// amiFamily becomes an alias term and the pool's kubelet moves in.
func convertClass(c nodeClassV1beta1, kubelet *kubeletV1beta1) *nodeClassV1 {
	out := &nodeClassV1{Role: c.Role, Kubelet: kubelet}
	out.AMISelectorTerms = append(out.AMISelectorTerms, struct {
		Alias string `json:"alias,omitempty"`
	}{Alias: "al2023@latest"})
	return out
}

const classPrefix = "nodeclass.upgradekit.io"

func TestMigrationWithoutMassDrift(t *testing.T) {
	ctx := context.Background()
	poolOld := mustStamper(t, mustHasher(t, "v1beta1"))
	poolNew := mustStamper(t, mustHasher(t, "v1"))
	classOld, err := drift.NewStamper(classPrefix, mustHasher(t, "v1beta1"))
	require.NoError(t, err)
	classNew, err := drift.NewStamper(classPrefix, mustHasher(t, "v1"))
	require.NoError(t, err)

	// The fleet before the migration: 7 nodes from the current spec, 3
	// from an earlier one (already drifted), one of the 7 with drift
	// recorded by another check.
	current := oldPool()
	earlier := oldPool()
	earlier.Template.Spec.Taints[0].Value = "legacy"
	var nodes []*metav1.ObjectMeta
	for i := range 10 {
		n := nodeClaim(fmt.Sprintf("node-%d", i))
		spec := current.Template
		if i >= 7 {
			spec = earlier.Template
		}
		_, err := poolOld.Stamp(n, &spec)
		require.NoError(t, err)
		_, err = classOld.Stamp(n, oldClass())
		require.NoError(t, err)
		nodes = append(nodes, n)
	}
	nodes[0].Annotations["example.com/drifted"] = "true"
	recorded := func(o metav1.Object) bool { return o.GetAnnotations()["example.com/drifted"] == "true" }
	objs := make([]metav1.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}

	// What a naive upgrade would do: change the hash (new schema) but keep
	// the version. Every node drifts.
	naive := mustStamper(t, mustHasher(t, "v1beta1"))
	naiveCheck, err := drift.NewStaticHash(naive, convertPool(current))
	require.NoError(t, err)
	rep, err := drift.DryRun(ctx, drift.NewDetector(naiveCheck), objs)
	require.NoError(t, err)
	require.Equal(t, 10, rep.Drifted, "a hash change without a version bump is mass drift")

	// The migration: a version bump for each stamp, translating the spec
	// faithfully.
	poolBump := drift.VersionBump{From: poolOld, To: poolNew, FromSpec: &current.Template, ToSpec: convertPool(current), RecordedDrift: recorded}
	classBump := drift.VersionBump{From: classOld, To: classNew, FromSpec: oldClass(), ToSpec: convertClass(oldClass(), current.Template.Spec.Kubelet)}

	snapshot := make([]map[string]string, len(nodes))
	for i, n := range nodes {
		snapshot[i] = maps.Clone(n.Annotations)
	}
	plan, err := drift.PlanVersionBump(ctx, objs, poolBump)
	require.NoError(t, err)
	for i, n := range nodes {
		require.Equal(t, snapshot[i], n.Annotations, "planning modifies nothing")
	}

	applied, err := drift.ApplyVersionBump(ctx, objs, poolBump)
	require.NoError(t, err)
	require.Equal(t, plan, applied, "the plan is what gets applied")
	require.True(t, applied.Safe())
	require.Equal(t, 10, applied.Touched)
	require.Equal(t, 6, applied.Restamped)
	require.Equal(t, 4, applied.KeptDrifted, "3 drifted by hash + 1 recorded")
	require.Zero(t, applied.NewlyDrifted)
	require.Zero(t, applied.ClearedDrift)
	for i, e := range applied.Objects {
		if i == 0 || i >= 7 {
			require.Equal(t, drift.BumpActionKeepDrift, e.Action, e.Name)
			require.Equal(t, drift.StateDrifted, e.After, e.Name)
		} else {
			require.Equal(t, drift.BumpActionRestamp, e.Action, e.Name)
			require.Equal(t, drift.StateCurrent, e.After, e.Name)
		}
	}
	classRep, err := drift.ApplyVersionBump(ctx, objs, classBump)
	require.NoError(t, err)
	require.True(t, classRep.Safe())
	require.Equal(t, 10, classRep.Restamped)

	// Applying again touches nothing.
	again, err := drift.ApplyVersionBump(ctx, objs, poolBump)
	require.NoError(t, err)
	require.Zero(t, again.Touched)
	require.Equal(t, 10, again.AlreadyCurrent)
	require.True(t, again.Safe())

	detector := func(pool *NodeClaimTemplate, class *nodeClassV1) *drift.Detector {
		p, err := drift.NewStaticHash(poolNew, pool)
		require.NoError(t, err)
		c, err := drift.NewStaticHash(classNew, class, drift.WithReason(drift.ReasonNameNodeClassDrift))
		require.NoError(t, err)
		return drift.NewDetector(p, c)
	}

	// After the migration, with no semantic change: exactly the nodes that
	// were drifted before are drifted now; zero nodes drifted by the move.
	after, err := drift.DryRun(ctx, detector(convertPool(current), convertClass(oldClass(), current.Template.Spec.Kubelet)), objs)
	require.NoError(t, err)
	require.Equal(t, 4, after.Drifted)
	for i, o := range after.Objects {
		require.Equal(t, i == 0 || i >= 7, len(o.Reasons) > 0, o.Name)
	}

	// A real semantic change made during the same migration is still
	// detected, with the field named: the team label, and maxPods in the
	// kubelet settings that moved to the node class.
	changedPool := convertPool(current)
	changedPool.ObjectMeta.Labels["team"] = "risk"
	changedKubelet := &kubeletV1beta1{MaxPods: ptr.To[int32](58), SystemReserved: map[string]string{"cpu": "100m"}}
	sem, err := drift.DryRun(ctx, detector(changedPool, convertClass(oldClass(), changedKubelet)), objs)
	require.NoError(t, err)
	require.Equal(t, 10, sem.Drifted)
	for i, o := range sem.Objects {
		require.Equal(t, []drift.ReasonName{drift.ReasonNameNodePoolDrifted, drift.ReasonNameNodeClassDrift}, reasonNames(o.Reasons), o.Name)
		if i >= 1 && i < 7 {
			require.Contains(t, o.Reasons[0].Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "metadata.labels", Detail: "Modified"}, o.Name)
		}
		require.Contains(t, o.Reasons[1].Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "kubelet.maxPods", Detail: "Modified"}, o.Name)
	}
}

func TestVersionBumpEdgeCases(t *testing.T) {
	ctx := context.Background()
	from := mustStamper(t, mustHasher(t, "v1"))
	to := mustStamper(t, mustHasher(t, "v2", drift.IgnorePaths("metadata.annotations")))
	spec := nodePoolTemplate()

	unstamped := nodeClaim("unstamped")
	garbage := &metav1.ObjectMeta{Name: "garbage", Annotations: map[string]string{prefix + "/hash": "zz", prefix + "/hash-version": from.Hasher().Version()}}
	other := &metav1.ObjectMeta{Name: "other", Annotations: map[string]string{prefix + "/hash": "0000000000000001", prefix + "/hash-version": "v0+uk1"}}
	current := nodeClaim("current")
	_, err := from.Stamp(current, spec)
	require.NoError(t, err)
	objs := []metav1.Object{unstamped, garbage, other, current}

	rep, err := drift.ApplyVersionBump(ctx, objs, drift.VersionBump{From: from, To: to, FromSpec: spec, ToSpec: spec})
	require.NoError(t, err)
	require.True(t, rep.Safe())
	require.Equal(t, 1, rep.Touched)
	require.Equal(t, 1, rep.Restamped)
	require.Equal(t, 2, rep.Unknown)
	require.Equal(t, 1, rep.OtherVersion)
	require.Equal(t, "zz", garbage.Annotations[prefix+"/hash"], "garbage is left alone")
	require.Equal(t, "v0+uk1", other.Annotations[prefix+"/hash-version"], "other versions are left alone")
	require.Equal(t, to.Hasher().Version(), current.Annotations[prefix+"/hash-version"])

	_, err = drift.PlanVersionBump(ctx, objs, drift.VersionBump{From: from, To: from, FromSpec: spec, ToSpec: spec})
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	otherPrefix, err := drift.NewStamper("other.io", mustHasher(t, "v2"))
	require.NoError(t, err)
	_, err = drift.PlanVersionBump(ctx, objs, drift.VersionBump{From: from, To: otherPrefix, FromSpec: spec, ToSpec: spec})
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	_, err = drift.PlanVersionBump(ctx, objs, drift.VersionBump{From: from, To: to, FromSpec: spec, ToSpec: make(chan int)})
	require.ErrorIs(t, err, drift.ErrUnsupportedType)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = drift.PlanVersionBump(cctx, objs, drift.VersionBump{From: from, To: to, FromSpec: spec, ToSpec: spec})
	require.ErrorIs(t, err, context.Canceled)
}

func TestDryRunProposedSpec(t *testing.T) {
	ctx := context.Background()
	s := mustStamper(t, mustHasher(t, "v1"))
	var objs []metav1.Object
	for i := range 6 {
		n := nodeClaim(fmt.Sprintf("node-%d", i))
		n.Namespace = ""
		n.Labels = map[string]string{"kubernetes.io/arch": "amd64"}
		if i%2 == 1 {
			n.Labels["kubernetes.io/arch"] = "arm64"
		}
		spec := nodePoolTemplate()
		if i == 5 {
			spec.Spec.TerminationGracePeriod = nil
		}
		_, err := s.Stamp(n, spec)
		require.NoError(t, err)
		objs = append(objs, n)
	}
	unstamped := nodeClaim("never-stamped")
	unstamped.Labels["kubernetes.io/arch"] = "amd64"
	objs = append(objs, unstamped)

	// Proposal 1: nothing in the hashed spec changes, but arm64 is dropped.
	proposed := nodePoolTemplate()
	reqs, err := drift.NewRequirements([]corev1.NodeSelectorRequirement{req("kubernetes.io/arch", corev1.NodeSelectorOpIn, "amd64")})
	require.NoError(t, err)
	rep, err := s.DryRun(ctx, proposed, objs, reqs)
	require.NoError(t, err)
	require.Equal(t, 7, rep.Total)
	got := map[string][]drift.ReasonName{}
	for _, o := range rep.Objects {
		require.NoError(t, o.Err)
		if len(o.Reasons) > 0 {
			got[o.Name] = reasonNames(o.Reasons)
		}
	}
	require.Equal(t, map[string][]drift.ReasonName{
		"node-1": {drift.ReasonNameRequirementsDrifted},
		"node-3": {drift.ReasonNameRequirementsDrifted},
		"node-5": {drift.ReasonNameNodePoolDrifted, drift.ReasonNameRequirementsDrifted},
	}, got)

	// Proposal 2: a new taint value drifts every stamped node and names it.
	proposed.Spec.Taints[0].Value = "risk"
	rep, err = s.DryRun(ctx, proposed, objs)
	require.NoError(t, err)
	require.Equal(t, 6, rep.Drifted, "the unstamped object is unknown, not drifted")
	require.Contains(t, rep.Objects[0].Reasons[0].Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "spec.taints", Detail: "Modified"})

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.DryRun(cctx, proposed, objs)
	require.ErrorIs(t, err, context.Canceled)
}
