package kubeadmnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
)

// Image is a container image made of static binaries, written by
// WriteImages in the docker-archive format `ctr images import` reads. No
// registry is involved: the node imports the archive into containerd's
// k8s.io namespace, where the kubelet finds it by Name.
type Image struct {
	// Name is the full reference the kubelet asks for, for example
	// "registry.k8s.io/kube-apiserver:v1.36.3".
	Name string
	// Files maps an absolute path in the image to a file on this machine,
	// copied with mode 0755 (they are binaries).
	Files map[string]string
	// Symlinks maps an absolute path in the image to a link target (for
	// busybox's applets).
	Symlinks map[string]string
	// Entrypoint is the image's entrypoint; nil leaves it unset (the
	// static pods kubeadm writes give a command).
	Entrypoint []string
}

// imageRef is what WriteImages accepts as a name: a registry host, a
// path and a tag, without a digest.
var imageRef = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+:[A-Za-z0-9._-]{1,128}$`)

// WriteImages writes images as one docker-archive tar (manifest.json with
// RepoTags, a config and one layer per image). Each layer holds the
// image's files under their paths, a /tmp and a PATH of /usr/local/bin,
// /usr/bin and /bin.
func WriteImages(w io.Writer, images ...Image) error {
	tw := tar.NewWriter(w)
	type manifest struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifests []manifest
	for i, img := range images {
		if !imageRef.MatchString(img.Name) {
			return fmt.Errorf("nodetest: image %d: name %q: want registry/path:tag", i, img.Name)
		}
		layer, err := imageLayer(img)
		if err != nil {
			return fmt.Errorf("nodetest: image %s: %w", img.Name, err)
		}
		sum := sha256.Sum256(layer)
		diffID := "sha256:" + hex.EncodeToString(sum[:])
		cfg := map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"config": map[string]any{
				"Env":        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
				"Entrypoint": img.Entrypoint,
			},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		}
		cfgJSON, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		cfgSum := sha256.Sum256(cfgJSON)
		cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
		layerName := hex.EncodeToString(sum[:]) + "/layer.tar"
		if err := writeTarFile(tw, cfgName, cfgJSON); err != nil {
			return err
		}
		if err := writeTarFile(tw, layerName, layer); err != nil {
			return err
		}
		manifests = append(manifests, manifest{Config: cfgName, RepoTags: []string{img.Name}, Layers: []string{layerName}})
	}
	m, err := json.Marshal(manifests)
	if err != nil {
		return err
	}
	if err := writeTarFile(tw, "manifest.json", m); err != nil {
		return err
	}
	return tw.Close()
}

// imageLayer returns the uncompressed layer tar of one image.
func imageLayer(img Image) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"tmp": true}
	paths := make([]string, 0, len(img.Files)+len(img.Symlinks))
	for _, m := range []map[string]string{img.Files, img.Symlinks} {
		for p := range m {
			if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
				return nil, fmt.Errorf("file %q: want a clean absolute path", p)
			}
			paths = append(paths, p)
			for d := path.Dir(p); d != "/"; d = path.Dir(d) {
				dirs[strings.TrimPrefix(d, "/")] = true
			}
		}
	}
	sort.Strings(paths)
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList) // parents sort before their children
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		if target, ok := img.Symlinks[p]; ok {
			if _, dup := img.Files[p]; dup {
				return nil, fmt.Errorf("%q is both a file and a link", p)
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(p, "/"), Linkname: target, Mode: 0o777}); err != nil {
				return nil, err
			}
			continue
		}
		if err := addFile(tw, strings.TrimPrefix(p, "/"), img.Files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addFile(tw *tar.Writer, name, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: st.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

func writeTarFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
