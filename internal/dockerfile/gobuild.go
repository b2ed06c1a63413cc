package dockerfile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// GoBuild is what ReplayGoBuild found and made.
type GoBuild struct {
	// Copied are the destination directories of the stage's COPYs,
	// relative to its WORKDIR, without a trailing slash.
	Copied []string
	// Env are the variables the RUN sets before `go build`.
	Env []string
	// Package is the package argument of `go build`; Out its -o in the
	// stage.
	Package, Out string
	// Binary is where the replay wrote the binary.
	Binary string
}

// ReplayGoBuild replays a Go build stage outside docker: the files its
// COPYs select from root (globs, one level, as docker does for them) into
// an empty directory under tmp, then its one RUN's `go build` command,
// with -o redirected under tmp. The RUN must be of the form
// "[--mount...] VAR=value... go build ... -o OUT PACKAGE".
func ReplayGoBuild(s Stage, root, tmp string) (GoBuild, error) {
	var b GoBuild
	src := filepath.Join(tmp, "src")
	for _, c := range s.All("COPY") {
		f := strings.Fields(c)
		if strings.HasPrefix(f[0], "--") {
			return b, fmt.Errorf("COPY %s: a COPY from another stage in a build stage", c)
		}
		dst := f[len(f)-1]
		for _, pattern := range f[:len(f)-1] {
			matches, err := filepath.Glob(filepath.Join(root, pattern))
			if err != nil {
				return b, err
			}
			if len(matches) == 0 {
				return b, fmt.Errorf("COPY %s matches nothing", pattern)
			}
			for _, m := range matches {
				data, err := os.ReadFile(m)
				if err != nil {
					return b, err
				}
				target := filepath.Join(src, dst, filepath.Base(m))
				if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
					return b, err
				}
				if err := os.WriteFile(target, data, 0o644); err != nil {
					return b, err
				}
			}
		}
		b.Copied = append(b.Copied, strings.TrimSuffix(dst, "/"))
	}
	runs := s.All("RUN")
	if len(runs) != 1 {
		return b, fmt.Errorf("the build stage has %d RUNs, want 1", len(runs))
	}
	words := ShellWords(runs[0])
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:]
	}
	for len(words) > 0 && strings.Contains(words[0], "=") {
		b.Env, words = append(b.Env, words[0]), words[1:]
	}
	if len(words) < 3 || words[0] != "go" || words[1] != "build" {
		return b, fmt.Errorf("RUN %s: not VAR=value... go build", runs[0])
	}
	o := slices.Index(words, "-o")
	if o < 0 || o+1 >= len(words) {
		return b, errors.New("go build without -o")
	}
	b.Package, b.Out = words[len(words)-1], words[o+1]
	b.Binary = filepath.Join(tmp, "out", filepath.Base(b.Out))
	words[o+1] = b.Binary
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("%s: %w\n%s", strings.Join(words, " "), err, out)
	}
	return b, nil
}

// ShellWords splits a command line as sh does for the simple quoting
// Dockerfiles here use: whitespace separates words, double quotes group.
func ShellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// Toolchain is the GOTOOLCHAIN the build's RUN sets ("" without one).
func (b GoBuild) Toolchain() string {
	for _, e := range b.Env {
		if v, ok := strings.CutPrefix(e, "GOTOOLCHAIN="); ok {
			return v
		}
	}
	return ""
}

// ModulePackages are the directories, relative to root and slash-separated,
// of the main module's packages that pkgDir's package imports (itself
// included): what a build stage must COPY.
func ModulePackages(pkgDir, root string) ([]string, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", ".")
	cmd.Dir = pkgDir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps in %s: %w", pkgDir, err)
	}
	var dirs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	return dirs, nil
}
