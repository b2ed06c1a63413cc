//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// fakeELF is a file hack/bundle.sh takes for a linux/arch executable: the
// ELF magic, e_machine at offset 18, and content of its own.
func fakeELF(arch, content string) []byte {
	b := make([]byte, 20)
	copy(b, "\x7fELF")
	switch arch {
	case "amd64":
		b[18] = 0x3e
	case "arm64":
		b[18] = 0xb7
	}
	return append(b, content...)
}

// fakeAssets writes dir as hack/node-assets.sh (files kubeadm, kubelet,
// kubectl, etcdctl, cni/*, versions.env) or hack/containerd-assets.sh
// writes it, with a SHA256SUMS of the files.
func fakeAssets(t *testing.T, dir, arch string, files []string, versions string) {
	t.Helper()
	var sums strings.Builder
	for _, f := range files {
		data := fakeELF(arch, f+" for "+arch)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o755))
		sum := sha256.Sum256(data)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644))
	if versions != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "versions.env"), []byte(versions), 0o644))
	}
}

// bundleScript runs hack/bundle.sh with env added; it returns stdout,
// stderr and the exit code.
func bundleScript(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("../../hack/bundle.sh", args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	require.NoError(t, err)
	return stdout.String(), stderr.String(), 0
}

// envValue reads NAME=value from a bundle.env.
func envValue(t *testing.T, file, name string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+"="); ok {
			return v
		}
	}
	t.Fatalf("%s has no %s", file, name)
	return ""
}

// TestBundleScript: hack/bundle.sh, from fake node and containerd assets
// (no Kubernetes build), writes a staging tree in nodeexec/kubeadm's
// layout and a SHA256SUMS that lists exactly its files, with paths
// relative to it; kubeadm.NewPlan with RequireChecksums accepts those
// checksums for every role, with the skips the bundle's bundle.env names,
// and refuses the first control plane's plan when a step the bundle does
// not carry is left in. A cached bundle is checked and reused, a tampered
// one rebuilt; wrong assets and usage errors are refused.
func TestBundleScript(t *testing.T) {
	for _, tool := range []string{"bash", "sha256sum", "od", "install", "find", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("hack/bundle.sh needs %s: %v", tool, err)
		}
	}
	const version = "v1.36.3"
	nodeFiles := []string{"kubeadm", "kubelet", "kubectl", "etcdctl", "etcdutl", "kube-apiserver", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap"}
	versions := "KUBERNETES_VERSION=" + version + "\nETCD_VERSION=v3.6.8\nETCDCTL_VERSION=v3.6.8\nCNI_VERSION=v1.9.1\n"
	assets := map[string][2]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		node, containerd := filepath.Join(t.TempDir(), "node"), filepath.Join(t.TempDir(), "containerd")
		fakeAssets(t, node, arch, nodeFiles, versions)
		fakeAssets(t, containerd, arch, []string{"containerd", "containerd-shim-runc-v2", "ctr"}, "")
		assets[arch] = [2]string{node, containerd}
	}
	cache := t.TempDir()
	env := func(arch string) []string {
		return []string{"UPGRADEKIT_BUNDLE_CACHE=" + cache, "UPGRADEKIT_BUNDLE_NODE_ASSETS=" + assets[arch][0],
			"UPGRADEKIT_BUNDLE_CONTAINERD_ASSETS=" + assets[arch][1], "BUNDLE_CONTAINERD=", "BUNDLE_CNI="}
	}
	base := []string{"etcd/etcdctl", "kubernetes/kubeadm", "kubernetes/kubectl", "kubernetes/kubelet"}
	for _, tc := range []struct {
		name  string
		arch  string
		args  []string
		dir   string
		files []string
		skips []string
	}{
		{"default", "amd64", []string{version}, version + "_linux-amd64", base, []string{"containerd", "cni-plugins"}},
		{"arm64 with CNI", "arm64", []string{"--cni", version, "arm64"}, version + "_linux-arm64_cni",
			append(slices.Clone(base), "cni-plugins/opt/cni/bin/bridge", "cni-plugins/opt/cni/bin/host-local", "cni-plugins/opt/cni/bin/loopback", "cni-plugins/opt/cni/bin/portmap"),
			[]string{"containerd"}},
		{"everything", "amd64", []string{"--containerd=v2.4.2", "--cni", version, "amd64"}, version + "_linux-amd64_containerd-v2.4.2_cni",
			append(slices.Clone(base), "cni-plugins/opt/cni/bin/bridge", "cni-plugins/opt/cni/bin/host-local", "cni-plugins/opt/cni/bin/loopback", "cni-plugins/opt/cni/bin/portmap",
				"containerd/usr/bin/containerd", "containerd/usr/bin/containerd-shim-runc-v2", "containerd/usr/bin/ctr"),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := bundleScript(t, env(tc.arch), tc.args...)
			require.Equal(t, 0, code, stderr)
			dir := strings.TrimSpace(stdout)
			require.Equal(t, filepath.Join(cache, tc.dir), dir, "stdout is the bundle's directory, and only that")
			staging := filepath.Join(dir, "staging")

			raw, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
			require.NoError(t, err)
			sums, err := kubeadm.ParseChecksums(string(raw))
			require.NoError(t, err)
			require.Equal(t, kubeadm.FormatChecksums(sums), string(raw), "sha256sum's format, sorted")
			var listed, files []string
			for p := range sums {
				listed = append(listed, p)
			}
			require.NoError(t, filepath.WalkDir(staging, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, err := filepath.Rel(staging, p)
				files = append(files, rel)
				info, ierr := d.Info()
				require.NoError(t, ierr)
				require.True(t, info.Mode().IsRegular(), rel)
				require.Equal(t, os.FileMode(0o755), info.Mode().Perm(), rel)
				require.Zero(t, info.ModTime().Unix(), "%s: a fixed time, for a reproducible image layer", rel)
				data, rerr := os.ReadFile(p)
				require.NoError(t, rerr)
				sum := sha256.Sum256(data)
				require.Equal(t, hex.EncodeToString(sum[:]), sums[rel], rel)
				require.Equal(t, fakeELF(tc.arch, "")[:20], data[:20], "%s is the %s asset", rel, tc.arch)
				return err
			}))
			slices.Sort(listed)
			slices.Sort(files)
			require.Equal(t, slices.Sorted(slices.Values(tc.files)), files, "nodeexec/kubeadm's layout")
			require.Equal(t, files, listed, "SHA256SUMS lists exactly the staged files")
			require.Equal(t, strings.Join(tc.skips, ","), envValue(t, filepath.Join(dir, "bundle.env"), "SKIP_STEPS"))
			require.Equal(t, tc.arch, envValue(t, filepath.Join(dir, "bundle.env"), "ARCH"))

			// Every role's plan accepts the checksums with the bundle's
			// skips; without them, the first control plane's plan names
			// the first thing the bundle lacks.
			for _, role := range []kubeadm.Role{kubeadm.RoleFirstControlPlane, kubeadm.RoleControlPlane, kubeadm.RoleWorker} {
				c := kubeadm.Config{Node: "n", Role: role, FromVersion: "v1.35.4", ToVersion: version, Checksums: sums, RequireChecksums: true,
					SkipContainerd: slices.Contains(tc.skips, kubeadm.StepContainerd), SkipCNIPlugins: slices.Contains(tc.skips, kubeadm.StepCNIPlugins)}
				_, err := kubeadm.NewPlan(c)
				require.NoError(t, err, role)
			}
			if len(tc.skips) > 0 {
				_, err := kubeadm.NewPlan(kubeadm.Config{Node: "n", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.35.4", ToVersion: version, Checksums: sums, RequireChecksums: true})
				require.ErrorIs(t, err, kubeadm.ErrInvalidConfig)
				require.ErrorContains(t, err, "no checksum under "+tc.skips[0]+"/")
			}

			// Cached: the same directory, checked, not rebuilt.
			again, stderr, code := bundleScript(t, env(tc.arch), tc.args...)
			require.Equal(t, 0, code, stderr)
			require.Equal(t, stdout, again)
			require.Contains(t, stderr, "bundle: cached: "+dir)
		})
	}

	t.Run("a tampered or extended cache is rebuilt", func(t *testing.T) {
		dir := filepath.Join(cache, version+"_linux-amd64")
		kubeadmFile := filepath.Join(dir, "staging/kubernetes/kubeadm")
		want, err := os.ReadFile(kubeadmFile)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(kubeadmFile, []byte("evil"), 0o755))
		_, stderr, code := bundleScript(t, env("amd64"), version)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, stderr, "cached")
		got, err := os.ReadFile(kubeadmFile)
		require.NoError(t, err)
		require.Equal(t, want, got)

		require.NoError(t, os.WriteFile(filepath.Join(dir, "staging/kubernetes/extra"), []byte("unlisted"), 0o755))
		_, stderr, code = bundleScript(t, env("amd64"), version)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, stderr, "cached")
		require.NoFileExists(t, filepath.Join(dir, "staging/kubernetes/extra"))
	})

	t.Run("reproducible", func(t *testing.T) {
		other := t.TempDir()
		stdout, stderr, code := bundleScript(t, append(env("amd64"), "UPGRADEKIT_BUNDLE_CACHE="+other), version)
		require.Equal(t, 0, code, stderr)
		a, err := os.ReadFile(filepath.Join(strings.TrimSpace(stdout), "SHA256SUMS"))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(cache, version+"_linux-amd64", "SHA256SUMS"))
		require.NoError(t, err)
		require.Equal(t, string(b), string(a))
	})

	t.Run("wrong assets are refused", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			env     []string
			args    []string
			message string
		}{
			{"another architecture", env("amd64"), []string{version, "arm64"}, "kubeadm is amd64, want a linux/arm64 executable"},
			{"another version", env("amd64"), []string{"v1.37.2"}, "versions.env is not for v1.37.2"},
			{"a checksum mismatch", func() []string {
				node := filepath.Join(t.TempDir(), "node")
				fakeAssets(t, node, "amd64", nodeFiles, versions)
				require.NoError(t, os.WriteFile(filepath.Join(node, "kubelet"), fakeELF("amd64", "changed"), 0o755))
				return append(env("amd64"), "UPGRADEKIT_BUNDLE_NODE_ASSETS="+node, "UPGRADEKIT_BUNDLE_CACHE="+t.TempDir())
			}(), []string{version}, "kubelet does not match its SHA256SUMS"},
			{"not assets", append(env("amd64"), "UPGRADEKIT_BUNDLE_NODE_ASSETS="+t.TempDir(), "UPGRADEKIT_BUNDLE_CACHE="+t.TempDir()), []string{version}, "not a hack/node-assets.sh directory"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				stdout, stderr, code := bundleScript(t, tc.env, tc.args...)
				require.Equal(t, 1, code, stderr)
				require.Empty(t, stdout)
				require.Contains(t, stderr, tc.message)
			})
		}
	})

	t.Run("make upgrader-staging fills the image's staging directory", func(t *testing.T) {
		if _, err := exec.LookPath("make"); err != nil {
			t.Skip("no make")
		}
		staging := filepath.Join(t.TempDir(), "staging")
		stale := filepath.Join(staging, "containerd/usr/bin/containerd")
		require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o755))
		require.NoError(t, os.WriteFile(stale, []byte("an earlier bundle's"), 0o755))
		cmd := exec.Command("make", "-s", "-C", "../..", "upgrader-staging", "BUNDLE_VERSION="+version, "BUNDLE_ARCH=arm64", "UPGRADER_STAGING="+staging)
		cmd.Env = append(os.Environ(), env("arm64")...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "KUBERNETES_VERSION="+version+" ARCH=arm64 SKIP_STEPS=containerd,cni-plugins")
		require.NoFileExists(t, stale, "what an earlier bundle staged is gone")
		var files []string
		require.NoError(t, filepath.WalkDir(staging, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(staging, p)
				files = append(files, rel)
			}
			return err
		}))
		require.Equal(t, base, files)
	})

	t.Run("usage", func(t *testing.T) {
		stdout, _, code := bundleScript(t, env("amd64"), "-h")
		require.Equal(t, 0, code)
		require.Contains(t, stdout, "hack/bundle.sh [--containerd VERSION] [--cni] VERSION [ARCH]")
		for _, args := range [][]string{nil, {"1.36.3"}, {version, "riscv64"}, {"--containerd", "v1.7.0", version}, {"--containerd"}, {"--bogus", version}, {version, "amd64", "extra"}} {
			_, stderr, code := bundleScript(t, env("amd64"), args...)
			require.Equal(t, 2, code, "%q: %s", args, stderr)
		}
		_, stderr, code := bundleScript(t, append(env("amd64"), "BUNDLE_CNI=yes"), version)
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "BUNDLE_CNI must be 1, 0 or empty")
	})
}
