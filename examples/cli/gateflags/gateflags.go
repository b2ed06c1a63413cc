package gateflags

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// ErrInvalid is matched by Check's errors; each names its flags, and
// its text is the problem alone, for the command to prefix as it prefixes
// its other flag errors.
var ErrInvalid = errors.New("invalid gate flag")

type invalid struct{ err error }

func (e invalid) Error() string        { return e.err.Error() }
func (e invalid) Unwrap() error        { return e.err }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error { return invalid{fmt.Errorf(format, args...)} }

// Flags are the gate flags' values. Add registers them; Check parses
// them after the flag set is parsed.
type Flags struct {
	// Window is --maintenance-window, a cron schedule ("" for none).
	Window string
	// Duration is --maintenance-duration.
	Duration time.Duration
	// Zone is --maintenance-timezone.
	Zone string
	// Soak is --soak (0 for none).
	Soak time.Duration
	// BlockingPods is --blocking-pod-selector ("" for none).
	BlockingPods string

	window   strategy.Gate
	blockers labels.Selector
}

// Add registers the flags on fs.
func (f *Flags) Add(fs *pflag.FlagSet) {
	fs.StringVar(&f.Window, "maintenance-window", "", `start updates only in windows that open at this cron schedule (5 fields, e.g. "0 2 * * *") and last --maintenance-duration, in --maintenance-timezone; outside them UpdateMachine answers in progress and touches nothing`)
	fs.DurationVar(&f.Duration, "maintenance-duration", 3*time.Hour, "how long each maintenance window lasts")
	fs.StringVar(&f.Zone, "maintenance-timezone", "UTC", "IANA time zone of --maintenance-window (e.g. Europe/Berlin)")
	fs.DurationVar(&f.Soak, "soak", 0, "start an update only when every other node of the cluster has been Ready this long without a break (0: no soak)")
	fs.StringVar(&f.BlockingPods, "blocking-pod-selector", "", "start no update while a pod matching this label selector runs in the workload cluster (a backup, a migration)")
}

// Check parses the values: the window and its zone, a soak that is not
// negative, a non-empty label selector. Its errors match ErrInvalid.
func (f *Flags) Check() error {
	f.window, f.blockers = nil, nil
	if f.Window != "" {
		w, err := strategy.MaintenanceWindow("maintenance-window", f.Window, f.Duration, f.Zone)
		if err != nil {
			return invalidf("--maintenance-window/--maintenance-duration/--maintenance-timezone: %w", err)
		}
		f.window = w
	}
	if f.Soak < 0 {
		return invalidf("--soak %s: must not be negative", f.Soak)
	}
	if f.BlockingPods != "" {
		sel, err := labels.Parse(f.BlockingPods)
		if err != nil || sel.Empty() {
			return invalidf("--blocking-pod-selector %q: not a non-empty label selector", f.BlockingPods)
		}
		f.blockers = sel
	}
	return nil
}

// Set says whether any gate is asked for (after Check).
func (f *Flags) Set() bool { return f.window != nil || f.Soak > 0 || f.blockers != nil }

// Gates builds the gates asked for, in the order UpdateMachine asks them:
// the window, the soak, the blocking pods. The soak and the blocking pods
// read the workload cluster through workload; with a nil workload (no
// management cluster yet, as in a dry validation) only the window is
// built.
func (f *Flags) Gates(workload workload.Client) ([]strategy.Gate, error) {
	var out []strategy.Gate
	if f.window != nil {
		out = append(out, f.window)
	}
	if workload == nil {
		return out, nil
	}
	if f.Soak > 0 {
		g, err := gates.Soak(workload, f.Soak, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	if f.blockers != nil {
		g, err := gates.PodBlockers(workload, f.blockers)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}
