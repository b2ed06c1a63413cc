package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
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

	require.Equal(t, []string{"nsenter", "sh", "cp", "mkdir", "rm"}, applets(t, stages))

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
	wantDirs, err := dockerfile.ModulePackages(".", root)
	require.NoError(t, err)
	require.Contains(t, wantDirs, "nodeexec")

	b, err := dockerfile.ReplayGoBuild(build, root, t.TempDir())
	require.NoError(t, err)
	for _, d := range wantDirs {
		require.Contains(t, b.Copied, d, "the build stage must COPY package %s", d)
	}
	mods, err := dockerfile.ModuleFiles(".", root)
	require.NoError(t, err)
	for _, f := range mods {
		require.Contains(t, b.Files, f, "the build stage must COPY %s", f)
	}
	require.Contains(t, b.Env, "CGO_ENABLED=0")
	require.Equal(t, "examples", b.Dir, "it builds in the examples module")
	require.Equal(t, "./upgrader", b.Package)
	require.Equal(t, "/out/upgrader", b.Out)
	requireStatic(t, b.Binary)
	requireToolchain(t, b)
}

// requireToolchain: the stage pins a toolchain (GOTOOLCHAIN, the
// Makefile's SHIPPED_GOTOOLCHAIN; internal/dockerfile's test holds the two
// equal) and the replayed binary was built by it.
func requireToolchain(t *testing.T, b dockerfile.GoBuild) {
	t.Helper()
	require.NotEmpty(t, b.Toolchain(), "the build stage sets GOTOOLCHAIN")
	info, err := buildinfo.ReadFile(b.Binary)
	require.NoError(t, err)
	require.Equal(t, b.Toolchain(), info.GoVersion)
}

// requireStatic: the binary at path needs no program interpreter and no
// shared library, so it runs on scratch.
func requireStatic(t *testing.T, path string) {
	t.Helper()
	bin, err := elf.Open(path)
	require.NoError(t, err)
	defer bin.Close()
	for _, p := range bin.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no program interpreter")
	}
	libs, err := bin.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
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
