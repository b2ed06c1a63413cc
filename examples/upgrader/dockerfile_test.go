package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/internal/dockerfile"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// We cannot run docker here; these tests check what can be checked without
// it: the stages, that the build stage's COPYs and command really build a
// static binary of this package, and that every command the pod runs
// exists in the image.

// parseDockerfile reads this directory's Dockerfile into stages.
func parseDockerfile(t *testing.T) []dockerfile.Stage {
	t.Helper()
	f, err := os.Open("Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	stages, err := dockerfile.Parse(f)
	require.NoError(t, err)
	return stages
}

func stageNamed(t *testing.T, stages []dockerfile.Stage, name string) dockerfile.Stage {
	t.Helper()
	s, ok := dockerfile.Find(stages, name)
	require.True(t, ok, "Dockerfile has no stage %q", name)
	return s
}

// applets are the busybox links the tools stage creates in /bin.
func applets(t *testing.T, stages []dockerfile.Stage) []string {
	t.Helper()
	run := strings.Join(stageNamed(t, stages, "tools").All("RUN"), " ")
	require.Contains(t, run, "apt-get install -y --no-install-recommends busybox-static")
	_, after, ok := strings.Cut(run, "for applet in ")
	require.True(t, ok, "the tools stage links busybox applets")
	list, _, _ := strings.Cut(after, ";")
	return strings.Fields(list)
}

func TestDockerfileStages(t *testing.T) {
	stages := parseDockerfile(t)
	var names []string
	for _, s := range stages {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"build", "tools", "upgrader", "bundle", ""}, names)

	img := stageNamed(t, stages, "upgrader")
	require.Equal(t, "scratch", img.From)
	require.Equal(t, []string{"--from=tools /rootfs/ /", "--from=build /out/upgrader /upgrader"}, img.All("COPY"))
	require.Equal(t, []string{"PATH=/bin"}, img.All("ENV"), "OSExecutor finds nsenter on the runner's PATH")

	var entrypoint, cmd []string
	require.NoError(t, json.Unmarshal([]byte(img.All("ENTRYPOINT")[0]), &entrypoint))
	require.NoError(t, json.Unmarshal([]byte(img.All("CMD")[0]), &cmd))
	require.Equal(t, []string{"/upgrader"}, entrypoint)
	require.Equal(t, exitOK, run(context.Background(), cmd, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{}),
		"`docker run IMAGE` runs a command the binary knows")

	require.Equal(t, []string{"nsenter", "sh", "cp", "mkdir"}, applets(t, stages))

	bundle := stageNamed(t, stages, "bundle")
	require.Equal(t, "upgrader", bundle.From)
	require.Equal(t, []string{"examples/upgrader/staging/ /staging/"}, bundle.All("COPY"))
	require.Equal(t, "upgrader", stages[len(stages)-1].From, "the default target is the image without binaries")
}

// TestDockerfileBuildStage replays the build stage outside docker: the
// files its COPYs select, into an empty directory, then its go build
// command. The result must be a static binary of this package.
func TestDockerfileBuildStage(t *testing.T) {
	build := stageNamed(t, parseDockerfile(t), "build")
	require.Equal(t, []string{"/src"}, build.All("WORKDIR"))
	root, err := filepath.Abs("../..")
	require.NoError(t, err)

	// Every package of this module the binary imports is copied.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", ".").Output()
	require.NoError(t, err)
	var wantDirs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		wantDirs = append(wantDirs, filepath.ToSlash(rel))
	}
	require.Contains(t, wantDirs, "nodeexec")

	src := t.TempDir()
	var copied []string
	for _, c := range build.All("COPY") {
		f := strings.Fields(c)
		dst := f[len(f)-1]
		for _, pattern := range f[:len(f)-1] {
			matches, err := filepath.Glob(filepath.Join(root, pattern))
			require.NoError(t, err)
			require.NotEmpty(t, matches, "COPY %s matches nothing", pattern)
			for _, m := range matches {
				data, err := os.ReadFile(m)
				require.NoError(t, err)
				target := filepath.Join(src, dst, filepath.Base(m))
				require.NoError(t, os.MkdirAll(filepath.Dir(target), 0o755))
				require.NoError(t, os.WriteFile(target, data, 0o644))
			}
		}
		copied = append(copied, strings.TrimSuffix(dst, "/"))
	}
	for _, d := range wantDirs {
		require.Contains(t, copied, d, "the build stage must COPY package %s", d)
	}

	runs := build.All("RUN")
	require.Len(t, runs, 1)
	_, cmdline, ok := strings.Cut(runs[0], "CGO_ENABLED=0 ")
	require.True(t, ok, "the binary is built with CGO_ENABLED=0: %s", runs[0])
	words := shellWords(cmdline)
	env := []string{"CGO_ENABLED=0"}
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env, words = append(env, words[0]), words[1:]
	}
	require.Equal(t, []string{"go", "build"}, words[:2])
	require.Equal(t, "./examples/upgrader", words[len(words)-1])
	require.Equal(t, "/out/upgrader", words[slices.Index(words, "-o")+1])
	words[slices.Index(words, "-o")+1] = filepath.Join(src, "out", "upgrader")
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)

	bin, err := elf.Open(filepath.Join(src, "out", "upgrader"))
	require.NoError(t, err)
	defer bin.Close()
	for _, p := range bin.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no program interpreter")
	}
	libs, err := bin.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
}

// shellWords splits a command line as sh does for the simple quoting the
// Dockerfile uses: whitespace separates words, double quotes group.
func shellWords(s string) []string {
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

// TestPodCommandsExistInImage builds the pod the way the README says and
// checks that every program its containers start is in the image.
func TestPodCommandsExistInImage(t *testing.T) {
	stages := parseDockerfile(t)
	files := map[string]bool{"/upgrader": true, "/bin/busybox": true}
	for _, a := range applets(t, stages) {
		files["/bin/"+a] = true
	}
	lookPath := func(name string) string { // PATH=/bin, as the image sets
		if path.IsAbs(name) {
			return name
		}
		return "/bin/" + name
	}
	plan := nodeexec.Plan{Name: "p", Node: "n", Steps: []nodeexec.Step{
		{Name: "install", Argv: []string{"kubeadm", "upgrade", "node"}},
		{Name: "whoami", Argv: []string{"kubectl", "auth", "whoami"}, InContainer: true},
	}}
	for _, opts := range [][]nodepod.Option{
		{nodepod.WithRunnerCommand("/upgrader", "run"), nodepod.WithStageFrom("/staging")},
		{nodepod.WithRunnerCommand("/upgrader", "run"), nodepod.WithMode(nodepod.ModeSingleContainer)},
		{}, // raw layout: nsenter is the container command
	} {
		pod, err := nodepod.Build(plan, append(opts, nodepod.WithImage("upgrader:test"))...)
		require.NoError(t, err)
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if c.Name == "whoami" && len(opts) == 0 {
				continue // a raw InContainer step runs its own argv in the image: the plan's business
			}
			require.True(t, files[lookPath(c.Command[0])], "container %s runs %q, which the image lacks", c.Name, c.Command[0])
			if c.Name == nodepod.StageContainer {
				script := c.Command[2]
				for _, prog := range []string{"mkdir", "cp"} {
					require.Contains(t, script, prog+" ")
					require.True(t, files["/bin/"+prog], "the stage script runs %s", prog)
				}
			}
		}
	}
}
