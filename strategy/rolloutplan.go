package strategy

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Summary counts machines by method.
func (pl *RolloutPlan) Summary() map[Method]int {
	out := map[Method]int{}
	for _, m := range pl.Machines {
		out[m.Method]++
	}
	return out
}

// Machine returns the plan for the named machine.
func (pl *RolloutPlan) Machine(name string) (PlannedMachine, bool) {
	for _, m := range pl.Machines {
		if m.Machine == name {
			return m, true
		}
	}
	return PlannedMachine{}, false
}

// JSON renders the plan as indented JSON.
func (pl *RolloutPlan) JSON() ([]byte, error) {
	return json.MarshalIndent(pl, "", "  ")
}

// WriteTable writes the plan as an aligned table, one machine a line (batch,
// machine, role/group, method, versions, reason), then gates and warnings.
func (pl *RolloutPlan) WriteTable(w io.Writer) error {
	if w == nil || pl == nil {
		return fmt.Errorf("%w: WriteTable needs a plan and a writer", ErrInvalidStrategy)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BATCH\tMACHINE\tGROUP\tMETHOD\tVERSION\tREASON")
	for _, m := range pl.Machines {
		batch := "-"
		if m.Batch > 0 {
			batch = strconv.Itoa(m.Batch)
			if m.Batch <= len(pl.Batches) && pl.Batches[m.Batch-1].Canary {
				batch += " canary"
			}
		}
		group := m.Group
		if m.Role == RoleControlPlane {
			group = "control-plane"
		}
		ver := m.FromVersion
		if m.ToVersion != m.FromVersion {
			ver += " -> " + m.ToVersion
		}
		if ver == "" {
			ver = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", batch, m.Machine, group, m.Method, ver, oneLine(m.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var gates []string
	for _, b := range pl.Batches {
		if b.HealthGate {
			gates = append(gates, strconv.Itoa(b.Index))
		}
	}
	if len(gates) > 0 {
		if _, err := fmt.Fprintf(w, "health gate after batch %s\n", strings.Join(gates, ", ")); err != nil {
			return err
		}
	}
	if pl.CircuitOpen {
		if _, err := fmt.Fprintln(w, "circuit breaker open: nothing planned"); err != nil {
			return err
		}
	}
	for _, wn := range pl.Warnings {
		if _, err := fmt.Fprintf(w, "warning: %s\n", wn.Error()); err != nil {
			return err
		}
	}
	return nil
}

// String renders the table.
func (pl *RolloutPlan) String() string {
	var b strings.Builder
	_ = pl.WriteTable(&b) // a strings.Builder never fails
	return b.String()
}

func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
