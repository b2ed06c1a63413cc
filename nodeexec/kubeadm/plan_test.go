package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
)

func TestCheckUpgrade(t *testing.T) {
	tests := []struct {
		from, to string
		want     error
	}{
		{"v1.30.4", "v1.31.0", nil},
		{"v1.31.0", "v1.31.2", nil},
		{"v1.31.2", "v1.31.2", nil},
		{"1.31.2", "v1.31.2", ErrInvalidVersion},
		{"v1.31.1", " v1.31.2", ErrInvalidVersion},
		{"v1.31.1", "v1.31.2 ", ErrInvalidVersion},
		{"v1.31.1", "V1.31.2", ErrInvalidVersion},
		{"v1.31.1", "v1.31.2+build.5", ErrInvalidVersion},
		{"v1.31.1-eks-1", "v1.31.2-rc.1+meta", ErrInvalidVersion},
		{"v1.31.2-eks-1-31-5", "v1.32.0-eks-1-32-1", nil},
		{"v1.31.2", "v1.31.1", ErrDowngrade},
		{"v1.32.0", "v1.31.9", ErrDowngrade},
		{"v1.30.1", "v1.32.0", ErrSkippedMinor},
		{"v1.29.0", "v1.33.0", ErrSkippedMinor},
		{"v1.31.0", "v2.0.0", ErrMajorChange},
		{"latest", "v1.31.0", ErrInvalidVersion},
		{"v1.31.0", "", ErrInvalidVersion},
		{"v1.31", "v1.32.0", ErrInvalidVersion},
	}
	for _, tt := range tests {
		t.Run(tt.from+"->"+tt.to, func(t *testing.T) {
			err := CheckUpgrade(tt.from, tt.to)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			var ve *VersionError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tt.from, ve.From)
			require.Equal(t, tt.to, ve.To)
		})
	}
}

func names(p nodeexec.Plan) []string {
	var n []string
	for _, s := range p.Steps {
		n = append(n, s.Name)
	}
	return n
}

func step(t *testing.T, p nodeexec.Plan, name string) nodeexec.Step {
	t.Helper()
	for _, s := range p.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("plan has no step %q: %v", name, names(p))
	return nodeexec.Step{}
}

func TestNewPlanPerRoleAndVersion(t *testing.T) {
	tail := []string{StepKubectlBinary, StepKubelet, StepVerify}
	common := []string{StepContainerd, StepCNIPlugins, StepKubeadmBinary}
	tests := []struct {
		name       string
		role       Role
		from, to   string
		ignore     []string
		wantSteps  []string
		wantArgv   []string
		wantConfig string
	}{
		{
			name: "first control plane 1.29 (flags, no UpgradeConfiguration)", role: RoleFirstControlPlane, from: "v1.28.9", to: "v1.29.4",
			wantSteps: append(append([]string{StepEtcdSnapshot}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  []string{"/usr/bin/kubeadm", "upgrade", "apply", "v1.29.4", "--yes", "--ignore-preflight-errors=CoreDNSUnsupportedPlugins,CoreDNSMigration"},
		},
		{
			// kubeadm 1.30: v1beta4 is experimental and 1.30.2 rejects --yes
			// next to --config (kubespray#11350), so flags as before.
			name: "first control plane 1.30 (flags, no UpgradeConfiguration)", role: RoleFirstControlPlane, from: "v1.29.4", to: "v1.30.2",
			wantSteps: append(append([]string{StepEtcdSnapshot}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  []string{"/usr/bin/kubeadm", "upgrade", "apply", "v1.30.2", "--yes", "--ignore-preflight-errors=CoreDNSUnsupportedPlugins,CoreDNSMigration"},
		},
		{
			name: "first control plane 1.31 (UpgradeConfiguration, CoreDNS preflight ignored)", role: RoleFirstControlPlane, from: "v1.30.4", to: "v1.31.2",
			wantSteps:  append(append([]string{StepEtcdSnapshot}, common...), append([]string{StepKubeadmConfig, StepKubeadmUpgrade}, tail...)...),
			wantArgv:   []string{"/usr/bin/kubeadm", "upgrade", "apply", "--config", "/var/lib/upgradekit/staging/kubeadm-upgrade-config.yaml", "--yes"},
			wantConfig: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n  kubernetesVersion: \"v1.31.2\"\n  etcdUpgrade: true\n  certificateRenewal: true\n  ignorePreflightErrors:\n  - CoreDNSUnsupportedPlugins\n  - CoreDNSMigration\n",
		},
		{
			name: "first control plane 1.32 (CoreDNS phase skipped)", role: RoleFirstControlPlane, from: "v1.31.4", to: "v1.32.1",
			wantSteps:  append(append([]string{StepEtcdSnapshot}, common...), append([]string{StepKubeadmConfig, StepKubeadmUpgrade}, tail...)...),
			wantArgv:   []string{"/usr/bin/kubeadm", "upgrade", "apply", "--config", "/var/lib/upgradekit/staging/kubeadm-upgrade-config.yaml", "--yes"},
			wantConfig: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n  kubernetesVersion: \"v1.32.1\"\n  etcdUpgrade: true\n  certificateRenewal: true\n  skipPhases:\n  - addon/coredns\n  ignorePreflightErrors:\n  - CoreDNSUnsupportedPlugins\n  - CoreDNSMigration\n",
		},
		{
			name: "other control plane 1.31", role: RoleControlPlane, from: "v1.30.4", to: "v1.31.0",
			wantSteps: append(append([]string{}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  []string{"/usr/bin/kubeadm", "upgrade", "node", "--ignore-preflight-errors=CoreDNSUnsupportedPlugins,CoreDNSMigration"},
		},
		{
			name: "other control plane 1.33", role: RoleControlPlane, from: "v1.32.4", to: "v1.33.0",
			wantSteps: append(append([]string{}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  []string{"/usr/bin/kubeadm", "upgrade", "node", "--skip-phases=addon/coredns"},
		},
		{
			name: "worker", role: RoleWorker, from: "v1.32.4", to: "v1.33.0",
			wantSteps: append(append([]string{}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  []string{"/usr/bin/kubeadm", "upgrade", "node"},
		},
	}
	// Every adjacent minor pair Cluster API v1.14 supports and the next
	// (v1.37), per role, on a cgroup v1 host: kubeadm >= v1.35 fails
	// SystemVerification there, in `upgrade apply` and `upgrade node`
	// alike, so the plan carries it (as a real v1.36 -> v1.37 node needed).
	for minor := 32; minor <= 37; minor++ {
		from, to := fmt.Sprintf("v1.%d.3", minor-1), fmt.Sprintf("v1.%d.2", minor)
		var ignore []string
		var flag []string
		if minor >= 35 {
			ignore, flag = []string{"SystemVerification"}, []string{"--ignore-preflight-errors=SystemVerification"}
		}
		cfg := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n  kubernetesVersion: \"" + to + "\"\n  etcdUpgrade: true\n  certificateRenewal: true\n  skipPhases:\n  - addon/coredns\n  ignorePreflightErrors:\n  - CoreDNSUnsupportedPlugins\n  - CoreDNSMigration\n"
		for _, n := range ignore {
			cfg += "  - " + n + "\n"
		}
		tests = append(tests, []struct {
			name       string
			role       Role
			from, to   string
			ignore     []string
			wantSteps  []string
			wantArgv   []string
			wantConfig string
		}{{
			name: "first control plane " + from + " to " + to, role: RoleFirstControlPlane, from: from, to: to, ignore: ignore,
			wantSteps:  append(append([]string{StepEtcdSnapshot}, common...), append([]string{StepKubeadmConfig, StepKubeadmUpgrade}, tail...)...),
			wantArgv:   []string{"/usr/bin/kubeadm", "upgrade", "apply", "--config", "/var/lib/upgradekit/staging/kubeadm-upgrade-config.yaml", "--yes"},
			wantConfig: cfg,
		}, {
			name: "other control plane " + from + " to " + to, role: RoleControlPlane, from: from, to: to, ignore: ignore,
			wantSteps: append(append([]string{}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  append([]string{"/usr/bin/kubeadm", "upgrade", "node", "--skip-phases=addon/coredns"}, flag...),
		}, {
			name: "worker " + from + " to " + to, role: RoleWorker, from: from, to: to, ignore: ignore,
			wantSteps: append(append([]string{}, common...), append([]string{StepKubeadmUpgrade}, tail...)...),
			wantArgv:  append([]string{"/usr/bin/kubeadm", "upgrade", "node"}, flag...),
		}}...)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlan(Config{Node: "node-1.example", Role: tt.role, FromVersion: tt.from, ToVersion: tt.to, IgnorePreflightErrors: tt.ignore})
			require.NoError(t, err)
			require.NoError(t, p.Validate())
			require.Equal(t, append([]string{StepBundle}, tt.wantSteps...), names(p), "the bundle is checked first, before anything changes")
			require.Equal(t, tt.wantArgv, step(t, p, StepKubeadmUpgrade).Argv)
			require.Equal(t, string(tt.role), p.Role)
			require.Equal(t, tt.to, p.ToVersion)
			require.True(t, strings.HasPrefix(p.Name, "kubeadm-"))
			if tt.wantConfig != "" {
				s := step(t, p, StepKubeadmConfig)
				require.Equal(t, []nodeexec.EnvVar{{Name: "UPGRADEKIT_FILE_CONTENT", Value: tt.wantConfig}}, s.Env)
			}
			// Every step's binaries come from the staging dir or the host;
			// nothing is fetched from the network.
			for _, s := range p.Steps {
				joined := strings.Join(s.Argv, " ")
				require.NotContains(t, joined, "curl")
				require.NotContains(t, joined, "wget")
				require.NotContains(t, joined, "http://")
			}
			// The version and node reach the verify script as arguments.
			v := step(t, p, StepVerify)
			require.Equal(t, []string{tt.to, "node-1.example", string(tt.role)}, v.Argv[len(v.Argv)-3:])
		})
	}
}

func TestNewPlanOptionsAndBackups(t *testing.T) {
	p, err := NewPlan(Config{
		PlanName: "cp-0", Node: "cp-0", Role: RoleFirstControlPlane, FromVersion: "v1.31.0", ToVersion: "v1.32.0",
		SkipContainerd: true, SkipCNIPlugins: true, SkipEtcdSnapshot: true, RollbackOnFailure: true,
		StagingDir: "/opt/stage", BinDir: "/usr/local/bin",
	})
	require.NoError(t, err)
	require.Equal(t, []string{StepBundle, StepKubeadmBinary, StepKubeadmConfig, StepKubeadmUpgrade, StepKubectlBinary, StepKubelet, StepVerify}, names(p))
	require.Equal(t, []string{"/opt/stage/kubernetes", "v1.32.0"}, step(t, p, StepBundle).Argv[4:], "only the staged paths the plan installs from are required")
	require.True(t, p.RollbackOnFailure)
	kb := step(t, p, StepKubelet)
	require.Empty(t, kb.Check, "a binary in place is not proof that it runs: the step always restarts")
	require.Equal(t, []string{"/opt/stage/kubernetes/kubelet", "/usr/local/bin/kubelet", "/var/lib/upgradekit/backup/cp-0/bin/kubelet", "kubelet"}, kb.Argv[len(kb.Argv)-4:])
	require.Equal(t, []string{"/usr/local/bin/kubelet", "/var/lib/upgradekit/backup/cp-0/bin/kubelet"}, kb.Backup[len(kb.Backup)-2:])
	require.Equal(t, []string{"/var/lib/upgradekit/backup/cp-0/bin/kubelet", "/usr/local/bin/kubelet", "/var/lib/upgradekit/backup/cp-0/bin/kubelet", "kubelet"}, kb.Rollback[len(kb.Rollback)-4:])
	require.Empty(t, step(t, p, StepKubeadmUpgrade).Rollback, "kubeadm upgrade apply is not rolled back automatically")
	require.NotEmpty(t, step(t, p, StepKubeadmUpgrade).Backup)
}

func TestNewPlanRejects(t *testing.T) {
	base := Config{Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.32.0"}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   error
	}{
		{"skipped minor", func(c *Config) { c.ToVersion = "v1.33.0" }, ErrSkippedMinor},
		{"downgrade", func(c *Config) { c.ToVersion = "v1.30.9" }, ErrDowngrade},
		{"unknown role", func(c *Config) { c.Role = "etcd" }, ErrInvalidConfig},
		{"bad node", func(c *Config) { c.Node = "Bad Node" }, ErrInvalidConfig},
		{"relative staging", func(c *Config) { c.StagingDir = "staging" }, ErrInvalidConfig},
		{"staging at root", func(c *Config) { c.StagingDir = "/" }, ErrInvalidConfig},
		{"backup at root", func(c *Config) { c.BackupDir = "//." }, ErrInvalidConfig},
		{"shell characters in version", func(c *Config) { c.FromVersion, c.ToVersion = "v1.32.0", "v1.32.0+a;b" }, ErrInvalidVersion},
		{"bad plan name", func(c *Config) { c.PlanName = "Not_A_Label" }, nodeexec.ErrInvalidPlan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mutate(&c)
			_, err := NewPlan(c)
			require.ErrorIs(t, err, tt.want)
			if tt.want == nodeexec.ErrInvalidPlan {
				var verr *nodeexec.ValidationError
				require.ErrorAs(t, err, &verr)
				require.Equal(t, "name", verr.Field)
			}
		})
	}
}

// TestScriptsParse runs every shell script of every plan through sh -n.
func TestScriptsParse(t *testing.T) {
	for _, role := range []Role{RoleFirstControlPlane, RoleControlPlane, RoleWorker} {
		p, err := NewPlan(Config{Node: "n1", Role: role, FromVersion: "v1.31.0", ToVersion: "v1.32.0"})
		require.NoError(t, err)
		for _, s := range p.Steps {
			for _, argv := range [][]string{s.Argv, s.Check, s.Backup, s.Rollback} {
				if len(argv) < 3 || argv[0] != "/bin/sh" {
					continue
				}
				out, err := exec.Command("/bin/sh", "-n", "-c", argv[2]).CombinedOutput()
				require.NoError(t, err, "%s: %s", s.Name, out)
			}
		}
	}
}

// fakeSystemd puts a systemctl on PATH that records its calls and runs
// a unit only while its binary (unitBinary) is not "broken": the scripts
// then run for real on this machine, restarts included, without systemd.
// It does not model unit dependencies, timing or anything but the
// daemon-reload, restart and is-active verbs the scripts use.
type fakeSystemd struct {
	exec  nodeexec.OSExecutor
	log   string
	state string
}

func newFakeSystemd(t *testing.T, unitBinary string) *fakeSystemd {
	t.Helper()
	dir := t.TempDir()
	f := &fakeSystemd{log: filepath.Join(dir, "calls"), state: filepath.Join(dir, "state")}
	stub := `#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMD_LOG"
case "$1" in
daemon-reload) exit 0 ;;
restart)
  if grep -q broken "$FAKE_SYSTEMD_BINARY"; then echo failed > "$FAKE_SYSTEMD_STATE"; exit 1; fi
  echo active > "$FAKE_SYSTEMD_STATE"; exit 0 ;;
is-active) [ "$(cat "$FAKE_SYSTEMD_STATE" 2>/dev/null)" = active ] ;;
*) exit 2 ;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "systemctl"), []byte(stub), 0o755))
	require.NoError(t, os.WriteFile(f.state, []byte("active\n"), 0o644))
	f.exec = nodeexec.OSExecutor{BaseEnv: []string{"PATH=" + dir + ":" + nodeexec.DefaultPath,
		"FAKE_SYSTEMD_LOG=" + f.log, "FAKE_SYSTEMD_STATE=" + f.state, "FAKE_SYSTEMD_BINARY=" + unitBinary}}
	return f
}

// run runs argv and returns its exit code and output.
func (f *fakeSystemd) run(t *testing.T, argv []string) (int, string) {
	t.Helper()
	res, err := f.exec.Run(context.Background(), nodeexec.Command{Argv: argv})
	require.NoError(t, err)
	return res.ExitCode, string(res.Output)
}

func (f *fakeSystemd) active(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile(f.state)
	require.NoError(t, err)
	return strings.TrimSpace(string(b)) == "active"
}

func (f *fakeSystemd) calls(t *testing.T) []string {
	t.Helper()
	b, _ := os.ReadFile(f.log)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestTreeInstallBackupRestoreForReal runs the containerd step's backup,
// install-and-restart and rollback scripts on this machine. The staging
// tree mirrors a temporary directory, so "copy onto /" lands there.
func TestTreeInstallBackupRestoreForReal(t *testing.T) {
	for _, tc := range []struct {
		name, newBinary string
		exit            int
		want            string
		restarts        int
	}{
		{"a good containerd", "new containerd", 0, "new containerd", 1},
		// A containerd that does not start is put back before the step
		// fails: the step never ends with containerd down, since without
		// it no next container starts.
		{"a broken containerd", "new containerd, broken", 1, "old containerd", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostDir := t.TempDir() // stands in for /usr/local/bin on the host
			stage, backup := t.TempDir(), t.TempDir()
			rel := strings.TrimPrefix(hostDir, "/")
			tree := filepath.Join(stage, "containerd", rel)
			require.NoError(t, os.MkdirAll(tree, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(tree, "containerd"), []byte(tc.newBinary), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(tree, "ctr"), []byte("new ctr"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(hostDir, "containerd"), []byte("old containerd"), 0o755))
			// ctr does not exist yet on the "host": a restore must remove it.
			sd := newFakeSystemd(t, filepath.Join(hostDir, "containerd"))

			p, err := NewPlan(Config{PlanName: "tree", Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.31.1",
				StagingDir: stage, BackupDir: backup, SkipCNIPlugins: true})
			require.NoError(t, err)
			s := step(t, p, StepContainerd)
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(hostDir, name))
				if err != nil {
					return "<missing>"
				}
				return string(b)
			}
			code, out := sd.run(t, s.Backup)
			require.Equal(t, 0, code, out)
			code, out = sd.run(t, s.Argv)
			require.Equal(t, tc.exit, code, out)
			require.Equal(t, tc.want, read("containerd"))
			require.True(t, sd.active(t), "containerd runs when the step ends, whatever happened: %v", sd.calls(t))
			require.Equal(t, tc.restarts, strings.Count(strings.Join(sd.calls(t), "\n"), "restart containerd"))
			if tc.exit != 0 {
				require.Equal(t, "<missing>", read("ctr"), "the restore removes what the install added")
				return
			}
			require.Equal(t, "new ctr", read("ctr"))
			code, out = sd.run(t, s.Rollback)
			require.Equal(t, 0, code, out)
			require.Equal(t, "old containerd", read("containerd"))
			require.Equal(t, "<missing>", read("ctr"))
			require.True(t, sd.active(t))
		})
	}
}

// containerdStandIn is a shell script that answers like containerd
// `--version` does with version, and `--config F config migrate` by
// printing a version 3 configuration that names F (or failing, with
// migrateFails). With broken in it, the fake systemctl fails to start it.
func containerdStandIn(version string, migrateFails, broken bool) string {
	s := "#!/bin/sh\n"
	if broken {
		s += "# broken\n"
	}
	s += `case "$*" in
--version) echo "containerd github.com/containerd/containerd` + map[bool]string{true: "/v2", false: ""}[strings.HasPrefix(version, "v2")] + ` ` + version + ` abc" ;;
*"config migrate"*)`
	if migrateFails {
		s += ` echo "containerd: cannot migrate" >&2; exit 1 ;;`
	} else {
		s += ` printf 'version = 3\n# migrated from %s\n' "$2" ;;`
	}
	return s + "\nesac\n"
}

// TestContainerdConfigMigrationForReal runs the containerd step's scripts
// on this machine with a containerd stand-in: containerd's configuration
// is migrated exactly when a containerd 2.x (or newer) is installed over a
// file older than version 3 that the tree does not carry; it is put back
// with the old containerd when the new one does not start, when the
// migration fails, and by the rollback (containerd 1.x cannot read the
// new format).
func TestContainerdConfigMigrationForReal(t *testing.T) {
	const v2conf = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n"
	old := containerdStandIn("1.6.20~ds1", false, false)
	for _, tc := range []struct {
		name       string
		newBinary  string
		conf       string // "" = no configuration file on the host
		treeConf   string // a configuration the tree carries
		exit       int
		wantBinary string
		migrated   bool
	}{
		{name: "containerd 2.x over a version 2 file", newBinary: containerdStandIn("v2.4.2", false, false), conf: v2conf, migrated: true},
		{name: "containerd 2.x over a file without a version (version 1)", newBinary: containerdStandIn("v2.4.2", false, false), conf: "root = \"/var/lib/containerd\"\n", migrated: true},
		{name: "containerd 2.x over a version 3 file", newBinary: containerdStandIn("v2.4.2", false, false), conf: "version = 3\n"},
		{name: "containerd 1.7 over a version 2 file", newBinary: containerdStandIn("1.7.28", false, false), conf: v2conf},
		{name: "containerd 2.x without a configuration file", newBinary: containerdStandIn("v2.4.2", false, false)},
		{name: "the tree carries the configuration", newBinary: containerdStandIn("v2.4.2", false, false), conf: v2conf, treeConf: "version = 3\n# from the bundle\n"},
		{name: "containerd 2.x that does not start", newBinary: containerdStandIn("v2.4.2", false, true), conf: v2conf, exit: 1, wantBinary: old},
		{name: "containerd 2.x that cannot migrate", newBinary: containerdStandIn("v2.4.2", true, false), conf: v2conf, exit: 1, wantBinary: old},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Stand-ins for /usr/bin (the script looks for .../bin/containerd
			// in the tree) and /etc/containerd.
			hostBin, hostEtc := filepath.Join(t.TempDir(), "bin"), t.TempDir()
			require.NoError(t, os.Mkdir(hostBin, 0o755))
			stage, backup := t.TempDir(), t.TempDir()
			binTree := filepath.Join(stage, "containerd", hostBin)
			require.NoError(t, os.MkdirAll(binTree, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(binTree, "containerd"), []byte(tc.newBinary), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(hostBin, "containerd"), []byte(old), 0o755))
			conf := filepath.Join(hostEtc, "config.toml")
			if tc.conf != "" {
				require.NoError(t, os.WriteFile(conf, []byte(tc.conf), 0o600))
			}
			if tc.treeConf != "" {
				etcTree := filepath.Join(stage, "containerd", hostEtc)
				require.NoError(t, os.MkdirAll(etcTree, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(etcTree, "config.toml"), []byte(tc.treeConf), 0o644))
			}
			sd := newFakeSystemd(t, filepath.Join(hostBin, "containerd"))
			p, err := NewPlan(Config{PlanName: "ctrd", Node: "n1", Role: RoleWorker, FromVersion: "v1.36.3", ToVersion: "v1.37.2",
				StagingDir: stage, BackupDir: backup, SkipCNIPlugins: true, ContainerdConfig: conf})
			require.NoError(t, err)
			s := step(t, p, StepContainerd)
			read := func(p string) string {
				b, err := os.ReadFile(p)
				if err != nil {
					return "<missing>"
				}
				return string(b)
			}

			code, out := sd.run(t, s.Backup)
			require.Equal(t, 0, code, out)
			code, out = sd.run(t, s.Argv)
			require.Equal(t, tc.exit, code, out)
			require.True(t, sd.active(t), "containerd runs when the step ends: %v", sd.calls(t))
			want := map[bool]string{true: tc.wantBinary, false: tc.newBinary}[tc.wantBinary != ""]
			require.Equal(t, want, read(filepath.Join(hostBin, "containerd")))
			switch {
			case tc.conf == "":
				require.Equal(t, "<missing>", read(conf))
			case tc.exit != 0:
				require.Equal(t, tc.conf, read(conf), "the old containerd gets its own configuration back")
				return
			case tc.treeConf != "":
				require.Equal(t, tc.treeConf, read(conf), "a configuration the bundle carries is installed as it is")
			case tc.migrated:
				require.Equal(t, "version = 3\n# migrated from "+conf+"\n", read(conf))
				require.Contains(t, out, "migrated "+conf)
				info, err := os.Stat(conf)
				require.NoError(t, err)
				require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the file keeps its mode")
			default:
				require.Equal(t, tc.conf, read(conf), "nothing to migrate")
			}
			_, err = os.Stat(conf + ".upgradekit-new")
			require.True(t, os.IsNotExist(err), "no temporary file is left")

			// A second run (an interrupted step run again) migrates nothing twice.
			code, out = sd.run(t, s.Argv)
			require.Equal(t, 0, code, out)
			require.NotContains(t, out, "migrated")

			code, out = sd.run(t, s.Rollback)
			require.Equal(t, 0, code, out)
			require.Equal(t, old, read(filepath.Join(hostBin, "containerd")))
			if tc.conf != "" {
				require.Equal(t, tc.conf, read(conf), "the rollback puts the old configuration back")
			}
			require.True(t, sd.active(t))
		})
	}
}

// TestKubeletStepForReal runs the kubelet step's scripts on this machine
// with a fake systemctl: the kubelet is replaced and restarted in one
// step, is never left stopped, and a kubelet that does not start is put
// back and restarted before the step fails.
func TestKubeletStepForReal(t *testing.T) {
	for _, tc := range []struct {
		name, newBinary string
		exit            int
		want            string
	}{
		{"a good kubelet", "kubelet v1.31.1", 0, "kubelet v1.31.1"},
		{"a broken kubelet", "kubelet v1.31.1 broken", 1, "kubelet v1.31.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stage, backup, bin := t.TempDir(), t.TempDir(), t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(stage, "kubernetes"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(stage, "kubernetes", "kubelet"), []byte(tc.newBinary), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(bin, "kubelet"), []byte("kubelet v1.31.0"), 0o755))
			sd := newFakeSystemd(t, filepath.Join(bin, "kubelet"))
			p, err := NewPlan(Config{PlanName: "kubelet", Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.31.1",
				StagingDir: stage, BackupDir: backup, BinDir: bin})
			require.NoError(t, err)
			s := step(t, p, StepKubelet)
			code, out := sd.run(t, s.Backup)
			require.Equal(t, 0, code, out)
			code, out = sd.run(t, s.Argv)
			require.Equal(t, tc.exit, code, out)
			got, err := os.ReadFile(filepath.Join(bin, "kubelet"))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			info, err := os.Stat(filepath.Join(bin, "kubelet"))
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
			require.True(t, sd.active(t), "the kubelet runs when the step ends: %v", sd.calls(t))
			require.NotContains(t, sd.calls(t), "stop kubelet", "never stopped on its own")
			if tc.exit != 0 {
				return
			}
			code, out = sd.run(t, s.Rollback)
			require.Equal(t, 0, code, out)
			got, err = os.ReadFile(filepath.Join(bin, "kubelet"))
			require.NoError(t, err)
			require.Equal(t, "kubelet v1.31.0", string(got))
			require.True(t, sd.active(t))
		})
	}
}

// TestNoStepEndsWithAUnitStopped: in the init-container layout only a
// running kubelet starts the next container, so no step of any plan may
// stop the kubelet or containerd (it may only restart them, checking they
// came up). fake's TestKubeadmPlansCompleteInPods proves the same by
// running every plan under a simulated kubelet.
func TestNoStepEndsWithAUnitStopped(t *testing.T) {
	stopVerbs := []string{"systemctl stop", "systemctl kill", "systemctl disable --now", "systemctl mask --now", "pkill", "killall"}
	for _, role := range []Role{RoleFirstControlPlane, RoleControlPlane, RoleWorker} {
		for _, v := range [][2]string{{"v1.29.4", "v1.30.2"}, {"v1.30.4", "v1.31.2"}, {"v1.31.4", "v1.32.1"}} {
			for _, skip := range []bool{false, true} {
				p, err := NewPlan(Config{Node: "n1", Role: role, FromVersion: v[0], ToVersion: v[1], SkipContainerd: skip, SkipCNIPlugins: skip})
				require.NoError(t, err)
				for _, s := range p.Steps {
					for _, argv := range [][]string{s.Argv, s.Check, s.Backup, s.Rollback} {
						joined := strings.Join(argv, " ")
						for _, unit := range []string{"kubelet", "containerd"} {
							for _, verb := range stopVerbs {
								stops := strings.Contains(joined, verb) && strings.Contains(joined, unit)
								require.False(t, stops, "%s %s: step %s stops %s (%s)", role, v[1], s.Name, unit, verb)
							}
							if strings.Contains(joined, "systemctl restart") && slices.Contains(argv, unit) {
								require.Contains(t, joined, "is-active", "%s: step %s restarts %s without checking it came up", role, s.Name, unit)
							}
						}
					}
				}
			}
		}
	}
}

func TestBinaryInstallBackupRestoreForReal(t *testing.T) {
	stage, backup, bin := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(stage, "kubernetes"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stage, "kubernetes", "kubectl"), []byte("new"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "kubectl"), []byte("old"), 0o755))
	p, err := NewPlan(Config{PlanName: "bin", Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.31.1",
		StagingDir: stage, BackupDir: backup, BinDir: bin})
	require.NoError(t, err)
	s := step(t, p, StepKubectlBinary)
	exit := func(argv []string) int {
		res, err := nodeexec.OSExecutor{}.Run(context.Background(), nodeexec.Command{Argv: argv})
		require.NoError(t, err)
		return res.ExitCode
	}
	require.NotEqual(t, 0, exit(s.Check), "not installed yet")
	require.Equal(t, 0, exit(s.Backup))
	require.Equal(t, 0, exit(s.Argv))
	require.Equal(t, 0, exit(s.Check), "installed")
	got, _ := os.ReadFile(filepath.Join(bin, "kubectl"))
	require.Equal(t, "new", string(got))
	info, _ := os.Stat(filepath.Join(bin, "kubectl"))
	require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
	require.Equal(t, 0, exit(s.Rollback))
	got, _ = os.ReadFile(filepath.Join(bin, "kubectl"))
	require.Equal(t, "old", string(got))
}

func TestOnlyKubeadmUpgradeBlocksRollback(t *testing.T) {
	// A plan rollback stops at a completed step that has no rollback
	// and does not declare NothingToUndo. That must be exactly the
	// kubeadm upgrade, for every role and version gate.
	for _, role := range []Role{RoleFirstControlPlane, RoleControlPlane, RoleWorker} {
		for _, v := range [][2]string{{"v1.29.4", "v1.30.2"}, {"v1.31.4", "v1.32.1"}} {
			p, err := NewPlan(Config{Node: "n1", Role: role, FromVersion: v[0], ToVersion: v[1], RollbackOnFailure: true})
			require.NoError(t, err)
			var blocking []string
			for _, s := range p.Steps {
				if len(s.Rollback) == 0 && !s.NothingToUndo {
					blocking = append(blocking, s.Name)
				}
			}
			require.Equal(t, []string{StepKubeadmUpgrade}, blocking, "%s %s", role, v[1])
		}
	}
}

// TestBundleStepForReal runs the bundle step's script against a staging
// directory of stand-in binaries: the right bundle passes, another
// version's bundle or a missing tree fails before anything is installed.
func TestBundleStepForReal(t *testing.T) {
	stage := func(t *testing.T, version string, trees ...string) string {
		dir := t.TempDir()
		k := filepath.Join(dir, "kubernetes")
		require.NoError(t, os.MkdirAll(k, 0o755))
		for name, out := range map[string]string{
			"kubeadm": version,
			"kubelet": "Kubernetes " + version,
			"kubectl": "Client Version: " + version + "\nKustomize Version: v5.6.0",
		} {
			require.NoError(t, os.WriteFile(filepath.Join(k, name), []byte("#!/bin/sh\nprintf '%s\\n' '"+out+"'\n"), 0o755))
		}
		for _, tr := range trees {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, tr, "usr", "bin"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, tr, "usr", "bin", tr), []byte("x"), 0o755))
		}
		return dir
	}
	run := func(t *testing.T, staging string) (int, string) {
		p, err := NewPlan(Config{Node: "w-1", Role: RoleWorker, FromVersion: "v1.31.4", ToVersion: "v1.32.1", StagingDir: staging})
		require.NoError(t, err)
		argv := step(t, p, StepBundle).Argv
		require.Equal(t, StepBundle, p.Steps[0].Name, "the first step")
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	for _, tc := range []struct {
		name    string
		version string
		trees   []string
		code    int
		out     string
	}{
		{"the target version's bundle", "v1.32.1", []string{"containerd", "cni-plugins"}, 0, "bundle: v1.32.1 staged"},
		{"another version's bundle", "v1.31.9", []string{"containerd", "cni-plugins"}, 1, "staged kubeadm is v1.31.9, want v1.32.1: the upgrader image carries another bundle"},
		{"no containerd tree", "v1.32.1", []string{"cni-plugins"}, 1, "/containerd is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, stage(t, tc.version, tc.trees...))
			require.Equal(t, tc.code, code, out)
			require.Contains(t, out, tc.out)
		})
	}
	t.Run("an empty tree", func(t *testing.T) {
		dir := stage(t, "v1.32.1", "cni-plugins")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "containerd"), 0o755))
		code, out := run(t, dir)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "/containerd is empty")
	})
}

// TestEtcKubernetesBackupsAreKeptPrivateAndFew: the copy of
// /etc/kubernetes (CA keys, admin.conf) is readable by root only, and
// making it removes other plans' copies beyond KeepEtcBackups (newest
// kept), leaving their other backups and anything not named like a plan
// alone. Run for real with /bin/sh on this host.
func TestEtcKubernetesBackupsAreKeptPrivateAndFew(t *testing.T) {
	root := t.TempDir() // stands in for /var/lib/upgradekit/backup
	src := t.TempDir()  // stands in for /etc/kubernetes
	require.NoError(t, os.MkdirAll(filepath.Join(src, "pki"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "pki", "ca.key"), []byte("ca key"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(src, "admin.conf"), []byte("admin"), 0o600))
	old := time.Now().Add(-time.Hour)
	for i, d := range []string{"kubeadm-a", "kubeadm-b", "kubeadm-c", "Not A Plan"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d, "etc-kubernetes"), 0o700))
		require.NoError(t, os.MkdirAll(filepath.Join(root, d, "bin"), 0o700))
		at := old.Add(time.Duration(i) * time.Minute) // a oldest, c newest
		require.NoError(t, os.Chtimes(filepath.Join(root, d), at, at))
	}

	p, err := NewPlan(Config{PlanName: "kubeadm-new", Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.31.1",
		BackupDir: filepath.Join(root, "kubeadm-new"), KeepEtcBackups: 2})
	require.NoError(t, err)
	argv := slices.Clone(step(t, p, StepKubeadmUpgrade).Backup)
	require.Equal(t, "/etc/kubernetes", argv[len(argv)-1])
	argv[len(argv)-1] = src
	out, err := exec.CommandContext(t.Context(), argv[0], argv[1:]...).CombinedOutput()
	require.NoError(t, err, string(out))

	copyDir := filepath.Join(root, "kubeadm-new", "etc-kubernetes")
	b, err := os.ReadFile(filepath.Join(copyDir, "pki", "ca.key"))
	require.NoError(t, err)
	require.Equal(t, "ca key", string(b))
	fi, err := os.Stat(copyDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "root only")

	exists := func(p ...string) bool {
		_, err := os.Stat(filepath.Join(append([]string{root}, p...)...))
		return err == nil
	}
	require.True(t, exists("kubeadm-c", "etc-kubernetes"), "the newest earlier copy is kept (2 with this one)")
	require.False(t, exists("kubeadm-b", "etc-kubernetes"))
	require.False(t, exists("kubeadm-a", "etc-kubernetes"))
	require.True(t, exists("kubeadm-a", "bin"), "other backups stay")
	require.True(t, exists("Not A Plan", "etc-kubernetes"), "only plan-named directories are touched")

	_, err = NewPlan(Config{PlanName: "p", Node: "n1", Role: RoleWorker, FromVersion: "v1.31.0", ToVersion: "v1.31.1", KeepEtcBackups: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestIgnorePreflightErrorsAreValidated(t *testing.T) {
	tests := []struct {
		name   string
		ignore []string
		field  string
	}{
		{"all ignores the checks that protect the upgrade", []string{"SystemVerification", "all"}, "ignorePreflightErrors[1]"},
		{"ALL in any case", []string{"ALL"}, "ignorePreflightErrors[0]"},
		{"a flag smuggled in", []string{"SystemVerification --force"}, "ignorePreflightErrors[0]"},
		{"a comma would add another check", []string{"Swap,all"}, "ignorePreflightErrors[0]"},
		{"YAML in the configuration", []string{"x\n  forceUpgrade: true"}, "ignorePreflightErrors[0]"},
		{"empty", []string{""}, "ignorePreflightErrors[0]"},
		{"too many", make([]string, MaxIgnorePreflightErrors+1), "ignorePreflightErrors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPlan(Config{Node: "n1", Role: RoleFirstControlPlane, FromVersion: "v1.36.3", ToVersion: "v1.37.2", IgnorePreflightErrors: tt.ignore})
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tt.field+":")
		})
	}
	p, err := NewPlan(Config{Node: "n1", Role: RoleFirstControlPlane, FromVersion: "v1.36.3", ToVersion: "v1.37.2",
		IgnorePreflightErrors: []string{"SystemVerification", "FileContent--proc-sys-net-ipv4-ip_forward"}})
	require.NoError(t, err)
	require.Contains(t, step(t, p, StepKubeadmConfig).Env[0].Value, "  - SystemVerification\n  - FileContent--proc-sys-net-ipv4-ip_forward\n")
}

// TestImportImages: with ImportImages the bundle must carry images/ and
// the images step imports them before kubeadm needs them.
func TestImportImages(t *testing.T) {
	p, err := NewPlan(Config{Node: "n1", Role: RoleFirstControlPlane, FromVersion: "v1.36.3", ToVersion: "v1.37.2", ImportImages: true})
	require.NoError(t, err)
	n := names(p)
	require.Less(t, slices.Index(n, StepKubeadmBinary), slices.Index(n, StepImages))
	require.Less(t, slices.Index(n, StepImages), slices.Index(n, StepKubeadmUpgrade))
	im := step(t, p, StepImages)
	require.Equal(t, []string{DefaultStagingDir + "/images", DefaultContainerdSocket}, im.Argv[len(im.Argv)-2:])
	require.True(t, im.NothingToUndo)
	require.Contains(t, step(t, p, StepBundle).Argv, DefaultStagingDir+"/images", "the bundle step checks the archives are there")

	p, err = NewPlan(Config{Node: "n1", Role: RoleWorker, FromVersion: "v1.36.3", ToVersion: "v1.37.2"})
	require.NoError(t, err)
	require.NotContains(t, names(p), StepImages)

	_, err = NewPlan(Config{Node: "n1", Role: RoleWorker, FromVersion: "v1.36.3", ToVersion: "v1.37.2", ImportImages: true, ContainerdSocket: "run/containerd.sock"})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Contains(t, err.Error(), "containerdSocket")
}
