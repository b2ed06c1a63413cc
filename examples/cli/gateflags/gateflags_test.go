package gateflags_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/examples/cli/gateflags"
	"github.com/upgradekit/upgradekit/strategy"
)

func TestFlags(t *testing.T) {
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return nil, nil }
	for _, tc := range []struct {
		name  string
		args  []string
		err   string
		gates []string // the gates built with a workload client
	}{
		{"none", nil, "", nil},
		{"all three", []string{"--maintenance-window=0 2 * * 6", "--maintenance-duration", "4h", "--maintenance-timezone", "Europe/Berlin", "--soak", "5m", "--blocking-pod-selector", "app=backup"}, "",
			[]string{"maintenance-window", "soak", "blocking-pods"}},
		{"a window that does not parse", []string{"--maintenance-window", "0 2 * *"}, "--maintenance-window/--maintenance-duration/--maintenance-timezone: invalid gate: ", nil},
		{"an unknown zone", []string{"--maintenance-window", "0 2 * * *", "--maintenance-timezone", "Mars/Olympus"}, "time zone", nil},
		{"a window of no length", []string{"--maintenance-window", "0 2 * * *", "--maintenance-duration", "0s"}, "must be positive", nil},
		{"a negative soak", []string{"--soak", "-1m"}, "--soak -1m0s: must not be negative", nil},
		{"a bad selector", []string{"--blocking-pod-selector", "a in ("}, `--blocking-pod-selector "a in (": not a non-empty label selector`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f gateflags.Flags
			fs := cli.NewFlagSet("test")
			f.Add(fs)
			require.NoError(t, fs.Parse(tc.args))
			err := f.Check()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorIs(t, err, gateflags.ErrInvalid)
				require.False(t, f.Set())
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(tc.gates) > 0, f.Set())
			gates, err := f.Gates(workload)
			require.NoError(t, err)
			var names []string
			for _, g := range gates {
				// A gate names itself in its answer; the workload gates,
				// with a client that is nil, answer Wait naming themselves.
				names = append(names, g.Check(t.Context(), strategy.GateRequest{Cluster: "default/demo", Machine: "m", Node: "n", Now: time.Now()}).Gate)
			}
			require.Equal(t, tc.gates, names)
			window, err := f.Gates(nil)
			require.NoError(t, err)
			require.Len(t, window, min(len(tc.gates), 1), "without a workload client only the window is built")
		})
	}
}
