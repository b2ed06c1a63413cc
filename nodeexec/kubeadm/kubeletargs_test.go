package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// kubeadmFile is a kubeadm-flags.env as kubeadm 1.32 writes it for a node
// joined with kubeletExtraArgs cloud-provider=external and
// node-labels=tier=web.
const kubeadmFile = `KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-labels=tier=web --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"

// fakeKubelet is a temporary root with kubeadm-flags.env, a /proc and a
// systemctl on PATH that "starts" the kubelet from the flags file the way
// systemd does (the kubelet's command line is the unit's fixed arguments
// followed by $KUBELET_KUBEADM_ARGS split at whitespace) and fails to start
// it when it carries --fail-to-start=true, like a kubelet that exits on a
// flag it refuses: the restart succeeds and is-active then fails.
type fakeKubelet struct {
	exec                             nodeexec.OSExecutor
	root, flags, record, proc, state string
	log                              string
}

func newFakeKubelet(t *testing.T, content string) *fakeKubelet {
	t.Helper()
	root := t.TempDir()
	f := &fakeKubelet{root: root, flags: filepath.Join(root, "var/lib/kubelet/kubeadm-flags.env"),
		record: filepath.Join(root, "var/lib/kubelet/upgradekit-kubelet-extra-args"), proc: filepath.Join(root, "proc"),
		state: filepath.Join(root, "state"), log: filepath.Join(root, "calls")}
	bin := filepath.Join(root, "bin")
	for _, d := range []string{bin, f.proc, filepath.Dir(f.flags)} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	stub := `#!/bin/sh
echo "$*" >> "$FAKE_LOG"
case "$1" in
restart)
  [ "$2" = kubelet ] || exit 5
  n=$(cat "$FAKE_ROOT/pid" 2>/dev/null || echo 100); n=$((n+1)); echo "$n" > "$FAKE_ROOT/pid"
  line=$(grep '^KUBELET_KUBEADM_ARGS=' "$FAKE_FLAGS")
  body=${line#KUBELET_KUBEADM_ARGS=\"}; body=${body%\"}
  case " $body " in *" --fail-to-start=true "*) echo failed > "$FAKE_STATE"; exit 0 ;; esac
  mkdir -p "$FAKE_PROC/$n"
  set -f
  printf '%s\0' /usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml $body > "$FAKE_PROC/$n/cmdline"
  echo active > "$FAKE_STATE"; exit 0 ;;
is-active) [ "$(cat "$FAKE_STATE")" = active ] ;;
show)
  [ "$2 $3 $4" = "-p MainPID kubelet" ] || exit 2
  if [ "$(cat "$FAKE_STATE")" = active ]; then echo "MainPID=$(cat "$FAKE_ROOT/pid")"; else echo MainPID=0; fi ;;
*) exit 2 ;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(bin, "systemctl"), []byte(stub), 0o755))
	require.NoError(t, os.WriteFile(f.flags, []byte(content), 0o644))
	f.exec = nodeexec.OSExecutor{BaseEnv: []string{"PATH=" + bin + ":" + nodeexec.DefaultPath, "FAKE_LOG=" + f.log,
		"FAKE_ROOT=" + root, "FAKE_FLAGS=" + f.flags, "FAKE_PROC=" + f.proc, "FAKE_STATE=" + f.state}}
	// The kubelet runs with the file as it is.
	code, out := f.run(t, []string{filepath.Join(bin, "systemctl"), "restart", "kubelet"})
	require.Equal(t, 0, code, out)
	require.NoError(t, os.Remove(f.log))
	return f
}

func (f *fakeKubelet) config(desired, previous []KubeletArg) KubeletArgsConfig {
	return KubeletArgsConfig{PlanName: "args", Node: "n1", Desired: desired, Previous: previous,
		FlagsFile: f.flags, RecordFile: f.record, ProcDir: f.proc, BackupDir: filepath.Join(f.root, "backup"), Settle: time.Second}
}

func (f *fakeKubelet) run(t *testing.T, argv []string) (int, string) {
	t.Helper()
	res, err := f.exec.Run(context.Background(), nodeexec.Command{Argv: argv})
	// The subtests run in parallel: a process another one forks while this
	// one is writing its systemctl stub inherits the stub's write descriptor
	// until it execs, and executing the stub then fails with ETXTBSY
	// (golang/go#22315). That is this test's doing, not the executor's;
	// try again for a moment.
	for i := 0; i < 50 && errors.Is(err, syscall.ETXTBSY); i++ {
		time.Sleep(10 * time.Millisecond)
		res, err = f.exec.Run(context.Background(), nodeexec.Command{Argv: argv})
	}
	require.NoError(t, err)
	return res.ExitCode, string(res.Output)
}

func (f *fakeKubelet) read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	require.NoError(t, err)
	return string(b)
}

func (f *fakeKubelet) active(t *testing.T) bool {
	return strings.TrimSpace(f.read(t, f.state)) == "active"
}

// cmdline is the running kubelet's argv.
func (f *fakeKubelet) cmdline(t *testing.T) []string {
	t.Helper()
	pid := strings.TrimSpace(f.read(t, filepath.Join(f.root, "pid")))
	return strings.Split(strings.TrimSuffix(f.read(t, filepath.Join(f.proc, pid, "cmdline")), "\x00"), "\x00")
}

func (f *fakeKubelet) calls(t *testing.T) []string {
	s := strings.TrimSpace(f.read(t, f.log))
	if s == "<missing>" || s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (f *fakeKubelet) restarts(t *testing.T) int {
	return strings.Count(strings.Join(f.calls(t), "\n"), "restart kubelet")
}

// model is what the step should write: KubeadmFlags.WithExtraArgs.
func model(t *testing.T, content string, desired []KubeletArg, remove ...string) string {
	t.Helper()
	f, err := ParseKubeadmFlags(content)
	require.NoError(t, err)
	return f.WithExtraArgs(desired, remove).String()
}

func TestNewKubeletArgsPlan(t *testing.T) {
	p, err := NewKubeletArgsPlan(KubeletArgsConfig{Node: "worker-1",
		Desired:  []KubeletArg{{Name: "max-pods", Value: "200"}, {Name: "node-labels", Value: "a=b,c=$(x)"}},
		Previous: []KubeletArg{{Name: "max-pods", Value: "110"}, {Name: "cloud-provider", Value: "external"}, {Name: "cloud-provider", Value: "aws"}}})
	require.NoError(t, err)
	require.NoError(t, p.Validate())
	require.Equal(t, []string{StepKubeletArgs, StepKubeletArgsVerify}, names(p))
	require.True(t, strings.HasPrefix(p.Name, "kubelet-args-"))
	s := step(t, p, StepKubeletArgs)
	want := []string{DefaultKubeadmFlagsFile, DefaultKubeletArgsRecordFile, DefaultBackupRoot + "/" + p.Name, DefaultProcDir, "5", "2",
		"--max-pods=200", "--node-labels=a=b,c=$(x)", "cloud-provider"}
	// Every value is an argv element of its own, after the constant script.
	require.Equal(t, want, s.Argv[4:])
	require.Equal(t, want, s.Check[4:])
	require.Equal(t, want, s.Rollback[4:])
	require.Equal(t, want, step(t, p, StepKubeletArgsVerify).Argv[4:])
	require.Equal(t, []string{DefaultKubeadmFlagsFile, DefaultKubeletArgsRecordFile, DefaultBackupRoot + "/" + p.Name}, s.Backup[4:])
	require.Equal(t, nodeexec.InterruptPolicyCheck, s.EffectiveInterruptPolicy())
	require.True(t, s.Idempotent)
	require.True(t, step(t, p, StepKubeletArgsVerify).NothingToUndo)
	for _, st := range p.Steps {
		for _, argv := range [][]string{st.Argv, st.Check, st.Backup, st.Rollback} {
			if argv == nil {
				continue
			}
			require.NotContains(t, argv[2], "200", "no value is spliced into the script")
			out, err := exec.Command("/bin/sh", "-n", "-c", argv[2]).CombinedOutput()
			require.NoError(t, err, "%s: %s", st.Name, out)
		}
	}
	// The default plan name depends on the arguments.
	p2, err := NewKubeletArgsPlan(KubeletArgsConfig{Node: "worker-1", Desired: []KubeletArg{{Name: "max-pods", Value: "250"}}})
	require.NoError(t, err)
	require.NotEqual(t, p.Name, p2.Name)
}

func TestNewKubeletArgsPlanRejects(t *testing.T) {
	ok := []KubeletArg{{Name: "max-pods", Value: "200"}}
	tests := []struct {
		name      string
		cfg       KubeletArgsConfig
		want      error
		wantField string
	}{
		{"bad node", KubeletArgsConfig{Node: "Bad Node", Desired: ok}, ErrInvalidConfig, ""},
		{"relative flags file", KubeletArgsConfig{Node: "n", FlagsFile: "kubeadm-flags.env"}, ErrInvalidConfig, ""},
		{"backup at root", KubeletArgsConfig{Node: "n", BackupDir: "/"}, ErrInvalidConfig, ""},
		{"record is the flags file", KubeletArgsConfig{Node: "n", RecordFile: DefaultKubeadmFlagsFile}, ErrInvalidConfig, ""},
		{"settle not whole seconds", KubeletArgsConfig{Node: "n", Settle: 1500 * time.Millisecond}, ErrInvalidConfig, ""},
		{"settle too long", KubeletArgsConfig{Node: "n", Settle: 2 * time.Minute}, ErrInvalidConfig, ""},
		{"bad plan name", KubeletArgsConfig{Node: "n", PlanName: "Not_A_Label"}, nodeexec.ErrInvalidPlan, ""},
		{"leading dashes", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: "--max-pods", Value: "1"}}}, ErrInvalidKubeletArg, "desired[0].name"},
		{"upper case name", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: "MaxPods", Value: "1"}}}, ErrInvalidKubeletArg, "desired[0].name"},
		{"empty name", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Value: "1"}}}, ErrInvalidKubeletArg, "desired[0].name"},
		{"name with =", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: "a=b", Value: "1"}}}, ErrInvalidKubeletArg, "desired[0].name"},
		{"name too long", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: strings.Repeat("a", 257)}}}, ErrInvalidKubeletArg, "desired[0].name"},
		{"bad previous name", KubeletArgsConfig{Node: "n", Previous: []KubeletArg{{Name: "a b"}}}, ErrInvalidKubeletArg, "previous[0].name"},
		{"value too long", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: "a", Value: strings.Repeat("x", 1025)}}}, ErrInvalidKubeletArg, "desired[0].value"},
		{"adds hostname-override", KubeletArgsConfig{Node: "n", Desired: []KubeletArg{{Name: "hostname-override", Value: "x"}}}, ErrKubeadmOwnedArg, "desired"},
		{"removes pod-infra-container-image", KubeletArgsConfig{Node: "n", Previous: []KubeletArg{{Name: "pod-infra-container-image", Value: "p:1"}}}, ErrKubeadmOwnedArg, "desired"},
		{"changes container-runtime-endpoint", KubeletArgsConfig{Node: "n",
			Desired:  []KubeletArg{{Name: "container-runtime-endpoint", Value: "unix:///a"}},
			Previous: []KubeletArg{{Name: "container-runtime-endpoint", Value: "unix:///b"}}}, ErrKubeadmOwnedArg, "desired"},
	}
	// Values that systemd would not pass to the kubelet unchanged.
	for _, v := range []string{"a b", "a\nb", "a\tb", "a\rb", "a\u00a0b", "a\u2028b", `a"b`, "a'b", `a\b`, "a\x00b", "a\x7fb", "a\x1bb", "\xff", "a\u200bb"} {
		tests = append(tests, struct {
			name      string
			cfg       KubeletArgsConfig
			want      error
			wantField string
		}{fmt.Sprintf("value %q", v), KubeletArgsConfig{Node: "n", Desired: []KubeletArg{ok[0], {Name: "node-labels", Value: v}}}, ErrInvalidKubeletArg, "desired[1].value"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewKubeletArgsPlan(tt.cfg)
			require.ErrorIs(t, err, tt.want)
			require.Empty(t, p.Steps)
			if tt.want == nodeexec.ErrInvalidPlan {
				var verr *nodeexec.ValidationError
				require.ErrorAs(t, err, &verr)
				require.Equal(t, "name", verr.Field)
			}
			if tt.wantField == "" {
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			var ae *KubeletArgError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, tt.wantField, ae.Field)
			require.Contains(t, err.Error(), tt.wantField)
		})
	}
	// Unchanged kubeadm-owned flags are fine (a config that always set them).
	_, err := NewKubeletArgsPlan(KubeletArgsConfig{Node: "n",
		Desired:  []KubeletArg{{Name: "container-runtime-endpoint", Value: "unix:///a"}, {Name: "max-pods", Value: "1"}},
		Previous: []KubeletArg{{Name: "container-runtime-endpoint", Value: "unix:///a"}}})
	require.NoError(t, err)
}

// TestKubeletArgsStepForReal runs the kubelet-args plan's scripts on this
// machine against a fake systemctl and /proc: the new file is what the
// model (and kubeadm) would write, kubeadm's own flags are kept, the
// running kubelet has the new arguments, and the check then says the
// work is done, so a re-run changes and restarts nothing.
func TestKubeletArgsStepForReal(t *testing.T) {
	const header = "# written by kubeadm\n"
	tests := []struct {
		name     string
		file     string
		record   string // "" means none
		desired  []KubeletArg
		previous []KubeletArg
		want     string
	}{
		{
			name:     "change a flag",
			file:     kubeadmFile,
			desired:  []KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=db"}},
			previous: []KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=web"}},
			want:     `KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-labels=tier=db --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n",
		},
		{
			name:     "add a flag, other lines kept",
			file:     header + kubeadmFile + "# end\n",
			desired:  []KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=web"}, {Name: "max-pods", Value: "250"}},
			previous: []KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=web"}},
			want:     header + `KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=250 --node-labels=tier=web --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n# end\n",
		},
		{
			name:     "remove a flag of the previous config",
			file:     kubeadmFile,
			desired:  []KubeletArg{{Name: "cloud-provider", Value: "external"}},
			previous: []KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=web"}},
			want:     `KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n",
		},
		{
			// The caller does not know an earlier plan added --max-pods;
			// the record does.
			name:    "remove a flag an earlier plan added",
			file:    `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=250 --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n",
			record:  FormatKubeletArgsRecord([]KubeletArg{{Name: "max-pods", Value: "250"}}),
			desired: []KubeletArg{{Name: "v", Value: "2"}},
			want:    `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10 --v=2"` + "\n",
		},
		{
			name:    "repeated names, kubeadm's order",
			file:    `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"`,
			desired: []KubeletArg{{Name: "node-labels", Value: "z=1"}, {Name: "node-labels", Value: "a=1"}},
			want:    `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-labels=a=1 --node-labels=z=1"` + "\n",
		},
		{
			name: "no assignment yet",
			file: header,
			desired: []KubeletArg{
				{Name: "node-labels", Value: "$(touch${IFS}PWNED)"}, {Name: "v", Value: "`id`;|&<>*?[]{}~#%!^"}, {Name: "provider-id", Value: "aws:///eu-west-1a/i-0abc"}, {Name: "x", Value: "ünï©ødé"}, {Name: "e", Value: ""},
			},
			want: header + `KUBELET_KUBEADM_ARGS="--e= --node-labels=$(touch${IFS}PWNED) --provider-id=aws:///eu-west-1a/i-0abc --v=` + "`id`" + `;|&<>*?[]{}~#%!^ --x=ünï©ødé"` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := newFakeKubelet(t, tt.file)
			if tt.record != "" {
				require.NoError(t, os.WriteFile(k.record, []byte(tt.record), 0o644))
			}
			before := k.cmdline(t)
			p, err := NewKubeletArgsPlan(k.config(tt.desired, tt.previous))
			require.NoError(t, err)
			s := step(t, p, StepKubeletArgs)
			code, out := k.run(t, s.Check)
			require.NotEqual(t, 0, code, "not done yet: %s", out)
			code, out = k.run(t, s.Backup)
			require.Equal(t, 0, code, out)
			code, out = k.run(t, s.Argv)
			require.Equal(t, 0, code, out)

			require.Equal(t, tt.want, k.read(t, k.flags))
			var remove []string
			for _, a := range tt.previous {
				remove = append(remove, a.Name)
			}
			if tt.record != "" {
				names, err := ParseKubeletArgsRecord(tt.record)
				require.NoError(t, err)
				remove = append(remove, names...)
			}
			require.Equal(t, model(t, tt.file, tt.desired, remove...), tt.want, "the script writes what the model does")
			require.Equal(t, FormatKubeletArgsRecord(tt.desired), k.read(t, k.record))
			info, err := os.Stat(k.flags)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o644), info.Mode().Perm())
			require.True(t, k.active(t))
			require.Equal(t, 1, k.restarts(t), "%v", k.calls(t))
			require.NotContains(t, k.calls(t), "stop kubelet")
			require.NoFileExists(t, "PWNED")
			after := k.cmdline(t)
			for _, a := range tt.desired {
				require.Contains(t, after, a.String(), "the value reached the kubelet unchanged")
			}
			require.NotEqual(t, before, after)
			entries, err := os.ReadDir(filepath.Dir(k.flags))
			require.NoError(t, err)
			for _, e := range entries {
				require.NotContains(t, e.Name(), "upgradekit-new", "no temporary file left")
			}

			code, out = k.run(t, step(t, p, StepKubeletArgsVerify).Argv)
			require.Equal(t, 0, code, out)

			// Done: the check passes, so the runner skips the step.
			code, out = k.run(t, s.Check)
			require.Equal(t, 0, code, out)
			// Running it anyway changes no file.
			code, out = k.run(t, s.Argv)
			require.Equal(t, 0, code, out)
			require.Equal(t, tt.want, k.read(t, k.flags))

			// The backup holds the old file; the rollback puts it back and
			// restarts the kubelet with it.
			require.Equal(t, tt.file, k.read(t, filepath.Join(k.root, "backup", "kubeadm-flags.env")))
			code, out = k.run(t, s.Rollback)
			require.Equal(t, 0, code, out)
			require.Equal(t, tt.file, k.read(t, k.flags))
			if tt.record == "" {
				require.Equal(t, "<missing>", k.read(t, k.record))
			} else {
				require.Equal(t, tt.record, k.read(t, k.record))
			}
			require.True(t, k.active(t))
			require.Equal(t, before[3:], k.cmdline(t)[3:])
		})
	}
}

// TestKubeletArgsPlanRunsAndReruns runs the plan through nodeexec's Runner
// twice: the second run of a new runner on the same journal does nothing,
// and a new plan with the same arguments is skipped by the check.
func TestKubeletArgsPlanRunsAndReruns(t *testing.T) {
	k := newFakeKubelet(t, kubeadmFile)
	cfg := k.config([]KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "max-pods", Value: "250"}},
		[]KubeletArg{{Name: "cloud-provider", Value: "external"}, {Name: "node-labels", Value: "tier=web"}})
	p, err := NewKubeletArgsPlan(cfg)
	require.NoError(t, err)
	journal := t.TempDir()
	r, err := nodeexec.NewRunner(k.exec, nodeexec.RunnerOptions{JournalDir: journal, Direct: true})
	require.NoError(t, err)
	out, err := r.Run(context.Background(), p)
	require.NoError(t, err, "%+v", out)
	require.Equal(t, nodeexec.PlanStateSucceeded, out.State)
	require.Equal(t, 1, k.restarts(t))

	cfg.PlanName = "args-again"
	p2, err := NewKubeletArgsPlan(cfg)
	require.NoError(t, err)
	out, err = r.Run(context.Background(), p2)
	require.NoError(t, err)
	require.Equal(t, nodeexec.StepStateSkipped, out.Steps[0].State, "already applied")
	require.Equal(t, 1, k.restarts(t), "nothing restarted again")
}

// TestKubeletArgsRestoreWhenTheKubeletFails: a kubelet that does not stay
// up with the new flags gets the old file back and is restarted before the
// step fails, so it is active when the step ends.
func TestKubeletArgsRestoreWhenTheKubeletFails(t *testing.T) {
	k := newFakeKubelet(t, kubeadmFile)
	before := k.cmdline(t)
	p, err := NewKubeletArgsPlan(k.config([]KubeletArg{{Name: "fail-to-start", Value: "true"}}, nil))
	require.NoError(t, err)
	s := step(t, p, StepKubeletArgs)
	code, out := k.run(t, s.Backup)
	require.Equal(t, 0, code, out)
	code, out = k.run(t, s.Argv)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "did not stay up")
	require.Equal(t, kubeadmFile, k.read(t, k.flags), "old file back")
	require.Equal(t, "<missing>", k.read(t, k.record), "no record of what was not applied")
	require.True(t, k.active(t), "the kubelet runs when the step ends: %v", k.calls(t))
	require.Equal(t, 2, k.restarts(t))
	require.Equal(t, before[3:], k.cmdline(t)[3:])

	// The same through the Runner with RollbackOnFailure.
	k = newFakeKubelet(t, kubeadmFile)
	cfg := k.config([]KubeletArg{{Name: "fail-to-start", Value: "true"}}, nil)
	cfg.RollbackOnFailure = true
	p, err = NewKubeletArgsPlan(cfg)
	require.NoError(t, err)
	p.Steps[0].Retry = nodeexec.RetryPolicy{}
	r, err := nodeexec.NewRunner(k.exec, nodeexec.RunnerOptions{JournalDir: t.TempDir(), Direct: true})
	require.NoError(t, err)
	o, err := r.Run(context.Background(), p)
	require.ErrorIs(t, err, nodeexec.ErrRolledBack)
	require.Equal(t, nodeexec.PlanStateRolledBack, o.State)
	require.Equal(t, kubeadmFile, k.read(t, k.flags))
	require.True(t, k.active(t))
}

// TestKubeletArgsRefusesFilesItCannotEdit: the script and the model
// refuse the same files, and the script then changes nothing and
// restarts nothing.
func TestKubeletArgsRefusesFilesItCannotEdit(t *testing.T) {
	for _, content := range []string{
		`KUBELET_KUBEADM_ARGS="--a=\"b c\""` + "\n",
		`KUBELET_KUBEADM_ARGS='--a=b'` + "\n",
		`KUBELET_KUBEADM_ARGS=--a=b` + "\n",
		` KUBELET_KUBEADM_ARGS="--a=b"` + "\n",
		`KUBELET_KUBEADM_ARGS="--a=b"` + "\n" + `KUBELET_KUBEADM_ARGS="--a=c"` + "\n",
		`KUBELET_KUBEADM_ARGS="--a=b -v 2"` + "\n",
		`KUBELET_KUBEADM_ARGS="--a=b --flag"` + "\n",
		`KUBELET_KUBEADM_ARGS="--=b"` + "\n",
		`KUBELET_KUBEADM_ARGS="--a=b"` + "\r\n",
		`KUBELET_KUBEADM_ARGS="--a=b"` + "\nOTHER=\"x\n" + `y"` + "\n",
		"# a comment \\\n" + `KUBELET_KUBEADM_ARGS="--a=b"` + "\n",
		"KUBELET_KUBEADM_ARGS=\"--a=b\x00\"\n",
		"KUBELET_KUBEADM_ARGS=\"--a=\x01\"\n",
	} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			_, err := ParseKubeadmFlags(content)
			require.ErrorIs(t, err, ErrUnsupportedFlagsFile)
			k := newFakeKubelet(t, content)
			p, err := NewKubeletArgsPlan(k.config([]KubeletArg{{Name: "max-pods", Value: "1"}}, nil))
			require.NoError(t, err)
			s := step(t, p, StepKubeletArgs)
			code, out := k.run(t, s.Backup)
			require.Equal(t, 0, code, out)
			code, out = k.run(t, s.Argv)
			require.Equal(t, 1, code, out)
			require.Contains(t, out, "kubelet-args: ")
			require.Equal(t, content, k.read(t, k.flags))
			require.Equal(t, 0, k.restarts(t))
		})
	}
	// A record file upgradekit did not write is refused too.
	k := newFakeKubelet(t, kubeadmFile)
	require.NoError(t, os.WriteFile(k.record, []byte("max-pods=1\n"), 0o644))
	_, err := ParseKubeletArgsRecord("max-pods=1\n")
	require.ErrorIs(t, err, ErrUnsupportedFlagsFile)
	p, err := NewKubeletArgsPlan(k.config(nil, nil))
	require.NoError(t, err)
	code, out := k.run(t, step(t, p, StepKubeletArgs).Argv)
	require.Equal(t, 1, code, out)
	require.Equal(t, kubeadmFile, k.read(t, k.flags))
}

// TestKubeletArgsVerify fails while the running kubelet lacks a desired
// argument or still has a removed one.
func TestKubeletArgsVerify(t *testing.T) {
	k := newFakeKubelet(t, kubeadmFile)
	verify := func(desired, previous []KubeletArg) (int, string) {
		p, err := NewKubeletArgsPlan(k.config(desired, previous))
		require.NoError(t, err)
		return k.run(t, step(t, p, StepKubeletArgsVerify).Argv)
	}
	code, out := verify([]KubeletArg{{Name: "node-labels", Value: "tier=web"}}, nil)
	require.Equal(t, 0, code, out)
	code, out = verify([]KubeletArg{{Name: "node-labels", Value: "tier=db"}}, nil)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "missing --node-labels=tier=db")
	code, out = verify(nil, []KubeletArg{{Name: "node-labels", Value: "tier=web"}})
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "still running with --node-labels=tier=web")
	require.NoError(t, os.WriteFile(k.state, []byte("failed\n"), 0o644))
	code, out = verify(nil, nil)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "not active")
}

// TestKubeletArgsNoStepStopsTheKubelet is TestNoStepEndsWithAUnitStopped
// for the kubelet-args plan.
func TestKubeletArgsNoStepStopsTheKubelet(t *testing.T) {
	p, err := NewKubeletArgsPlan(KubeletArgsConfig{Node: "n1", Desired: []KubeletArg{{Name: "max-pods", Value: "1"}}})
	require.NoError(t, err)
	for _, s := range p.Steps {
		for _, argv := range [][]string{s.Argv, s.Check, s.Backup, s.Rollback} {
			joined := strings.Join(argv, " ")
			for _, verb := range []string{"systemctl stop", "systemctl kill", "systemctl disable", "systemctl mask", "pkill", "killall", "kill "} {
				require.NotContains(t, joined, verb, "step %s", s.Name)
			}
			if strings.Contains(joined, "systemctl restart") {
				require.Contains(t, joined, "is-active", "step %s restarts the kubelet without checking it came up", s.Name)
			}
		}
	}
}

// renderScript runs the scripts' render function and prints its result.
func renderScript(t *testing.T, content, record string, desired []KubeletArg, previous []string) (string, string, error) {
	t.Helper()
	dir := t.TempDir()
	flags, rec := filepath.Join(dir, "flags"), filepath.Join(dir, "record")
	require.NoError(t, os.WriteFile(flags, []byte(content), 0o644))
	if record != "" {
		require.NoError(t, os.WriteFile(rec, []byte(record), 0o644))
	}
	args := []string{flags, rec, dir, dir, "1", fmt.Sprint(len(desired))}
	for _, a := range desired {
		args = append(args, a.String())
	}
	args = append(args, previous...)
	argv := nodeexec.ShellArgv(scriptKubeletArgsLib+`render
printf '%s' "$new_flags" > "$backup/out-flags"
printf '%s' "$new_record" > "$backup/out-record"`, args...)
	res, err := nodeexec.OSExecutor{}.Run(context.Background(), nodeexec.Command{Argv: argv})
	require.NoError(t, err)
	if res.ExitCode != 0 {
		return "", "", fmt.Errorf("exit %d: %s", res.ExitCode, res.Output)
	}
	f, err := os.ReadFile(filepath.Join(dir, "out-flags"))
	require.NoError(t, err)
	r, err := os.ReadFile(filepath.Join(dir, "out-record"))
	require.NoError(t, err)
	return string(f), string(r), nil
}

// TestKubeletArgsScriptMatchesModel compares the shell render with
// KubeadmFlags on generated files and arguments: same refusals, same
// output.
func TestKubeletArgsScriptMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	names := []string{"a", "a-b", "a.b", "max-pods", "node-labels", "container-runtime-endpoint", "v", "A", "a_b", "0x"}
	values := []string{"", "1", "b", "a=b", "=", "$(id)", "`id`", "*", "ü", "--x", "x;y", "%s"}
	lines := []string{"", "# c", "; c", "  # c", "FOO=bar", "# KUBELET_KUBEADM_ARGS old", "\t", "X=\"q\"", "# c \\"}
	n := 150
	if testing.Short() {
		n = 20
	}
	for i := range n {
		var toks []string
		for range rng.IntN(5) {
			tok := "--" + pick(names) + "=" + pick(values)
			if rng.IntN(20) == 0 {
				tok = pick([]string{"-v", "--flag", "x", "--=1"})
			}
			toks = append(toks, tok)
		}
		var file []string
		for range rng.IntN(3) {
			file = append(file, pick(lines))
		}
		if rng.IntN(8) != 0 {
			file = slices.Insert(file, rng.IntN(len(file)+1), `KUBELET_KUBEADM_ARGS="`+strings.Join(toks, pick([]string{" ", "  ", "\t"}))+`"`)
		}
		content := strings.Join(file, "\n")
		if rng.IntN(4) != 0 {
			content += "\n"
		}
		var desired []KubeletArg
		for range rng.IntN(4) {
			desired = append(desired, KubeletArg{Name: pick(names[:5]), Value: pick(values)})
		}
		var previous []string
		for range rng.IntN(3) {
			previous = append(previous, pick(names[:5]))
		}
		if rng.IntN(3) == 0 {
			previous = append(previous, RemoveAllExtraArgs) // ReplaceAll
		}
		record := ""
		if rng.IntN(3) == 0 {
			record = FormatKubeletArgsRecord([]KubeletArg{{Name: pick(names[:5]), Value: pick(values)}})
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			gotFlags, gotRecord, gotErr := renderScript(t, content, record, desired, previous)
			f, err := ParseKubeadmFlags(content)
			if err != nil {
				require.Error(t, gotErr, "the model refuses %q (%v), the script does not", content, err)
				return
			}
			require.NoError(t, gotErr, "%q", content)
			remove := previous
			if record != "" {
				names, err := ParseKubeletArgsRecord(record)
				require.NoError(t, err)
				remove = append(remove, names...)
			}
			if d := cmp.Diff(f.WithExtraArgs(desired, remove).String(), gotFlags); d != "" {
				t.Fatalf("flags of %q differ (-model +script):\n%s", content, d)
			}
			require.Equal(t, FormatKubeletArgsRecord(desired), gotRecord)
		})
	}
}

func TestKubeadmFlagsModel(t *testing.T) {
	f, err := ParseKubeadmFlags(kubeadmFile)
	require.NoError(t, err)
	require.Equal(t, []KubeletArg{
		{"cloud-provider", "external"}, {"container-runtime-endpoint", "unix:///run/containerd/containerd.sock"},
		{"node-labels", "tier=web"}, {"pod-infra-container-image", "registry.k8s.io/pause:3.10"},
	}, f.Args)
	require.Equal(t, kubeadmFile, f.String(), "kubeadm's own file round-trips byte for byte")
	require.Equal(t, kubeadmFile, f.WithExtraArgs(nil, nil).String(), "nothing to change, nothing changed")
	g := f.WithExtraArgs([]KubeletArg{{"max-pods", "1"}}, []string{"node-labels"})
	require.Equal(t, `KUBELET_KUBEADM_ARGS="--cloud-provider=external --container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=1 --pod-infra-container-image=registry.k8s.io/pause:3.10"`+"\n", g.String())
	require.Len(t, f.Args, 4, "WithExtraArgs does not change its receiver")
	empty, err := ParseKubeadmFlags("")
	require.NoError(t, err)
	require.Equal(t, "", empty.String())
	require.Equal(t, `KUBELET_KUBEADM_ARGS="--v=2"`+"\n", empty.WithExtraArgs([]KubeletArg{{"v", "2"}}, nil).String())
	names, err := ParseKubeletArgsRecord(FormatKubeletArgsRecord([]KubeletArg{{"a", "1"}, {"b", "x=y"}}))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, names)
}
