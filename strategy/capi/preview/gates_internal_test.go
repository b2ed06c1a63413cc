package preview

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gatereport"
)

// TestGatesLine: the group's line names the answer UpdateMachine would
// act on (a Stop before a Wait, the longest wait), counts the machines the
// gates hold, and never calls open what was not asked.
func TestGatesLine(t *testing.T) {
	const again = "; asked again when Cluster API reaches each machine"
	wait := func(gate string, d time.Duration) gatereport.Answer {
		return gatereport.Answer{Gate: gate, Verdict: strategy.VerdictWait, Reason: gate + " closed", RetryAfter: &metav1.Duration{Duration: d}}
	}
	allow := func(gate string) gatereport.Answer {
		return gatereport.Answer{Gate: gate, Verdict: strategy.VerdictAllow}
	}
	stop := gatereport.Answer{Gate: "breaker", Verdict: strategy.VerdictStop, Reason: "tripped"}
	m := func(name string, v strategy.Verdict, gates ...gatereport.Answer) gatereport.MachineReport {
		return gatereport.MachineReport{Name: name, Verdict: v, Gates: append([]gatereport.Answer{}, gates...)}
	}
	gone := gatereport.MachineReport{Name: "a", Gates: []gatereport.Answer{}, Error: "no Machine default/a of cluster demo"}
	for _, tc := range []struct {
		name    string
		reports []gatereport.MachineReport
		want    string
	}{
		{"not asked at all", nil, ""},
		{"all open", []gatereport.MachineReport{m("a", strategy.VerdictAllow, allow("window"), allow("soak")), m("b", strategy.VerdictAllow, allow("window"), allow("soak"))},
			"gates now: open (window, soak)" + again},
		{"none configured", []gatereport.MachineReport{m("a", strategy.VerdictAllow)}, "gates now: none configured on the extension" + again},
		{"the longest wait of a machine", []gatereport.MachineReport{m("a", strategy.VerdictWait, wait("soak", time.Minute), wait("window", 20*time.Hour))},
			"gates now: Wait by soak: soak closed (retry after 20h0m0s); the gates hold 1 of 1 machines" + again},
		{"a Stop after a Wait in one machine", []gatereport.MachineReport{m("a", strategy.VerdictStop, wait("soak", time.Minute), stop)},
			"gates now: Stop by breaker: tripped; the gates hold 1 of 1 machines" + again},
		{"a later machine's Stop before an earlier one's Wait", []gatereport.MachineReport{m("a", strategy.VerdictWait, wait("window", time.Hour)), m("b", strategy.VerdictStop, stop), m("c", strategy.VerdictAllow, allow("window"))},
			"gates now: Stop by breaker: tripped; the gates hold 2 of 3 machines" + again},
		{"the first machine not asked", []gatereport.MachineReport{gone, m("b", strategy.VerdictAllow, allow("window"))},
			"gates now: open (window); not asked about a: no Machine default/a of cluster demo" + again},
		{"none asked", []gatereport.MachineReport{gone}, "gates now: not asked; not asked about a: no Machine default/a of cluster demo" + again},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, gatesLine(tc.reports))
		})
	}
}
