package strategy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Verdict is a Gate's answer.
type Verdict string

const (
	// VerdictAllow: go on with this machine.
	VerdictAllow Verdict = "Allow"
	// VerdictWait: not now; ask again after RetryAfter. Nothing is disrupted.
	VerdictWait Verdict = "Wait"
	// VerdictStop: do not go on with this rollout until a person looks.
	VerdictStop Verdict = "Stop"
)

// GateRequest is what a Gate is asked: may this machine be disrupted
// now? Now is the caller's clock (virtual time in the simulator), so a
// gate reads no clock of its own.
type GateRequest struct {
	// Cluster is the cluster's namespace/name (or name).
	Cluster string
	// Group is the machine's group ("" for the control plane).
	Group string
	// Role is ControlPlane or Worker.
	Role Role
	// Machine and Node name the machine about to be disrupted.
	Machine, Node string
	// Now is when the question is asked.
	Now time.Time
}

// GateResult is a Gate's answer and why.
type GateResult struct {
	// Verdict is Allow, Wait or Stop; the zero value is not a verdict.
	Verdict Verdict
	// Gate names the gate that answered.
	Gate string
	// Reason says why, for people: what is closed, what is awaited.
	Reason string
	// RetryAfter, for Wait, is when asking again can make sense (the
	// window opens, the soak ends); 0 leaves it to the caller.
	RetryAfter time.Duration
	// Err is the cause when the gate could not tell (an API error): the
	// verdict is then Wait, failing closed.
	Err error
}

// Allowed says whether the verdict lets the machine go.
func (r GateResult) Allowed() bool { return r.Verdict == VerdictAllow }

// String says the verdict, the gate and why in one line.
func (r GateResult) String() string {
	s := string(r.Verdict)
	if r.Gate != "" {
		s += " by " + r.Gate
	}
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	if r.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", r.RetryAfter)
	}
	return s
}

// Gate decides whether a machine may be disrupted now. A gate that cannot
// tell (an API error) answers Wait with Err set: gates fail closed.
// Compose gates with Gates; adapt a function with GateFunc.
//
// Check changes nothing, unless the gate is a GateHolder: what its Allow
// takes (a concurrency slot) it holds until Release. Such a gate can say
// what it would answer without taking anything by being a GatePeeker too;
// Gates.Peek relies on this to report gates without side effects.
type Gate interface {
	Check(ctx context.Context, req GateRequest) GateResult
}

// GatePeeker is a Gate that can tell what Check would answer now without
// doing what Check does: a gates.Concurrency's Check takes a slot, its Peek
// only counts the slots held. A preview or a report asks Peek.
type GatePeeker interface {
	Gate
	Peek(ctx context.Context, req GateRequest) GateResult
}

// ErrCannotPeek is the Err of Gates.Peek's answer for a GateHolder that
// is no GatePeeker: asking its Check would take what it holds, so it is
// not asked, and the answer is Wait (not known, failing closed).
var ErrCannotPeek = errors.New("gate cannot be asked without taking what it holds")

// GateFunc adapts a function to Gate.
type GateFunc func(ctx context.Context, req GateRequest) GateResult

// Check calls f; a nil GateFunc answers Wait with ErrInvalidGate.
func (f GateFunc) Check(ctx context.Context, req GateRequest) GateResult {
	if f == nil {
		return GateResult{Verdict: VerdictWait, Gate: "GateFunc", Reason: "nil gate function", Err: ErrInvalidGate}
	}
	return f(ctx, req)
}

// ErrInvalidGate is matched by the errors of gate constructors (a window
// that does not parse, an unknown time zone) and by the Err of a result
// from a gate that is not one (a nil GateFunc, a nil entry in Gates, an
// answer that is no verdict).
var ErrInvalidGate = errors.New("invalid gate")

// Gates asks every gate in order and answers with the first Stop, else
// the first Wait (with the longest RetryAfter of the Waits, since all must
// open), else Allow. A nil entry, or an answer that is no verdict, is a
// Wait with ErrInvalidGate: a gate list fails closed.
//
// A GateHolder takes something with its Allow (a concurrency slot), so
// Check asks the holders last, and only when every other gate allows
// (a holder that is a GatePeeker is peeked at first, like the others); if
// a holder then answers Wait or Stop, what the holders before it took in
// this Check is released. A machine waiting for a window holds no slot.
type Gates []Gate

// Check asks every gate; see Gates.
func (gs Gates) Check(ctx context.Context, req GateRequest) GateResult {
	// First everything but the holders' Check: the others, and the
	// holders that can say without taking.
	var holders []int
	first := gs.fold(func(i int, g Gate) GateResult {
		switch h := g.(type) {
		case nil:
			return nilGate(i)
		case GateHolder:
			holders = append(holders, i)
			if p, ok := h.(GatePeeker); ok {
				return p.Peek(ctx, req)
			}
			return GateResult{Verdict: VerdictAllow}
		}
		return g.Check(ctx, req)
	})
	if first.Verdict != VerdictAllow || len(holders) == 0 {
		return first
	}
	// Then the holders, in order, taking.
	for n, i := range holders {
		r := gs[i].Check(ctx, req)
		if r.Verdict == VerdictAllow {
			continue
		}
		if r.Verdict != VerdictWait && r.Verdict != VerdictStop {
			r = noVerdict(r)
		}
		for _, j := range holders[:n] {
			if err := gs[j].(GateHolder).Release(ctx, req); err != nil && r.Err == nil {
				r.Err = fmt.Errorf("releasing what gates[%d] took: %w", j, err)
			}
		}
		return r
	}
	return GateResult{Verdict: VerdictAllow}
}

// Peek answers what Check would answer now, changing nothing: each
// member's Peek when it is a GatePeeker, its Check when it is no
// GateHolder (whose Check changes nothing), and Wait with ErrCannotPeek
// for a GateHolder that cannot peek. Unlike Check it asks every member,
// also after a Stop.
func (gs Gates) Peek(ctx context.Context, req GateRequest) GateResult {
	each := gs.PeekEach(ctx, req)
	return gs.fold(func(i int, _ Gate) GateResult { return each[i] })
}

// PeekEach is Peek's answer of every member, in order, for a report that
// shows each gate (Allow included): a member with no name of its own is
// named by its place, "gates[i]".
func (gs Gates) PeekEach(ctx context.Context, req GateRequest) []GateResult {
	out := make([]GateResult, len(gs))
	for i, g := range gs {
		var r GateResult
		switch p := g.(type) {
		case nil:
			r = nilGate(i)
		case GatePeeker:
			r = p.Peek(ctx, req)
		case GateHolder:
			r = GateResult{Verdict: VerdictWait, Reason: "not asked: it holds what its Check allows, and it cannot peek (no GatePeeker)", Err: ErrCannotPeek}
		default:
			r = g.Check(ctx, req)
		}
		if r.Verdict != VerdictAllow && r.Verdict != VerdictWait && r.Verdict != VerdictStop {
			r = noVerdict(r)
		}
		if r.Gate == "" {
			r.Gate = fmt.Sprintf("gates[%d]", i)
		}
		out[i] = r
	}
	return out
}

// Peek of a Gates inside a Gates: the inner list answers as one member.
var _ GatePeeker = Gates(nil)

func nilGate(i int) GateResult {
	return GateResult{Verdict: VerdictWait, Gate: fmt.Sprintf("gates[%d]", i), Reason: "nil gate", Err: ErrInvalidGate}
}

func noVerdict(r GateResult) GateResult {
	return GateResult{Verdict: VerdictWait, Gate: r.Gate, Reason: fmt.Sprintf("answered %s, which is no verdict", errtext.Quote(string(r.Verdict))), Err: ErrInvalidGate}
}

// fold combines the members' answers as Check documents: the first Stop
// (asking no further), else the first Wait with the longest RetryAfter,
// else Allow.
func (gs Gates) fold(ask func(i int, g Gate) GateResult) GateResult {
	var wait *GateResult
	var longest time.Duration
	for i, g := range gs {
		r := ask(i, g)
		switch r.Verdict {
		case VerdictAllow:
			continue
		case VerdictStop:
			return r
		case VerdictWait:
		default:
			r = noVerdict(r)
		}
		longest = max(longest, r.RetryAfter)
		if wait == nil {
			w := r
			wait = &w
		}
	}
	if wait != nil {
		wait.RetryAfter = longest
		return *wait
	}
	return GateResult{Verdict: VerdictAllow}
}

// MaintenanceWindow is a gate open only in windows: each opens at a hit of
// schedule (standard cron, 5 fields or @daily...) in the IANA time zone tz
// ("" is UTC) and lasts duration, [hit, hit+duration), as Karpenter's
// budgets and kured's reboot windows read them. Outside a window it
// answers Wait with RetryAfter until the next one opens. Hits are
// computed in tz, so a window at 02:00 stays at 02:00 local time across
// daylight saving changes; a hit that does not exist in the zone (02:00 on
// a spring-forward night) is skipped, as cron skips it. A schedule that does not parse, a zone the
// system does not know or a non-positive duration is ErrInvalidGate
// naming the field.
func MaintenanceWindow(name, schedule string, duration time.Duration, tz string) (Gate, error) {
	if name == "" {
		name = "maintenance-window"
	}
	qn := errtext.Quote(name)
	switch {
	case strings.TrimSpace(schedule) == "":
		return nil, fmt.Errorf("%w: %s: schedule is empty", ErrInvalidGate, qn)
	case strings.Contains(schedule, "TZ="):
		return nil, fmt.Errorf("%w: %s: schedule %s: give the time zone as tz, not in the schedule", ErrInvalidGate, qn, errtext.Quote(schedule))
	case duration <= 0:
		return nil, fmt.Errorf("%w: %s: duration %s: must be positive", ErrInvalidGate, qn, duration)
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: time zone %s: %s", ErrInvalidGate, qn, errtext.Quote(tz), errtext.Clip(err.Error()))
		}
		loc = l
	}
	s, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: schedule %s: %s", ErrInvalidGate, qn, errtext.Quote(schedule), errtext.Clip(err.Error()))
	}
	w := &window{name: name, schedule: schedule, sched: s, d: duration, loc: loc}
	return w, nil
}

type window struct {
	name, schedule string
	sched          cron.Schedule
	d              time.Duration
	loc            *time.Location
}

// Check answers Allow inside a window and Wait until the next one
// outside.
func (w *window) Check(_ context.Context, req GateRequest) GateResult {
	now := req.Now.In(w.loc)
	if next := w.sched.Next(now.Add(-w.d)); !next.After(now) {
		return GateResult{Verdict: VerdictAllow, Gate: w.name}
	}
	opens := w.sched.Next(now)
	return GateResult{Verdict: VerdictWait, Gate: w.name, RetryAfter: opens.Sub(now),
		Reason: fmt.Sprintf("outside the maintenance window %s (%s, %s); the next opens %s", errtext.Quote(w.schedule), w.d, w.loc, opens.Format("2006-01-02 15:04 MST"))}
}

// GateHolder is a Gate whose Allow holds something until the disruption
// ends (a concurrency slot): the caller renews it while the update runs and
// releases it when the update is done. Gates forwards both to its members
// that are GateHolders.
type GateHolder interface {
	Gate
	// Renew keeps what the machine holds; holding nothing is no error.
	Renew(ctx context.Context, req GateRequest) error
	// Release lets go of what the machine holds; holding nothing is no
	// error.
	Release(ctx context.Context, req GateRequest) error
}

// Renew renews what each member that is a GateHolder holds.
func (gs Gates) Renew(ctx context.Context, req GateRequest) error {
	var errs []error
	for _, g := range gs {
		if h, ok := g.(GateHolder); ok {
			if err := h.Renew(ctx, req); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errtext.Cut(errs)...)
}

// Release releases what each member that is a GateHolder holds.
func (gs Gates) Release(ctx context.Context, req GateRequest) error {
	var errs []error
	for _, g := range gs {
		if h, ok := g.(GateHolder); ok {
			if err := h.Release(ctx, req); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errtext.Cut(errs)...)
}

// Breaker stops a group's rollout during a run once too many of its
// machines went bad: failed, or unhealthy after their update (Karpenter
// stops repairing a node pool past 20% unhealthy, Cluster API's
// MachineHealthCheck has maxUnhealthy). It trips when more than
// MaxUnhealthy machines of the group are bad; from then on no machine of
// the group starts.
type Breaker struct {
	// MaxUnhealthy is how many bad machines a group tolerates: a count
	// ("2") or a percentage of the group's size ("20%", rounded down).
	MaxUnhealthy intstr.IntOrString
}

// Limit is MaxUnhealthy for a group of size machines. A negative count,
// or a percentage that is malformed or above 100, is ErrInvalidGate.
func (b Breaker) Limit(size int) (int, error) {
	if b.MaxUnhealthy.Type == intstr.String {
		s := b.MaxUnhealthy.StrVal
		pct, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
		if !strings.HasSuffix(s, "%") || err != nil || pct < 0 || pct > 100 {
			return 0, fmt.Errorf("%w: breaker: maxUnhealthy %s: want a count or a percentage from 0%% to 100%%", ErrInvalidGate, errtext.Quote(s))
		}
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&b.MaxUnhealthy, size, false)
	if err != nil {
		return 0, fmt.Errorf("%w: breaker: maxUnhealthy %s: %s", ErrInvalidGate, errtext.Quote(b.MaxUnhealthy.String()), errtext.Clip(err.Error()))
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: breaker: maxUnhealthy %s: out of range", ErrInvalidGate, errtext.Quote(b.MaxUnhealthy.String()))
	}
	return n, nil
}

// Tripped says whether bad machines of a group of size trip the breaker,
// and why, in words.
func (b Breaker) Tripped(size, bad int) (bool, string, error) {
	limit, err := b.Limit(size)
	if err != nil {
		return false, "", err
	}
	if bad <= limit {
		return false, "", nil
	}
	return true, fmt.Sprintf("circuit breaker: %d of %d machines failed or unhealthy after their update, more than maxUnhealthy %s (%d)", bad, size, b.MaxUnhealthy.String(), limit), nil
}
