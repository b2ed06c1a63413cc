package gates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// LabelConcurrencyCluster is on every Lease of a Concurrency: the
// cluster (namespace.name, hashed when longer than a label value) whose
// slots it holds.
const LabelConcurrencyCluster = "upgradekit.io/concurrency-cluster"

// Concurrency lets at most Limit machines of a cluster be updated in
// place at once, across every replica of the extension: each update holds
// one of Limit slots, a coordination.k8s.io Lease in the management
// cluster, from the moment it may start until it is done. A Lease that is
// not renewed for its TTL is free again, so an extension that crashed
// mid-update does not hold a slot for ever (the next update may then run
// beside the crashed one's node, which is why the TTL should exceed the
// time between two UpdateMachine calls by far, not the update's length:
// MachineUpdater renews on every call).
//
// It is a strategy.Gate with Renew and Release (strategy.GateHolder) and
// Peek (strategy.GatePeeker, for a report that takes no slot):
// MachineUpdater (UpdaterOptions.Gates) asks Check before an update starts, renews
// while it runs and releases when it is done. A failed update keeps its
// slot until its TTL ends: the node is still cordoned and needs a person,
// and letting another update start beside it would widen the damage.
type Concurrency struct {
	c         client.Client
	namespace string
	limit     int
	ttl       time.Duration
}

// NewConcurrency builds the gate: its Leases live in namespace of the
// management cluster, which c must be able to get, list, create and
// update Leases in (nothing else). limit must be positive and ttl at
// least a second.
func NewConcurrency(c client.Client, namespace string, limit int, ttl time.Duration) (*Concurrency, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: gates.NewConcurrency: nil client", capi.ErrInvalidOption)
	case len(validation.IsDNS1123Label(namespace)) > 0:
		return nil, fmt.Errorf("%w: gates.NewConcurrency: namespace %s: %s", capi.ErrInvalidOption, errtext.Quote(namespace), validation.IsDNS1123Label(namespace)[0])
	case limit <= 0:
		return nil, fmt.Errorf("%w: gates.NewConcurrency: limit %d: must be positive", capi.ErrInvalidOption, limit)
	case ttl < time.Second:
		return nil, fmt.Errorf("%w: gates.NewConcurrency: TTL %s: must be at least a second", capi.ErrInvalidOption, ttl)
	}
	return &Concurrency{c: c, namespace: namespace, limit: limit, ttl: ttl}, nil
}

// holder is who holds a slot: the machine, in its cluster.
func holder(req strategy.GateRequest) string { return req.Cluster + "/" + req.Machine }

// slotName is the Lease of the cluster's slot i.
func (g *Concurrency) slotName(cluster string, i int) string {
	return fmt.Sprintf("upgradekit-%s-%d", clusterKey(cluster), i)
}

// clusterKey is the cluster as a label value and name part: readable when
// short, a hash when long or unsafe.
func clusterKey(cluster string) string {
	s := strings.ReplaceAll(cluster, "/", ".")
	if len(s) <= 40 && len(validation.IsDNS1123Label(strings.ReplaceAll(s, ".", "-"))) == 0 {
		return strings.ReplaceAll(s, ".", "-")
	}
	sum := sha256.Sum256([]byte(cluster))
	return "h" + hex.EncodeToString(sum[:])[:20]
}

// Check allows a machine that holds a slot (renewing it) or can take a
// free or expired one; otherwise it answers Wait with the holders and
// when the first slot would expire.
func (g *Concurrency) Check(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
	leases, res, ok := g.read(ctx, req)
	if !ok {
		return res
	}
	me := holder(req)
	if l := heldBy(leases, me); l != nil {
		if err := g.write(ctx, l, me, req.Now, false); err != nil {
			res.Verdict, res.Reason, res.Err = strategy.VerdictWait, "renewing slot "+l.Name+": "+errtext.Clip(err.Error()), err
			return res
		}
		res.Verdict = strategy.VerdictAllow
		return res
	}
	held, soonest := g.held(leases, req)
	for i := range g.limit {
		if len(held) >= g.limit {
			break // every slot is held, counting slots above a lowered limit
		}
		name := g.slotName(req.Cluster, i)
		l := leases[name]
		if l == nil {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: name,
				Labels: map[string]string{LabelConcurrencyCluster: clusterKey(req.Cluster)}}}
		} else if g.left(l, req.Now) > 0 {
			continue
		}
		err := g.write(ctx, l, me, req.Now, true)
		switch {
		case err == nil:
			res.Verdict = strategy.VerdictAllow
			return res
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Another replica took it first: try the next slot.
			held = append(held, "(taken meanwhile)")
			continue
		default:
			res.Verdict, res.Reason, res.Err = strategy.VerdictWait, "taking slot "+name+": "+errtext.Clip(err.Error()), err
			return res
		}
	}
	return g.full(req, held, soonest)
}

// Peek answers what Check would answer now without writing a Lease:
// Allow when the machine holds a slot or one of Limit is free or expired,
// Wait with the holders and when the first slot expires otherwise. It
// needs only get and list on Leases. Another replica may take the free
// slot before the machine's update asks Check.
func (g *Concurrency) Peek(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
	leases, res, ok := g.read(ctx, req)
	if !ok {
		return res
	}
	if l := heldBy(leases, holder(req)); l != nil {
		res.Verdict, res.Reason = strategy.VerdictAllow, "holds slot "+l.Name
		return res
	}
	held, soonest := g.held(leases, req)
	if len(held) < g.limit {
		res.Verdict, res.Reason = strategy.VerdictAllow, fmt.Sprintf("%d of %d slots of cluster %s free", g.limit-len(held), g.limit, req.Cluster)
		return res
	}
	return g.full(req, held, soonest)
}

// heldBy is the Lease whose holder is me, nil if none.
func heldBy(leases map[string]*coordinationv1.Lease, me string) *coordinationv1.Lease {
	for _, l := range leases {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == me {
			return l
		}
	}
	return nil
}

// full is the Wait of a cluster whose slots are all held: by whom, and
// until the first expires.
func (g *Concurrency) full(req strategy.GateRequest, held []string, soonest time.Duration) strategy.GateResult {
	slices.Sort(held)
	return strategy.GateResult{Gate: "concurrency", Verdict: strategy.VerdictWait, RetryAfter: max(soonest, 0),
		Reason: fmt.Sprintf("%d of %d machines of cluster %s are being updated already: %s", len(held), g.limit, req.Cluster, strings.Join(held, ", "))}
}

// read checks the gate and the request and lists the cluster's Leases;
// when it cannot, ok is false and res is the Wait to answer.
func (g *Concurrency) read(ctx context.Context, req strategy.GateRequest) (leases map[string]*coordinationv1.Lease, res strategy.GateResult, ok bool) {
	res = strategy.GateResult{Gate: "concurrency", Verdict: strategy.VerdictWait}
	switch {
	case g == nil || g.c == nil:
		res.Reason, res.Err = "gates.Concurrency not built with gates.NewConcurrency", strategy.ErrInvalidGate
		return nil, res, false
	case req.Cluster == "" || req.Machine == "":
		res.Reason, res.Err = "the request names no cluster or machine", strategy.ErrInvalidGate
		return nil, res, false
	}
	leases, err := g.leases(ctx, req.Cluster)
	if err != nil {
		res.Reason, res.Err = "reading the concurrency Leases: "+errtext.Clip(err.Error()), err
		return nil, res, false
	}
	return leases, strategy.GateResult{Gate: "concurrency"}, true
}

// held lists the machines (sorted) that hold a live slot of req's
// cluster, any slot, also one above a limit lowered since it was taken,
// and how long until the first of them expires (-1 with none).
func (g *Concurrency) held(leases map[string]*coordinationv1.Lease, req strategy.GateRequest) ([]string, time.Duration) {
	var held []string
	var soonest time.Duration = -1
	for _, l := range leases {
		if left := g.left(l, req.Now); left > 0 {
			held = append(held, strings.TrimPrefix(*l.Spec.HolderIdentity, req.Cluster+"/"))
			if soonest < 0 || left < soonest {
				soonest = left
			}
		}
	}
	slices.Sort(held)
	return held, soonest
}

// left is how long l's holder has before the slot is free again: 0 for a
// Lease nobody holds or whose TTL ran out.
func (g *Concurrency) left(l *coordinationv1.Lease, now time.Time) time.Duration {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return max(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second).Sub(now), 0)
}

// Renew renews the slot the machine holds; not holding one is no error.
func (g *Concurrency) Renew(ctx context.Context, req strategy.GateRequest) error {
	return g.each(ctx, req, func(l *coordinationv1.Lease) error { return g.write(ctx, l, holder(req), req.Now, false) })
}

// Release frees the slot the machine holds; not holding one is no error.
func (g *Concurrency) Release(ctx context.Context, req strategy.GateRequest) error {
	return g.each(ctx, req, func(l *coordinationv1.Lease) error {
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = nil, nil, nil
		return g.c.Update(ctx, l)
	})
}

// each calls f on the Leases the machine holds.
func (g *Concurrency) each(ctx context.Context, req strategy.GateRequest, f func(*coordinationv1.Lease) error) error {
	if g == nil || g.c == nil {
		return fmt.Errorf("%w: gates.Concurrency not built with gates.NewConcurrency", strategy.ErrInvalidGate)
	}
	leases, err := g.leases(ctx, req.Cluster)
	if err != nil {
		return err
	}
	me := holder(req)
	var errs []error
	for _, l := range leases {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == me {
			if err := f(l); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errtext.Cut(errs)...)
}

// leases lists the cluster's slots by name.
func (g *Concurrency) leases(ctx context.Context, cluster string) (map[string]*coordinationv1.Lease, error) {
	var list coordinationv1.LeaseList
	if err := g.c.List(ctx, &list, client.InNamespace(g.namespace), client.MatchingLabels{LabelConcurrencyCluster: clusterKey(cluster)}); err != nil {
		return nil, err
	}
	out := make(map[string]*coordinationv1.Lease, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// write takes (acquire) or renews l for holder at now: create when new,
// update otherwise, both with the API server's optimistic concurrency, so
// two replicas never both take one slot.
func (g *Concurrency) write(ctx context.Context, l *coordinationv1.Lease, holder string, now time.Time, acquire bool) error {
	ts := metav1.NewMicroTime(now)
	secs := int32(g.ttl / time.Second)
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &holder, &ts, &secs
	if acquire {
		l.Spec.AcquireTime = &ts
	}
	if l.ResourceVersion == "" {
		return g.c.Create(ctx, l)
	}
	return g.c.Update(ctx, l)
}
