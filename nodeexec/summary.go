package nodeexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// summaryLimit is the largest summary Summarize produces: the kubelet keeps
// at most 4096 bytes of a container's termination message.
const summaryLimit = 4096

// Summary is a compact form of an Outcome for places with little room,
// such as a container's termination message, which the kubelet copies into
// the pod status (State or LastTerminationState) when the container exits,
// even when it was killed.
type Summary struct {
	Plan  string        `json:"p"`
	State PlanState     `json:"s"`
	Steps []SummaryStep `json:"st"`
	// FailedStep and ExitCode repeat Outcome.Failure's step and code.
	FailedStep string `json:"fs,omitempty"`
	ExitCode   int    `json:"ec,omitempty"`
}

// SummaryStep is one step in a Summary.
type SummaryStep struct {
	Name     string    `json:"n"`
	State    StepState `json:"s"`
	ExitCode int       `json:"e,omitempty"`
}

// Summarize returns the JSON summary of o, at most 4096 bytes (the
// steps that do not fit are dropped from the end).
func Summarize(o Outcome) []byte {
	s := Summary{Plan: o.Plan, State: o.State}
	if o.Failure != nil {
		s.FailedStep, s.ExitCode = o.Failure.Step, o.Failure.ExitCode
	}
	for _, r := range o.Steps {
		s.Steps = append(s.Steps, SummaryStep{Name: r.Name, State: r.State, ExitCode: r.ExitCode})
	}
	for {
		b, err := json.Marshal(s)
		if err != nil {
			return nil
		}
		if len(b) <= summaryLimit || len(s.Steps) == 0 {
			return b
		}
		s.Steps = s.Steps[:len(s.Steps)-1]
	}
}

// ParseSummary parses what Summarize wrote, strictly.
func ParseSummary(data []byte) (Summary, error) {
	var s Summary
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Summary{}, fmt.Errorf("nodeexec: parse summary: %w: %w", ErrMalformed, err)
	}
	if dec.More() {
		return Summary{}, fmt.Errorf("nodeexec: parse summary: %w: trailing data", ErrMalformed)
	}
	if s.Plan == "" || !s.State.known() {
		return Summary{}, fmt.Errorf("nodeexec: parse summary: %w: missing plan or unknown state %q", ErrMalformed, s.State)
	}
	for i, st := range s.Steps {
		if st.Name == "" || !st.State.known() {
			return Summary{}, fmt.Errorf("nodeexec: parse summary: %w: steps[%d]: bad name or state", ErrMalformed, i)
		}
	}
	return s, nil
}

func (r *Runner) writeSummary(o Outcome) {
	if r.summaryFile == "" {
		return
	}
	if err := os.WriteFile(r.summaryFile, Summarize(o), 0o644); err != nil {
		r.log.Error(err, "writing summary file", "path", r.summaryFile)
	}
}
