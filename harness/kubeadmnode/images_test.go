package kubeadmnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// readTar returns a tar's regular files by name.
func readTar(t *testing.T, data []byte) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, names
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = b
		}
	}
}

// TestWriteImagesIsADockerArchive checks what `ctr images import` relies
// on: manifest.json names each image's config and layer, the config's
// diff_ids are the layers' digests, and the layer holds the files with
// their directories before them.
func TestWriteImagesIsADockerArchive(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "etcd")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	var buf bytes.Buffer
	require.NoError(t, WriteImages(&buf,
		Image{Name: "registry.k8s.io/etcd:3.6.8-0", Files: map[string]string{"/usr/local/bin/etcd": bin}},
		Image{Name: "registry.k8s.io/pause:3.10.2", Files: map[string]string{"/pause": bin}, Entrypoint: []string{"/pause"}},
	))
	files, _ := readTar(t, buf.Bytes())
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifest))
	require.Len(t, manifest, 2)
	require.Equal(t, []string{"registry.k8s.io/etcd:3.6.8-0"}, manifest[0].RepoTags)
	require.Equal(t, []string{"registry.k8s.io/pause:3.10.2"}, manifest[1].RepoTags)
	for i, m := range manifest {
		var cfg struct {
			OS     string `json:"os"`
			Config struct {
				Env        []string
				Entrypoint []string
			} `json:"config"`
			RootFS struct {
				Type    string   `json:"type"`
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		}
		require.NoError(t, json.Unmarshal(files[m.Config], &cfg))
		require.Equal(t, "linux", cfg.OS)
		require.Equal(t, "layers", cfg.RootFS.Type)
		require.Len(t, m.Layers, 1)
		sum := sha256.Sum256(files[m.Layers[0]])
		require.Equal(t, []string{"sha256:" + hex.EncodeToString(sum[:])}, cfg.RootFS.DiffIDs)
		layer, names := readTar(t, files[m.Layers[0]])
		if i == 0 {
			require.Equal(t, []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/etcd"}, names)
			require.Equal(t, []byte("#!/bin/sh\n"), layer["usr/local/bin/etcd"])
			require.Nil(t, cfg.Config.Entrypoint)
		} else {
			require.Equal(t, []string{"/pause"}, cfg.Config.Entrypoint)
		}
	}
}

func TestWriteImagesRefusesBadInput(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "x")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	for _, img := range []Image{
		{Name: "etcd", Files: map[string]string{"/x": bin}},
		{Name: "registry.k8s.io/etcd@sha256:00", Files: map[string]string{"/x": bin}},
		{Name: "registry.k8s.io/etcd:1", Files: map[string]string{"x": bin}},
		{Name: "registry.k8s.io/etcd:1", Files: map[string]string{"/a/../x": bin}},
		{Name: "registry.k8s.io/etcd:1", Files: map[string]string{"/x": filepath.Dir(bin)}},
	} {
		require.Error(t, WriteImages(io.Discard, img), "%+v", img)
	}
}
