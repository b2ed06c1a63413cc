package strategy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/strategy"
)

func TestMaintenanceWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	gate, err := strategy.MaintenanceWindow("nightly", "0 2 * * *", 3*time.Hour, "Europe/Berlin")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		now   time.Time
		want  strategy.Verdict
		retry time.Duration
	}{
		{"before it opens", time.Date(2026, 11, 25, 1, 30, 0, 0, berlin), strategy.VerdictWait, 30 * time.Minute},
		{"as it opens", time.Date(2026, 11, 25, 2, 0, 0, 0, berlin), strategy.VerdictAllow, 0},
		{"inside", time.Date(2026, 11, 25, 4, 59, 59, 0, berlin), strategy.VerdictAllow, 0},
		{"as it closes", time.Date(2026, 11, 25, 5, 0, 0, 0, berlin), strategy.VerdictWait, 21 * time.Hour},
		{"the same instant in UTC", time.Date(2026, 11, 25, 2, 30, 0, 0, time.UTC), strategy.VerdictAllow, 0}, // 03:30 in Berlin
		{"02:30 UTC in summer is 04:30 in Berlin", time.Date(2026, 7, 1, 2, 30, 0, 0, time.UTC), strategy.VerdictAllow, 0},
		{"03:30 UTC in summer is 05:30 in Berlin", time.Date(2026, 7, 1, 3, 30, 0, 0, time.UTC), strategy.VerdictWait, 20*time.Hour + 30*time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gate.Check(context.Background(), strategy.GateRequest{Machine: "m", Now: tc.now})
			require.Equal(t, tc.want, r.Verdict, r.String())
			require.Equal(t, tc.retry, r.RetryAfter, r.String())
			require.Equal(t, "nightly", r.Gate)
			if r.Verdict == strategy.VerdictWait {
				require.Contains(t, r.Reason, "outside the maintenance window")
				require.Contains(t, r.Reason, "Europe/Berlin")
			}
		})
	}
	// 02:00 does not exist on 2026-03-29 in Berlin (clocks go from 02:00
	// to 03:00): as with cron, that night has no window, and the next
	// opens at 02:00 local time the night after, in summer time.
	r := gate.Check(context.Background(), strategy.GateRequest{Now: time.Date(2026, 3, 28, 12, 0, 0, 0, berlin)})
	require.Equal(t, strategy.VerdictWait, r.Verdict)
	opens := time.Date(2026, 3, 28, 12, 0, 0, 0, berlin).Add(r.RetryAfter).In(berlin)
	require.Equal(t, time.Date(2026, 3, 30, 2, 0, 0, 0, berlin), opens)
	require.Equal(t, 37*time.Hour, r.RetryAfter, "one hour less than a day and a half")

	for _, bad := range []struct {
		sched, tz string
		d         time.Duration
		want      string
	}{
		{"", "", time.Hour, "schedule is empty"},
		{"0 2 * *", "", time.Hour, "schedule"},
		{"TZ=UTC 0 2 * * *", "", time.Hour, "give the time zone as tz"},
		{"0 2 * * *", "Mars/Olympus", time.Hour, "time zone"},
		{"0 2 * * *", "", 0, "must be positive"},
	} {
		_, err := strategy.MaintenanceWindow("w", bad.sched, bad.d, bad.tz)
		require.ErrorIs(t, err, strategy.ErrInvalidGate, bad)
		require.ErrorContains(t, err, bad.want)
	}
}

func TestGates(t *testing.T) {
	ctx := context.Background()
	answer := func(name string, v strategy.Verdict, retry time.Duration) strategy.Gate {
		return strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
			return strategy.GateResult{Verdict: v, Gate: name, RetryAfter: retry, Reason: name + " says " + string(v)}
		})
	}
	allow, soak, window, breaker := answer("a", strategy.VerdictAllow, 0), answer("soak", strategy.VerdictWait, time.Minute), answer("window", strategy.VerdictWait, time.Hour), answer("breaker", strategy.VerdictStop, 0)
	for _, tc := range []struct {
		name  string
		gates strategy.Gates
		want  strategy.Verdict
		gate  string
		retry time.Duration
		err   error
	}{
		{"none", nil, strategy.VerdictAllow, "", 0, nil},
		{"all open", strategy.Gates{allow, allow}, strategy.VerdictAllow, "", 0, nil},
		{"the first wait, until all open", strategy.Gates{allow, soak, window}, strategy.VerdictWait, "soak", time.Hour, nil},
		{"a stop beats the waits", strategy.Gates{soak, breaker, window}, strategy.VerdictStop, "breaker", 0, nil},
		{"a nil gate fails closed", strategy.Gates{allow, nil}, strategy.VerdictWait, "gates[1]", 0, strategy.ErrInvalidGate},
		{"a nil func fails closed", strategy.Gates{strategy.GateFunc(nil)}, strategy.VerdictWait, "GateFunc", 0, strategy.ErrInvalidGate},
		{"no verdict fails closed", strategy.Gates{answer("odd", "", 0)}, strategy.VerdictWait, "odd", 0, strategy.ErrInvalidGate},
		{"nested", strategy.Gates{strategy.Gates{allow}, strategy.Gates{window}}, strategy.VerdictWait, "window", time.Hour, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Peek answers as Check does for gates that hold nothing.
			for _, ask := range []func(context.Context, strategy.GateRequest) strategy.GateResult{tc.gates.Check, tc.gates.Peek} {
				r := ask(ctx, strategy.GateRequest{Machine: "m"})
				require.Equal(t, tc.want, r.Verdict, r.String())
				require.Equal(t, tc.gate, r.Gate)
				require.Equal(t, tc.retry, r.RetryAfter)
				require.Equal(t, tc.want == strategy.VerdictAllow, r.Allowed())
				if tc.err != nil {
					require.True(t, errors.Is(r.Err, tc.err), r.String())
				}
			}
		})
	}
	require.Equal(t, "Wait by window: window says Wait (retry after 1h0m0s)", window.Check(ctx, strategy.GateRequest{}).String())
}

// slot is a GateHolder that counts what its Check takes; with peek it is
// a GatePeeker too.
type slot struct {
	taken, peeked, released int
	free                    bool
}

func (s *slot) Check(context.Context, strategy.GateRequest) strategy.GateResult {
	if !s.free {
		return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "slot", Reason: "all slots held"}
	}
	s.taken++
	return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "slot"}
}
func (s *slot) Renew(context.Context, strategy.GateRequest) error { return nil }
func (s *slot) Release(context.Context, strategy.GateRequest) error {
	s.released++
	return nil
}

type peekingSlot struct{ *slot }

func (s peekingSlot) Peek(context.Context, strategy.GateRequest) strategy.GateResult {
	s.peeked++
	if !s.free {
		return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "slot", Reason: "all slots held", RetryAfter: time.Minute}
	}
	return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "slot"}
}

func TestGatesPeekTakesNothing(t *testing.T) {
	ctx := context.Background()
	req := strategy.GateRequest{Machine: "m"}
	checked := 0
	plain := strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
		checked++
		return strategy.GateResult{Verdict: strategy.VerdictAllow}
	})
	stop := strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
		return strategy.GateResult{Verdict: strategy.VerdictStop, Gate: "breaker", Reason: "tripped"}
	})

	free := &slot{free: true}
	gates := strategy.Gates{plain, peekingSlot{free}}
	require.Equal(t, strategy.VerdictAllow, gates.Peek(ctx, req).Verdict)
	require.Equal(t, 0, free.taken, "Peek took a slot")
	require.Equal(t, 1, free.peeked)
	require.Equal(t, 1, checked, "a gate that holds nothing is asked with Check")
	require.Equal(t, strategy.VerdictAllow, gates.Check(ctx, req).Verdict)
	require.Equal(t, 1, free.taken, "Check takes the slot")

	t.Run("a holder that cannot peek is not asked, and fails closed", func(t *testing.T) {
		s := &slot{free: true}
		r := strategy.Gates{plain, s}.Peek(ctx, req)
		require.Equal(t, strategy.VerdictWait, r.Verdict)
		require.ErrorIs(t, r.Err, strategy.ErrCannotPeek)
		require.Equal(t, "gates[1]", r.Gate)
		require.Zero(t, s.taken)
	})

	t.Run("each gate's answer, in order, also after a stop", func(t *testing.T) {
		full := &slot{}
		each := strategy.Gates{plain, stop, peekingSlot{full}, nil}.PeekEach(ctx, req)
		var got []string
		for _, r := range each {
			got = append(got, r.String())
		}
		require.Equal(t, []string{
			"Allow by gates[0]",
			"Stop by breaker: tripped",
			"Wait by slot: all slots held (retry after 1m0s)",
			"Wait by gates[3]: nil gate",
		}, got)
		require.Equal(t, 1, full.peeked, "a gate after a Stop is still asked")
		r := strategy.Gates{plain, stop, peekingSlot{full}}.Peek(ctx, req)
		require.Equal(t, "Stop by breaker: tripped", r.String())
	})

	t.Run("nested lists peek too", func(t *testing.T) {
		s := &slot{free: true}
		r := strategy.Gates{strategy.Gates{peekingSlot{s}}}.PeekEach(ctx, req)
		require.Equal(t, strategy.VerdictAllow, r[0].Verdict)
		require.Zero(t, s.taken)
		require.Equal(t, 1, s.peeked)
	})
}

// TestGatesCheckHoldsNothingWhileClosed: Check asks the holders last and
// only when every other gate allows, so a machine waiting for a window
// takes no slot; a holder's Wait releases what the holders before it took.
func TestGatesCheckHoldsNothingWhileClosed(t *testing.T) {
	ctx := context.Background()
	req := strategy.GateRequest{Machine: "m"}
	window := strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
		return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "window", RetryAfter: time.Hour}
	})
	open := strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
		return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "open"}
	})
	for _, tc := range []struct {
		name     string
		gates    func(a, b *slot) strategy.Gates
		a, b     slot // before
		want     string
		taken    [2]int
		released [2]int
	}{
		{"a holder before a closed window takes nothing", func(a, _ *slot) strategy.Gates { return strategy.Gates{a, window} },
			slot{free: true}, slot{}, "Wait by window (retry after 1h0m0s)", [2]int{0, 0}, [2]int{0, 0}},
		{"a peeking holder after a closed window takes nothing", func(a, _ *slot) strategy.Gates { return strategy.Gates{window, peekingSlot{a}} },
			slot{free: true}, slot{}, "Wait by window (retry after 1h0m0s)", [2]int{0, 0}, [2]int{0, 0}},
		{"a full peeking holder stops the first from taking", func(a, b *slot) strategy.Gates { return strategy.Gates{a, peekingSlot{b}} },
			slot{free: true}, slot{}, "Wait by slot: all slots held (retry after 1m0s)", [2]int{0, 0}, [2]int{0, 0}},
		{"a full holder that cannot peek: the first's slot is given back", func(a, b *slot) strategy.Gates { return strategy.Gates{a, open, b} },
			slot{free: true}, slot{}, "Wait by slot: all slots held", [2]int{1, 0}, [2]int{1, 0}},
		{"all open: each holder takes once", func(a, b *slot) strategy.Gates { return strategy.Gates{a, open, peekingSlot{b}} },
			slot{free: true}, slot{free: true}, "Allow", [2]int{1, 1}, [2]int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.a, tc.b
			r := tc.gates(&a, &b).Check(ctx, req)
			require.Equal(t, tc.want, r.String())
			require.Equal(t, tc.taken, [2]int{a.taken, b.taken}, "taken")
			require.Equal(t, tc.released, [2]int{a.released, b.released}, "released")
		})
	}
}

func TestBreaker(t *testing.T) {
	for _, tc := range []struct {
		max       intstr.IntOrString
		size, bad int
		tripped   bool
		limit     int
		wantErr   bool
	}{
		{intstr.FromInt32(0), 10, 0, false, 0, false},
		{intstr.FromInt32(0), 10, 1, true, 0, false},
		{intstr.FromInt32(2), 10, 2, false, 2, false},
		{intstr.FromInt32(2), 10, 3, true, 2, false},
		{intstr.FromString("20%"), 10, 2, false, 2, false},
		{intstr.FromString("20%"), 10, 3, true, 2, false},
		{intstr.FromString("20%"), 4, 1, true, 0, false}, // 0.8 rounds down
		{intstr.FromString("100%"), 4, 4, false, 4, false},
		{intstr.FromString("120%"), 4, 0, false, 0, true},
		{intstr.FromString("two"), 4, 0, false, 0, true},
		{intstr.FromInt32(-1), 4, 0, false, 0, true},
	} {
		b := strategy.Breaker{MaxUnhealthy: tc.max}
		limit, err := b.Limit(tc.size)
		tripped, why, terr := b.Tripped(tc.size, tc.bad)
		if tc.wantErr {
			require.ErrorIs(t, err, strategy.ErrInvalidGate, tc.max.String())
			require.ErrorIs(t, terr, strategy.ErrInvalidGate)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.limit, limit, tc.max.String())
		require.Equal(t, tc.tripped, tripped, "%s: %d of %d", tc.max.String(), tc.bad, tc.size)
		if tripped {
			require.Contains(t, why, "circuit breaker")
		}
	}
}
