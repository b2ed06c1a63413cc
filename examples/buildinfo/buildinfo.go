package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version returns the --version line of program, for example
// "upgrader github.com/upgradekit/upgradekit v0.3.0 revision 1a2b3c4 go1.27.3".
func Version(program string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return program + " (no build information)"
	}
	return line(program, bi)
}

func line(program string, bi *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString(program)
	for _, s := range []string{bi.Main.Path, bi.Main.Version} {
		if s != "" {
			b.WriteString(" " + s)
		}
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev != "" {
		b.WriteString(" revision " + rev + modified)
	}
	if bi.GoVersion != "" {
		b.WriteString(" " + bi.GoVersion)
	}
	return b.String()
}
