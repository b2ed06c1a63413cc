package strategy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

func at(s string) *clocktesting.FakePassiveClock {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err) // test fixture
	}
	return clocktesting.NewFakePassiveClock(t)
}

func TestBudgetAllowed(t *testing.T) {
	tests := []struct {
		name    string
		b       Budget
		now     string
		size    int
		want    int
		wantErr string // field named in the error; "" = no error
	}{
		{"count", Budget{Nodes: "3"}, "2026-01-05T12:00:00Z", 10, 3, ""},
		{"percent rounds up", Budget{Nodes: "10%"}, "2026-01-05T12:00:00Z", 11, 2, ""},
		{"percent of a small group rounds up to 1", Budget{Nodes: "5%"}, "2026-01-05T12:00:00Z", 3, 1, ""},
		{"zero percent", Budget{Nodes: "0%"}, "2026-01-05T12:00:00Z", 50, 0, ""},
		{"100 percent", Budget{Nodes: "100%"}, "2026-01-05T12:00:00Z", 7, 7, ""},
		{"zero", Budget{Nodes: "0"}, "2026-01-05T12:00:00Z", 7, 0, ""},
		// A window that opens at 09:00 UTC on weekdays and lasts 8 hours.
		{"inside a cron window", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T12:00:00Z", 10, 0, ""},
		{"at the window's opening", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T09:00:00Z", 10, 0, ""},
		{"at the window's end it is over: [open, open+duration)", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T17:00:00Z", 10, unlimited, ""},
		{"a minute before the end", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T16:59:00Z", 10, 0, ""},
		{"after the window", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T17:01:00Z", 10, unlimited, ""},
		{"before the window", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-05T08:59:00Z", 10, unlimited, ""},
		{"weekend: no window", Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}, "2026-01-04T12:00:00Z", 10, unlimited, ""},
		{"window across midnight", Budget{Nodes: "1", Schedule: "0 22 * * *", Duration: 4 * time.Hour}, "2026-01-06T01:30:00Z", 10, 1, ""},
		{"@daily", Budget{Nodes: "2", Schedule: "@daily", Duration: time.Hour}, "2026-01-06T00:30:00Z", 10, 2, ""},
		{"clock in another zone is read in UTC", Budget{Nodes: "0", Schedule: "0 9 * * *", Duration: time.Hour}, "2026-01-05T10:30:00+01:00", 10, 0, ""},
		{"bad cron", Budget{Nodes: "1", Schedule: "61 * * * *", Duration: time.Hour}, "2026-01-05T12:00:00Z", 10, 0, "schedule"},
		{"cron with 4 fields", Budget{Nodes: "1", Schedule: "* * * *", Duration: time.Hour}, "2026-01-05T12:00:00Z", 10, 0, "schedule"},
		{"time zone in schedule", Budget{Nodes: "1", Schedule: "TZ=Europe/Paris 0 9 * * *", Duration: time.Hour}, "2026-01-05T12:00:00Z", 10, 0, "schedule"},
		{"schedule without duration", Budget{Nodes: "1", Schedule: "@daily"}, "2026-01-05T12:00:00Z", 10, 0, "duration"},
		{"duration without schedule", Budget{Nodes: "1", Duration: time.Hour}, "2026-01-05T12:00:00Z", 10, 0, "schedule"},
		{"negative duration", Budget{Nodes: "1", Schedule: "@daily", Duration: -time.Hour}, "2026-01-05T12:00:00Z", 10, 0, "duration"},
		{"negative count", Budget{Nodes: "-1"}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"percent over 100", Budget{Nodes: "101%"}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"not a number", Budget{Nodes: "ten"}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"empty", Budget{}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"percent sign only", Budget{Nodes: "%"}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"huge count", Budget{Nodes: "99999999999999999999"}, "2026-01-05T12:00:00Z", 10, 0, "nodes"},
		{"inactive budget with bad nodes is still unlimited", Budget{Nodes: "x", Schedule: "0 9 * * *", Duration: time.Hour}, "2026-01-05T12:00:00Z", 10, unlimited, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.b.Allowed(at(tt.now), tt.size)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalidBudget)
				require.Contains(t, err.Error(), tt.wantErr+":")
				require.Zero(t, got, "a malformed budget allows nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBudgetValidate(t *testing.T) {
	require.NoError(t, Budget{Nodes: "10%", Schedule: "@hourly", Duration: time.Minute}.Validate())
	require.ErrorIs(t, Budget{Nodes: "10%", Schedule: "bogus", Duration: time.Minute}.Validate(), ErrInvalidBudget)
	require.ErrorIs(t, Budget{Nodes: "x"}.Validate(), ErrInvalidBudget)
}

func TestAllowedFor(t *testing.T) {
	c := at("2026-01-05T12:00:00Z")
	budgets := []Budget{
		{Nodes: "50%"},
		{Nodes: "1", Reasons: []Reason{ReasonDrifted}},
		{Nodes: "0", Reasons: []Reason{ReasonEmpty}, Schedule: "0 0 * * *", Duration: time.Hour}, // inactive at noon
	}
	n, err := allowedFor(budgets, c, 10, ReasonDrifted)
	require.NoError(t, err)
	require.Equal(t, 1, n, "minimum over the active budgets that apply")
	n, err = allowedFor(budgets, c, 10, ReasonUnhealthy)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = allowedFor(budgets, c, 10, ReasonEmpty)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = allowedFor(nil, c, 10, ReasonEmpty)
	require.NoError(t, err)
	require.Equal(t, unlimited, n)

	bad := append(budgets, Budget{Nodes: "2", Schedule: "nope", Duration: time.Hour, Reasons: []Reason{ReasonEmpty}})
	n, err = allowedFor(bad, c, 10, ReasonEmpty)
	require.ErrorIs(t, err, ErrInvalidBudget)
	require.Contains(t, err.Error(), "budgets[3]: ")
	require.Zero(t, n, "malformed budget fails closed")
	// The malformed budget is reported even for a reason it does not cover,
	// but does not limit that reason.
	n, err = allowedFor(bad, c, 10, ReasonDrifted)
	require.True(t, errors.Is(err, ErrInvalidBudget))
	require.Equal(t, 1, n)
}

// FuzzBudget: no input panics; a budget either validates or is an
// ErrInvalidBudget, and a valid one never allows more than the group or
// less than zero.
func FuzzBudget(f *testing.F) {
	f.Add("10%", "0 9 * * 1-5", int64(8*time.Hour), 10)
	f.Add("3", "", int64(0), 5)
	f.Add("101%", "@daily", int64(time.Hour), 1)
	f.Add("-1", "61 * * * *", int64(-1), 0)
	f.Add("", "TZ=UTC @hourly", int64(time.Minute), 100)
	f.Fuzz(func(t *testing.T, nodes, schedule string, dur int64, size int) {
		b := Budget{Nodes: nodes, Schedule: schedule, Duration: time.Duration(dur)}
		n, err := b.Allowed(at("2026-01-05T12:00:00Z"), size)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidBudget)
			require.Zero(t, n)
			return
		}
		require.GreaterOrEqual(t, n, 0)
		// A count (spaces around it are trimmed) may exceed the group.
		if n != unlimited && size >= 0 && !isDigits(strings.TrimSpace(nodes)) {
			require.LessOrEqual(t, n, size, "a percentage never exceeds the group")
		}
	})
}
