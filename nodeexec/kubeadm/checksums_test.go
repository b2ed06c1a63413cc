package kubeadm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBundleChecksumsForReal runs the bundle step's script on this host
// against a staging directory whose kubeadm, when run, creates a marker
// file: with checksums from sha256sum itself the bundle passes (and only
// then runs kubeadm); a kubeadm with another hash, a file of a tree that
// is not listed, or a link in a tree fail before anything staged runs, and
// the marker never appears. Without checksums the step says it verifies
// nothing. It failed before the fix: the step ran the staged kubeadm first
// and had no checksums at all.
func TestBundleChecksumsForReal(t *testing.T) {
	const version = "v1.32.1"
	stage := func(t *testing.T) (dir, marker string) {
		dir = t.TempDir()
		marker = filepath.Join(t.TempDir(), "kubeadm-ran")
		k := filepath.Join(dir, "kubernetes")
		require.NoError(t, os.MkdirAll(k, 0o755))
		for name, body := range map[string]string{
			"kubeadm": "touch '" + marker + "'\nprintf '%s\\n' '" + version + "'",
			"kubelet": "printf '%s\\n' 'Kubernetes " + version + "'",
			"kubectl": "printf '%s\\n' 'Client Version: " + version + "'",
		} {
			require.NoError(t, os.WriteFile(filepath.Join(k, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755))
		}
		for _, f := range []string{"containerd/usr/local/bin/containerd", "containerd/etc/containerd/config.toml", "cni-plugins/opt/cni/bin/loopback"} {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(f), 0o755))
		}
		return dir, marker
	}
	// sums is what sha256sum writes for the staged files, as a bundle
	// builder (hack/node-assets.sh) writes SHA256SUMS.
	sums := func(t *testing.T, dir string) map[string]string {
		cmd := exec.Command("sh", "-c", "find kubernetes containerd cni-plugins -type f | sort | xargs sha256sum")
		cmd.Dir = dir
		out, err := cmd.Output()
		require.NoError(t, err)
		m, err := ParseChecksums(string(out))
		require.NoError(t, err)
		require.Len(t, m, 6)
		return m
	}
	run := func(t *testing.T, dir string, sums map[string]string) (int, string) {
		p, err := NewPlan(Config{Node: "w-1", Role: RoleWorker, FromVersion: "v1.31.4", ToVersion: version, StagingDir: dir, Checksums: sums})
		require.NoError(t, err)
		require.Equal(t, StepBundle, p.Steps[0].Name, "the first step")
		st := p.Steps[0]
		cmd := exec.Command(st.Argv[0], st.Argv[1:]...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		for _, e := range st.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *testing.T, dir string, sums map[string]string)
		code   int
		out    string
		marker bool
	}{
		{name: "the bundle the checksums describe", code: 0, out: "bundle: staged files match their checksums", marker: true},
		{name: "a kubeadm with another hash", code: 1, out: "staged files do not match their checksums",
			edit: func(t *testing.T, dir string, _ map[string]string) {
				f := filepath.Join(dir, "kubernetes", "kubeadm")
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(f, append(b, []byte("# tampered\n")...), 0o755))
			}},
		{name: "a wrong checksum for kubeadm", code: 1, out: "kubernetes/kubeadm: FAILED",
			edit: func(_ *testing.T, _ string, sums map[string]string) {
				sums[StagedKubeadm] = strings.Repeat("0", 64)
			}},
		{name: "a file of a tree that is not listed", code: 1, out: "staged containerd/etc/systemd/system/evil.service has no checksum",
			edit: func(t *testing.T, dir string, _ map[string]string) {
				f := filepath.Join(dir, "containerd", "etc", "systemd", "system", "evil.service")
				require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
				require.NoError(t, os.WriteFile(f, []byte("[Service]\nExecStart=/bin/true\n"), 0o644))
			}},
		{name: "a link in a tree", code: 1, out: "staged cni-plugins/opt/cni/bin/portmap is not a regular file or directory",
			edit: func(t *testing.T, dir string, _ map[string]string) {
				require.NoError(t, os.Symlink("/bin/sh", filepath.Join(dir, "cni-plugins", "opt", "cni", "bin", "portmap")))
			}},
		{name: "a listed file missing", code: 1, out: "staged files do not match their checksums",
			edit: func(_ *testing.T, _ string, sums map[string]string) {
				sums["containerd/usr/local/bin/ctr"] = strings.Repeat("a", 64)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, marker := stage(t)
			s := sums(t, dir)
			if tc.edit != nil {
				tc.edit(t, dir, s)
			}
			code, out := run(t, dir, s)
			require.Equal(t, tc.code, code, out)
			require.Contains(t, out, tc.out)
			_, err := os.Stat(marker)
			require.Equal(t, tc.marker, err == nil, "the staged kubeadm ran: %v (output %s)", err == nil, out)
		})
	}
	t.Run("no checksums: the step says it verifies nothing", func(t *testing.T) {
		dir, _ := stage(t)
		code, out := run(t, dir, nil)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "no checksums given: nothing staged is verified")
	})
}

// TestChecksumsRefused: malformed checksums, and checksums that leave a
// staged binary or tree of the plan uncovered, are refused by NewPlan with
// ErrInvalidConfig naming the entry; RequireChecksums refuses none.
func TestChecksumsRefused(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	good := func() map[string]string {
		return map[string]string{StagedKubeadm: sum, StagedKubelet: sum, StagedKubectl: sum, StagedEtcdctl: sum,
			"containerd/usr/local/bin/containerd": sum, "cni-plugins/opt/cni/bin/loopback": sum}
	}
	cfg := Config{Node: "cp-1", Role: RoleFirstControlPlane, FromVersion: "v1.31.4", ToVersion: "v1.32.1"}
	c := cfg
	c.Checksums = good()
	_, err := NewPlan(c)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		edit  func(c *Config)
		field string
	}{
		{"uppercase hex", func(c *Config) { c.Checksums[StagedKubeadm] = strings.ToUpper(sum) }, "checksums[kubernetes/kubeadm]"},
		{"short hex", func(c *Config) { c.Checksums[StagedKubeadm] = "abc" }, "checksums[kubernetes/kubeadm]"},
		{"a path out of staging", func(c *Config) { c.Checksums["../etc/passwd"] = sum }, "checksums[../etc/passwd]"},
		{"an absolute path", func(c *Config) { c.Checksums["/usr/bin/kubeadm"] = sum }, "checksums[/usr/bin/kubeadm]"},
		{"an unclean path", func(c *Config) { c.Checksums["kubernetes//kubelet"] = sum }, "checksums[kubernetes//kubelet]"},
		{"a newline in a path", func(c *Config) { c.Checksums["a\nb"] = sum }, "checksums[a\nb]"},
		{"no kubelet", func(c *Config) { delete(c.Checksums, StagedKubelet) }, "checksums"},
		{"no etcdctl on the first control plane", func(c *Config) { delete(c.Checksums, StagedEtcdctl) }, "checksums"},
		{"nothing of the containerd tree", func(c *Config) { delete(c.Checksums, "containerd/usr/local/bin/containerd") }, "checksums"},
		{"none, required", func(c *Config) { c.Checksums, c.RequireChecksums = nil, true }, "checksums"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Checksums = good()
			tc.edit(&c)
			_, err := NewPlan(c)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), "kubeadm: "+tc.field+": ")
		})
	}
	// What the plan does not use need not be covered.
	c = cfg
	c.Checksums = good()
	delete(c.Checksums, StagedEtcdctl)
	delete(c.Checksums, "containerd/usr/local/bin/containerd")
	c.SkipEtcdSnapshot, c.SkipContainerd = true, true
	_, err = NewPlan(c)
	require.NoError(t, err)
}

func TestParseChecksums(t *testing.T) {
	sum := strings.Repeat("0f", 32)
	got, err := ParseChecksums(sum + "  kubernetes/kubeadm\n" + sum + " *./etcd/etcdctl\r\n\n")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"kubernetes/kubeadm": sum, "etcd/etcdctl": sum}, got)
	require.Equal(t, sum+"  etcd/etcdctl\n"+sum+"  kubernetes/kubeadm\n", FormatChecksums(got))
	for _, bad := range []string{"nonsense", sum + " kubernetes/kubeadm", sum + "  a\n" + sum + "  a", sum + "  ../x"} {
		_, err := ParseChecksums(bad)
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
	}
}

// TestStagedNeeds: what each role's plan needs staged, by step, and what
// a bundle's checksums leave out; the first control plane's plan needs
// the most.
func TestStagedNeeds(t *testing.T) {
	paths := func(needs []StagedNeed) []string {
		var out []string
		for _, n := range needs {
			out = append(out, n.Step+":"+n.Path)
		}
		return out
	}
	base := []string{"bundle:kubernetes/kubeadm", "bundle:kubernetes/kubelet", "bundle:kubernetes/kubectl"}
	require.Equal(t, append(base, "etcd-snapshot:etcd/etcdctl", "containerd:containerd", "cni-plugins:cni-plugins"),
		paths(StagedNeeds(Config{Role: RoleFirstControlPlane})))
	require.Equal(t, append(base, "containerd:containerd", "cni-plugins:cni-plugins"),
		paths(StagedNeeds(Config{Role: RoleControlPlane})))
	require.Equal(t, base, paths(StagedNeeds(Config{Role: RoleFirstControlPlane, SkipEtcdSnapshot: true, SkipContainerd: true, SkipCNIPlugins: true})))

	sum := strings.Repeat("a", 64)
	sums := map[string]string{StagedKubeadm: sum, StagedKubectl: sum, "containerd/usr/bin/containerd": sum, "cni-plugins": sum}
	require.Equal(t, []string{"bundle:kubernetes/kubelet", "etcd-snapshot:etcd/etcdctl", "cni-plugins:cni-plugins"},
		paths(MissingFrom(StagedNeeds(Config{Role: RoleFirstControlPlane}), sums)),
		"a file named like a tree is not the tree")
	require.Empty(t, MissingFrom(nil, nil))
}
