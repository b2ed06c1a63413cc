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
	// Files are the files the COPYs selected, relative to the build
	// context (root) and slash-separated.
	Files []string
	// Env are the variables the RUN sets before `go build`.
	Env []string
	// Dir is the directory `go -C DIR build` builds in, relative to the
	// stage's WORKDIR ("" without -C): the module the binary's main
	// package is in.
	Dir string
	// Package is the package argument of `go build`, relative to Dir; Out
	// its -o in the stage.
	Package, Out string
	// Binary is where the replay wrote the binary.
	Binary string
}

// ReplayGoBuild replays a Go build stage outside docker: the files its
// COPYs select from root (globs, one level, as docker does for them) into
// an empty directory under tmp, then its one RUN's `go build` command,
// with -o redirected under tmp. The RUN must be of the form
// "[--mount...] VAR=value... go [-C DIR] build ... -o OUT PACKAGE".
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
				if rel, err := filepath.Rel(root, m); err == nil {
					b.Files = append(b.Files, filepath.ToSlash(rel))
				}
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
	if len(words) > 3 && words[0] == "go" && words[1] == "-C" {
		b.Dir = words[2]
		words = append([]string{"go"}, words[3:]...)
	}
	if len(words) < 3 || words[0] != "go" || words[1] != "build" {
		return b, fmt.Errorf("RUN %s: not VAR=value... go [-C DIR] build", runs[0])
	}
	o := slices.Index(words, "-o")
	if o < 0 || o+1 >= len(words) {
		return b, errors.New("go build without -o")
	}
	b.Package, b.Out = words[len(words)-1], words[o+1]
	b.Binary = filepath.Join(tmp, "out", filepath.Base(b.Out))
	words[o+1] = b.Binary
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = filepath.Join(src, filepath.FromSlash(b.Dir))
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, b.Env...)...)
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
// of the packages of root's modules (root's module path and the modules
// under it) that pkgDir's package imports (itself included): what a build
// stage must COPY.
func ModulePackages(pkgDir, root string) ([]string, error) {
	prefix, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	out, err := goList(pkgDir, "-deps", "-f", "{{if .Module}}{{.Module.Path}} {{.Dir}}{{end}}", ".")
	if err != nil {
		return nil, err
	}
	return ours(out, prefix, root, "")
}

// ModuleFiles are the go.mod files, relative to root and slash-separated,
// of root's modules in the module graph of pkgDir's module, and that
// module's go.sum: what a build stage must COPY for `go build` to load the
// graph (the modules reach each other through replace directives).
func ModuleFiles(pkgDir, root string) ([]string, error) {
	prefix, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	out, err := goList(pkgDir, "-m", "-f", "{{.Path}} {{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}", "all")
	if err != nil {
		return nil, err
	}
	files, err := ours(out, prefix, root, "/go.mod")
	if err != nil {
		return nil, err
	}
	if out, err = goList(pkgDir, "-m", "-f", "{{.Dir}}"); err != nil {
		return nil, err
	}
	main, err := filepath.Rel(root, strings.TrimSpace(out))
	if err != nil {
		return nil, err
	}
	return append(files, filepath.ToSlash(filepath.Join(main, "go.sum"))), nil
}

// goList runs `go list args...` in dir on dir's module alone (GOWORK=off,
// as a Dockerfile's build stage has no go.work) and returns its output.
func goList(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	return string(out), nil
}

// modulePath reads the module path of root's go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(p, `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
}

// ours keeps, of lines "PATH DIR", the directories (plus suffix) of
// modules or packages whose path is prefix or under it, relative to root.
func ours(lines, prefix, root, suffix string) ([]string, error) {
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		path, dir, ok := strings.Cut(line, " ")
		if !ok || (path != prefix && !strings.HasPrefix(path, prefix+"/")) || dir == "" {
			continue
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.ToSlash(filepath.Join(rel, strings.TrimPrefix(suffix, "/"))))
	}
	return dirs, nil
}
