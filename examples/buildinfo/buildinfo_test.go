package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLine(t *testing.T) {
	main := debug.Module{Path: "github.com/upgradekit/upgradekit", Version: "v0.3.0"}
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{Main: main, GoVersion: "go1.27.3"}, "upgrader github.com/upgradekit/upgradekit v0.3.0 go1.27.3"},
		{"from a clone", debug.BuildInfo{Main: debug.Module{Path: main.Path, Version: "(devel)"}, GoVersion: "go1.26.8",
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c"}, {Key: "vcs.modified", Value: "false"}}},
			"upgrader github.com/upgradekit/upgradekit (devel) revision 1a2b3c go1.26.8"},
		{"uncommitted changes", debug.BuildInfo{Main: main, GoVersion: "go1.26.8",
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1a2b3c"}, {Key: "vcs.modified", Value: "true"}}},
			"upgrader github.com/upgradekit/upgradekit v0.3.0 revision 1a2b3c+modified go1.26.8"},
		{"nothing known", debug.BuildInfo{}, "upgrader"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, line("upgrader", &tt.bi))
		})
	}
}

func TestVersionOfThisBinary(t *testing.T) {
	v := Version("x")
	require.True(t, strings.HasPrefix(v, "x "), v)
	require.Contains(t, v, "go1.")
}
