package main

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/internal/dockerfile"
)

// The upgrader image is built by examples/upgrader/Dockerfile. Examples do
// not import each other, so these tests read what the image holds from the
// Dockerfile's text with internal/dockerfile, as examples/upgrader's own
// tests do, and fail loudly when it changes shape rather than guess.

// upgraderImage is what the bundle target of examples/upgrader/Dockerfile
// puts in the image, as far as the upgrader pod is concerned.
type upgraderImage struct {
	files map[string]bool // absolute paths of programs
	dirs  map[string]bool // directories copied in (the bundle's /staging)
	path  []string        // the image's PATH
}

// lookPath resolves a container command as the container runtime does:
// absolute names as they are, others on the image's PATH.
func (img upgraderImage) lookPath(name string) (string, bool) {
	if path.IsAbs(name) {
		return name, img.files[name]
	}
	for _, dir := range img.path {
		if p := path.Join(dir, name); img.files[p] {
			return p, true
		}
	}
	return "", false
}

// readUpgraderImage parses examples/upgrader/Dockerfile and returns the
// contents of its bundle target.
func readUpgraderImage(t *testing.T) upgraderImage {
	t.Helper()
	f, err := os.Open("../upgrader/Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	parsed, err := dockerfile.Parse(f)
	require.NoError(t, err)
	stages := map[string]dockerfile.Stage{}
	for _, st := range parsed {
		stages[st.Name] = st
	}

	img := upgraderImage{files: map[string]bool{}, dirs: map[string]bool{}}
	bundle, ok := stages["bundle"]
	require.True(t, ok, "the Dockerfile has a bundle stage")
	require.Equal(t, "upgrader", bundle.From, "the bundle is the upgrader image plus binaries")
	for _, c := range bundle.All("COPY") {
		f := strings.Fields(c)
		require.Len(t, f, 2, "bundle COPY %q", c)
		require.True(t, strings.HasSuffix(f[1], "/"), "the bundle copies a directory: %q", c)
		img.dirs[path.Clean(f[1])] = true
	}

	up, ok := stages["upgrader"]
	require.True(t, ok, "the Dockerfile has an upgrader stage")
	require.Equal(t, "scratch", up.From, "nothing in the image but what its COPYs put there")
	for _, env := range up.All("ENV") {
		if v, ok := strings.CutPrefix(env, "PATH="); ok {
			img.path = strings.Split(v, ":")
		}
	}
	require.NotEmpty(t, img.path, "the upgrader stage sets PATH")
	for _, c := range up.All("COPY") {
		f := strings.Fields(c)
		require.Len(t, f, 3, "upgrader COPY %q", c)
		switch f[0] {
		case "--from=build": // a single file: the binary
			out := stageOutput(t, stages["build"])
			require.Equal(t, out, f[1], "the upgrader stage copies the binary the build stage writes")
			img.files[f[2]] = true
		case "--from=tools": // a root filesystem tree
			require.Equal(t, []string{"/rootfs/", "/"}, f[1:])
			for _, p := range rootfs(t, stages["tools"]) {
				img.files[p] = true
			}
		default:
			require.Failf(t, "unknown COPY", "upgrader stage: COPY %q", c)
		}
	}
	return img
}

// stageOutput is the -o path of the build stage's go build.
func stageOutput(t *testing.T, build dockerfile.Stage) string {
	t.Helper()
	m := regexp.MustCompile(`go -C examples build .*-o (\S+) \./upgrader$`).FindStringSubmatch(strings.Join(build.All("RUN"), " "))
	require.NotNil(t, m, "the build stage runs go -C examples build -o FILE ./upgrader")
	return m[1]
}

// rootfs lists the files the tools stage puts under /rootfs, as paths of
// the final image: busybox, and the applet links of its for loop.
func rootfs(t *testing.T, tools dockerfile.Stage) []string {
	t.Helper()
	run := strings.Join(tools.All("RUN"), " ")
	cp := regexp.MustCompile(`cp /bin/busybox /rootfs(/\S+)`).FindStringSubmatch(run)
	require.NotNil(t, cp, "the tools stage copies busybox into /rootfs")
	files := []string{cp[1]}
	loop := regexp.MustCompile(`for applet in ([^;]+); do ln -s busybox "/rootfs(/\S+)/\$applet"`).FindStringSubmatch(run)
	require.NotNil(t, loop, "the tools stage links busybox applets in /rootfs")
	for _, a := range strings.Fields(loop[1]) {
		files = append(files, path.Join(loop[2], a))
	}
	return files
}

func TestReadUpgraderImage(t *testing.T) {
	img := readUpgraderImage(t)
	require.Equal(t, map[string]bool{"/upgrader": true, "/bin/busybox": true, "/bin/nsenter": true, "/bin/sh": true, "/bin/cp": true, "/bin/mkdir": true, "/bin/rm": true}, img.files)
	require.Equal(t, map[string]bool{"/staging": true}, img.dirs)
	for name, want := range map[string]string{"/upgrader": "/upgrader", "nsenter": "/bin/nsenter", "/bin/sh": "/bin/sh"} {
		got, ok := img.lookPath(name)
		require.True(t, ok, name)
		require.Equal(t, want, got)
	}
	for _, name := range []string{"upgrader", "kubeadm", "/usr/bin/nsenter"} {
		_, ok := img.lookPath(name)
		require.False(t, ok, "%s is not in the image", name)
	}
}
