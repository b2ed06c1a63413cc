package dockerfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnpinnedBases(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("ab", 32)
	stages, err := Parse(strings.NewReader(`ARG GO_IMAGE=golang:1.27
FROM golang:1.27-bookworm` + digest + ` AS build
FROM --platform=linux/amd64 debian:bookworm-slim AS tools
FROM ${GO_IMAGE} AS other
FROM scratch AS image
FROM image
FROM build
FROM alpine@sha256:short
FROM registry.example/team/base:v1` + digest + `
`))
	require.NoError(t, err)
	require.Equal(t, []string{"debian:bookworm-slim", "${GO_IMAGE}", "alpine@sha256:short"}, UnpinnedBases(stages))
}

// TestShippedImagesArePinned is the supply-chain rule for every Dockerfile
// in the repository: each base image is pinned by digest (or is scratch or
// an earlier stage), no `# syntax=` directive pulls a frontend image by
// tag, and each stage that runs `go build` builds with the toolchain the
// Makefile ships with (SHIPPED_GOTOOLCHAIN), the one `make vulncheck`
// scans with.
func TestShippedImagesArePinned(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^SHIPPED_GOTOOLCHAIN \?= (go[0-9.]+)$`).FindSubmatch(makefile)
	require.NotNil(t, m, "the Makefile sets SHIPPED_GOTOOLCHAIN")
	toolchain := string(m[1])

	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (d.Name() == "Dockerfile" || strings.HasSuffix(d.Name(), ".Dockerfile")) {
			files = append(files, path)
		}
		return nil
	}))
	require.NotEmpty(t, files)
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, line := range strings.Split(string(text), "\n") {
			if d, ok := strings.CutPrefix(strings.TrimSpace(line), "# syntax="); ok {
				require.Regexp(t, `@sha256:[0-9a-f]{64}$`, d, "%s: a # syntax= frontend image must be pinned by digest", rel)
			}
		}
		stages, err := Parse(strings.NewReader(string(text)))
		require.NoError(t, err)
		require.Empty(t, UnpinnedBases(stages), "%s: base images not pinned by digest", rel)
		for _, s := range stages {
			for _, run := range s.All("RUN") {
				if !strings.Contains(run, "go build") {
					continue
				}
				require.Contains(t, ShellWords(run), "GOTOOLCHAIN="+toolchain,
					"%s: stage %q builds a shipped binary: it must set GOTOOLCHAIN=%s (the Makefile's SHIPPED_GOTOOLCHAIN)", rel, s.Name, toolchain)
			}
		}
	}
}
