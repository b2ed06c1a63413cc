// Command release writes a file-based Go module proxy (GOPROXY=file://DIR)
// holding upgradekit's modules at one version, built from a git revision
// of the repository: the layout the go command reads (<module>/@v/list,
// <version>.info, .mod and .zip), each zip made by golang.org/x/mod/zip
// from the committed files only, with the module's own exclusions (nested
// modules, vendor directories). hack/release.sh runs it after tagging; its
// test uses it to install the modules into a consumer module the way
// `go get` would from a real proxy.
//
//	release -repo DIR -rev REV -version vX.Y.Z -out PROXYDIR MODULE[=SUBDIR]...
//
// Each MODULE is a module path, optionally with the subdirectory it lives
// in ("github.com/upgradekit/upgradekit/amiselect/aws=amiselect/aws").
//
//	release clusterctl -repo DIR -version vX.Y.Z -out REPODIR
//
// writes the in-place extension's clusterctl repository files for the
// version instead (runClusterctl): metadata.yaml and
// runtime-extension-components.yaml, generated from the extension's
// kustomize base.
//
// Exit codes: 0 written, 1 error, 2 usage.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "clusterctl" {
		return runClusterctl(args[1:], stderr)
	}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", ".", "repository root")
	rev := fs.String("rev", "HEAD", "git revision the modules are taken from")
	version := fs.String("version", "", "module version, vX.Y.Z[-pre]")
	out := fs.String("out", "", "proxy directory to write")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !semver.IsValid(*version) || semver.Build(*version) != "" || *out == "" || fs.NArg() == 0 {
		fmt.Fprintf(stderr, "release: need -version vX.Y.Z[-pre] (got %q), -out and at least one module\n", *version)
		return 2
	}
	for _, arg := range fs.Args() {
		path, dir, _ := strings.Cut(arg, "=")
		if err := module.CheckPath(path); err != nil {
			fmt.Fprintf(stderr, "release: %v\n", err)
			return 2
		}
		if err := write(*repo, *rev, path, dir, *version, *out); err != nil {
			fmt.Fprintf(stderr, "release: %s@%s: %v\n", path, *version, err)
			return 1
		}
	}
	return 0
}

// write adds one module version to the proxy directory.
func write(repo, rev, path, dir, version, out string) error {
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	m := module.Version{Path: path, Version: version}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(f, m, repo, rev, dir); err != nil {
		f.Close()
		return fmt.Errorf("zip: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	gomod, err := exec.Command("git", "-C", repo, "show", rev+":"+strings.TrimPrefix(filepath.ToSlash(filepath.Join(dir, "go.mod")), "./")).Output()
	if err != nil {
		return fmt.Errorf("go.mod at %s: %w", rev, err)
	}
	if err := os.WriteFile(filepath.Join(at, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(at, version+".info"), info, 0o644); err != nil {
		return err
	}
	list, _ := os.ReadFile(filepath.Join(at, "list"))
	for _, v := range strings.Fields(string(list)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(filepath.Join(at, "list"), append(list, []byte(version+"\n")...), 0o644)
}
