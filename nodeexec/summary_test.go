package nodeexec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSummaryRoundTrip(t *testing.T) {
	h := &scriptedHost{exits: map[string][]int{"two/run": {4}}}
	file := filepath.Join(t.TempDir(), "termination-log")
	out, err := newTestRunner(t, h, t.TempDir(), RunnerOptions{SummaryFile: file}).Run(t.Context(), threeStepPlan())
	require.ErrorIs(t, err, ErrStepFailed)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	s, err := ParseSummary(data)
	require.NoError(t, err)
	require.Equal(t, Summary{Plan: "p", State: PlanStateFailed, FailedStep: "two", ExitCode: 4, Steps: []SummaryStep{
		{Name: "one", State: StepStateSucceeded}, {Name: "two", State: StepStateFailed, ExitCode: 4}, {Name: "three", State: StepStatePending},
	}}, s)
	require.Equal(t, out.Plan, s.Plan)
}

func TestSummaryLimit(t *testing.T) {
	o := Outcome{Plan: "p", State: PlanStateRunning}
	for i := range 500 {
		o.Steps = append(o.Steps, StepRecord{Name: fmt.Sprintf("step-%03d-%s", i, strings.Repeat("x", 20)), State: StepStatePending})
	}
	b := Summarize(o)
	require.LessOrEqual(t, len(b), summaryLimit)
	s, err := ParseSummary(b)
	require.NoError(t, err)
	require.NotEmpty(t, s.Steps)
	require.Less(t, len(s.Steps), 500)
}

func TestParseSummaryRejects(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"p":"x","s":"Dancing"}`, `{"p":"x","s":"Running","st":[{"n":"","s":"Pending"}]}`, `{"p":"x","s":"Running","zz":1}`, `{"p":"x","s":"Running"} {}`} {
		_, err := ParseSummary([]byte(in))
		require.ErrorIs(t, err, ErrMalformed, in)
	}
}

func FuzzParseSummary(f *testing.F) {
	f.Add(Summarize(Outcome{Plan: "p", State: PlanStateRunning, Steps: []StepRecord{{Name: "a", State: StepStateRunning}}}))
	f.Add(Summarize(Outcome{Plan: "p", State: PlanStateFailed, Failure: &Failure{Step: "a", ExitCode: 3}, Steps: []StepRecord{{Name: "a", State: StepStateFailed, ExitCode: 3}}}))
	f.Add([]byte(`{"p":"x","s":"Running","st":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSummary(data)
		if err != nil {
			return
		}
		o := Outcome{Plan: s.Plan, State: s.State}
		for _, st := range s.Steps {
			o.Steps = append(o.Steps, StepRecord{Name: st.Name, State: st.State, ExitCode: st.ExitCode})
		}
		if s.FailedStep != "" || s.ExitCode != 0 {
			o.Failure = &Failure{Step: s.FailedStep, ExitCode: s.ExitCode}
		}
		if _, err := ParseSummary(Summarize(o)); err != nil {
			t.Fatalf("re-summarised summary does not parse: %v", err)
		}
	})
}
