package preview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/upgradekit/upgradekit/strategy"
)

// JSON renders the prediction as indented JSON (durations in
// nanoseconds, as encoding/json writes time.Duration).
func (pr *Prediction) JSON() ([]byte, error) {
	if pr == nil {
		return nil, fmt.Errorf("%w: nil prediction", ErrInvalidArgument)
	}
	return json.MarshalIndent(pr, "", "  ")
}

// Machine returns the prediction for the named machine.
func (pr *Prediction) Machine(name string) (Machine, bool) {
	if pr == nil {
		return Machine{}, false
	}
	for _, m := range pr.Machines {
		if m.Name == name {
			return m, true
		}
	}
	return Machine{}, false
}

// Count counts the machines by method.
func (pr *Prediction) Count() map[strategy.Method]int {
	out := map[strategy.Method]int{}
	if pr == nil {
		return out
	}
	for _, m := range pr.Machines {
		out[m.Method]++
	}
	return out
}

// WriteTable writes the prediction for a terminal: one line per machine
// (wave, machine, group, method, versions, estimate, why), then one per
// group, the notes and the total estimate.
func (pr *Prediction) WriteTable(w io.Writer) error {
	if pr == nil || w == nil {
		return fmt.Errorf("%w: WriteTable needs a prediction and a writer", ErrInvalidArgument)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tMACHINE\tGROUP\tMETHOD\tVERSION\tTAKES\tWHY")
	for _, m := range pr.Machines {
		wave := "-"
		if m.Wave > 0 {
			wave = strconv.Itoa(m.Wave)
		}
		ver := m.FromVersion
		switch {
		case len(m.Steps) > 0:
			for _, st := range m.Steps {
				ver += " -> " + st.ToVersion
			}
		case m.ToVersion != m.FromVersion && (m.Method == strategy.MethodInPlace || m.Method == strategy.MethodReplace || m.Method == strategy.MethodBlocked):
			ver += " -> " + m.ToVersion
		}
		if ver == "" {
			ver = "-"
		}
		takes := "-"
		if m.Estimate > 0 {
			takes = shortDuration(m.Estimate)
		}
		group := m.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wave, m.Name, group, m.Method, ver, takes, why(m))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for _, g := range pr.Groups {
		hook := ""
		if g.Hook != "" {
			hook = " (" + g.Hook + ")"
		}
		took := ""
		if g.Estimate > 0 {
			waves := "waves"
			if g.Waves == 1 {
				waves = "wave"
			}
			took = fmt.Sprintf(" (%d %s, %s)", g.Waves, waves, shortDuration(g.Estimate))
		}
		fmt.Fprintf(&b, "%s %s%s: %s%s\n", g.Kind, g.Name, hook, g.Summary, took)
		if g.OnFailure != "" {
			fmt.Fprintf(&b, "  %s\n", g.OnFailure)
		}
		if g.Gates != "" {
			fmt.Fprintf(&b, "  %s\n", g.Gates)
		}
	}
	switch {
	case pr.Mode == ModeExtension:
		fmt.Fprintf(&b, "answered by the deployed extension (ExtensionConfig %s)\n", strings.Join(pr.Extensions, ", "))
	case pr.Mode != "":
		fmt.Fprintf(&b, "answered %s (not by a deployed extension)\n", pr.Mode)
	}
	for _, n := range pr.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	fmt.Fprintf(&b, "about %s in all\n", shortDuration(pr.Estimate))
	_, err := io.WriteString(w, b.String())
	return err
}

// String renders the table.
func (pr *Prediction) String() string {
	var b strings.Builder
	_ = pr.WriteTable(&b) // a strings.Builder never fails
	return b.String()
}

// why is a machine's reason in one short line: the fields for in-place
// updates and replacements, the reason otherwise.
func why(m Machine) string {
	switch {
	case m.Method == strategy.MethodInPlace && len(m.InPlaceFields) > 0:
		return strings.Join(m.Updaters, ",") + ": " + clip(strings.Join(m.InPlaceFields, ", "), 100)
	}
	return clip(strings.ReplaceAll(m.Reason, "\n", " "), 140)
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// shortDuration writes 1h5m, 6m, 30s.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	if s == "" {
		return "0s"
	}
	return s
}
