package strategy

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"k8s.io/utils/clock"
)

// Reason is why a machine is disrupted, as Karpenter's budgets name it.
type Reason string

const (
	// ReasonDrifted: the machine differs from its desired state.
	ReasonDrifted Reason = "Drifted"
	// ReasonEmpty: the machine runs no workload pods.
	ReasonEmpty Reason = "Empty"
	// ReasonUnhealthy: the machine's node is not ready.
	ReasonUnhealthy Reason = "Unhealthy"
)

// Budget limits how many machines of a group may be disrupted at once, as a
// Karpenter NodePool's disruption budget: Nodes is a count ("3") or a
// percentage of the group ("20%", rounded up); Reasons restricts it to some
// reasons (empty: all); Schedule (standard cron, always UTC) with Duration
// makes it active only in windows that open at each schedule hit and last
// Duration. Without Schedule and Duration it is always active.
type Budget struct {
	// Nodes is the number or percentage of machines that may be disrupted.
	Nodes string `json:"nodes"`
	// Reasons the budget applies to; empty means every reason.
	Reasons []Reason `json:"reasons,omitempty"`
	// Schedule is a cron expression (5 fields or @daily...) in UTC.
	Schedule string `json:"schedule,omitempty"`
	// Duration is how long the budget stays active after each schedule hit.
	Duration time.Duration `json:"duration,omitempty"`
}

// unlimited is what Allowed returns for a budget that does not limit.
const unlimited = math.MaxInt32

// Validate checks the budget's fields; errors wrap ErrInvalidBudget and
// name the field.
func (b Budget) Validate() error {
	_, err := b.nodes(1)
	if err != nil {
		return err
	}
	_, err = b.schedule()
	return err
}

func (b Budget) nodes(total int) (int, error) {
	if total < 0 {
		return 0, fmt.Errorf("%w: nodes: group size %d is negative", ErrInvalidBudget, total)
	}
	s := strings.TrimSpace(b.Nodes)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if !isDigits(p) || len(p) > 3 || atoi(p) > 100 {
			return 0, fmt.Errorf("%w: nodes: %q is not a percentage from 0%% to 100%%", ErrInvalidBudget, b.Nodes)
		}
		pct := atoi(p)
		return (pct*total + 99) / 100, nil // rounds up, as Karpenter does
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%w: nodes: %q is negative", ErrInvalidBudget, b.Nodes)
	}
	if !isDigits(s) || len(s) > 9 {
		return 0, fmt.Errorf("%w: nodes: %s is not a count or a percentage", ErrInvalidBudget, errtext.Quote(b.Nodes))
	}
	return atoi(s), nil
}

func (b Budget) schedule() (cron.Schedule, error) {
	switch {
	case b.Duration < 0:
		return nil, fmt.Errorf("%w: duration: %s is negative", ErrInvalidBudget, b.Duration)
	case b.Schedule == "" && b.Duration == 0:
		return nil, nil
	case b.Schedule == "":
		return nil, fmt.Errorf("%w: schedule: required when duration is set", ErrInvalidBudget)
	case b.Duration == 0:
		return nil, fmt.Errorf("%w: duration: required when schedule is set", ErrInvalidBudget)
	case strings.Contains(b.Schedule, "TZ=") || strings.Contains(b.Schedule, "CRON_TZ="):
		return nil, fmt.Errorf("%w: schedule: %s: time zones are not supported (schedules are UTC)", ErrInvalidBudget, errtext.Quote(b.Schedule))
	}
	s, err := cron.ParseStandard("TZ=UTC " + b.Schedule)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule: %s: %s", ErrInvalidBudget, errtext.Quote(b.Schedule), errtext.Clip(err.Error()))
	}
	return s, nil
}

// Active reports whether the budget is in force at c.Now(): a window opens
// at each schedule hit and lasts Duration, [hit, hit+Duration) (the check walks back Duration
// and asks whether the next hit from there has come, as Karpenter does).
func (b Budget) Active(c clock.PassiveClock) (bool, error) {
	s, err := b.schedule()
	if err != nil || s == nil {
		return err == nil, err
	}
	now := c.Now().UTC()
	next := s.Next(now.Add(-b.Duration))
	return !next.After(now), nil
}

// Allowed is how many of a group of size machines the budget lets be
// disrupted now: math.MaxInt32 (no limit) when inactive, 0 when malformed
// (fail closed, with the error).
func (b Budget) Allowed(c clock.PassiveClock, size int) (int, error) {
	active, err := b.Active(c)
	if err != nil {
		return 0, err
	}
	if !active {
		return unlimited, nil
	}
	n, err := b.nodes(size)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// AppliesTo reports whether the budget limits disruptions for reason.
func (b Budget) AppliesTo(r Reason) bool {
	if len(b.Reasons) == 0 {
		return true
	}
	for _, x := range b.Reasons {
		if x == r {
			return true
		}
	}
	return false
}

// allowedFor is the minimum over budgets that apply to reason (unlimited
// when none does). Malformed budgets count as 0; their errors are returned
// joined, each naming budgets[i].
func allowedFor(budgets []Budget, c clock.PassiveClock, size int, reason Reason) (int, error) {
	allowed := unlimited
	var errs []error
	for i, b := range budgets {
		n, err := b.Allowed(c, size)
		if err != nil {
			errs = append(errs, fmt.Errorf("budgets[%d]: %w", i, err))
		}
		if b.AppliesTo(reason) && n < allowed {
			allowed = n
		}
	}
	return allowed, errors.Join(errtext.Cut(errs)...)
}
