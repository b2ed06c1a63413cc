package main

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgradekit/upgradekit/internal/dockerfile"
)

// TestDockerfile checks, without docker, that the Dockerfile builds a
// static binary of this package from the packages it copies (the build
// stage replayed), and that the image runs as deploy/extension.yaml runs
// it: its user is the Deployment's numeric non-root user, the Deployment
// relies on its entrypoint, its port is the one served, and its default
// command exits 0.
func TestDockerfile(t *testing.T) {
	f, err := os.Open("Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	stages, err := dockerfile.Parse(f)
	require.NoError(t, err)
	require.Len(t, stages, 2)
	build, ok := dockerfile.Find(stages, "build")
	require.True(t, ok, "a build stage")

	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	want, err := dockerfile.ModulePackages(".", root)
	require.NoError(t, err)
	b, err := dockerfile.ReplayGoBuild(build, root, t.TempDir())
	require.NoError(t, err)
	for _, d := range want {
		require.Contains(t, b.Copied, d, "the build stage must COPY package %s", d)
	}
	mods, err := dockerfile.ModuleFiles(".", root)
	require.NoError(t, err)
	for _, f := range mods {
		require.Contains(t, b.Files, f, "the build stage must COPY %s", f)
	}
	require.Contains(t, b.Env, "CGO_ENABLED=0")
	require.Equal(t, "examples", b.Dir, "it builds in the examples module")
	require.Equal(t, "./inplace-extension", b.Package)
	require.NotEmpty(t, b.Toolchain(), "the build stage sets GOTOOLCHAIN (the Makefile's SHIPPED_GOTOOLCHAIN)")
	info, err := buildinfo.ReadFile(b.Binary)
	require.NoError(t, err)
	require.Equal(t, b.Toolchain(), info.GoVersion, "the binary is built by the pinned toolchain")
	bin, err := elf.Open(b.Binary)
	require.NoError(t, err)
	for _, p := range bin.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "static: the image is scratch")
	}
	bin.Close()

	img := stages[1]
	require.Equal(t, "scratch", img.From)
	require.Equal(t, []string{"--from=build " + b.Out + " /inplace-extension"}, img.All("COPY"))
	var entrypoint, cmd []string
	require.NoError(t, json.Unmarshal([]byte(img.All("ENTRYPOINT")[0]), &entrypoint))
	require.NoError(t, json.Unmarshal([]byte(img.All("CMD")[0]), &cmd))
	require.Equal(t, []string{"/inplace-extension"}, entrypoint)
	out, err := exec.Command(b.Binary, cmd...).CombinedOutput()
	require.NoError(t, err, "`docker run IMAGE` exits 0: %s", out)
	require.Contains(t, string(out), "-upgrader-image")

	var dep appsv1.Deployment
	for _, obj := range deployManifests(t) {
		if obj.GetKind() == "Deployment" {
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &dep))
		}
	}
	sc := dep.Spec.Template.Spec.SecurityContext
	require.NotNil(t, sc)
	user, group, ok := strings.Cut(img.All("USER")[0], ":")
	require.True(t, ok, "USER uid:gid")
	require.Equal(t, user, strconv.FormatInt(*sc.RunAsUser, 10), "the image's user is the Deployment's runAsUser")
	require.Equal(t, group, strconv.FormatInt(*sc.RunAsGroup, 10))
	require.True(t, *sc.RunAsNonRoot)
	c := dep.Spec.Template.Spec.Containers[0]
	require.Empty(t, c.Command, "the Deployment runs the image's entrypoint")
	require.Equal(t, []string{strconv.Itoa(int(c.Ports[0].ContainerPort))}, img.All("EXPOSE"))
}
