//go:build linux

package nodeexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	nsenterBin = "/usr/bin/nsenter"
	unshareBin = "/usr/bin/unshare"
	setprivBin = "/usr/bin/setpriv"
)

// namespacedChild starts `sleep` in fresh UTS, mount, IPC, network and PID
// namespaces (unshare from util-linux), with its own hostname and a tmpfs
// holding a marker file that exists only in its mount namespace. It returns
// the PID of the sleeping process as seen from here.
func namespacedChild(t *testing.T) (pid int, hostname, markerDir string) {
	t.Helper()
	require.Equal(t, 0, os.Geteuid(), "these tests create namespaces and must run as root")
	hostname = fmt.Sprintf("child-%d", time.Now().UnixNano()%1_000_000)
	markerDir = t.TempDir()
	// The script is constant; the hostname and directory are positional
	// arguments.
	script := `hostname "$1" && mount -t tmpfs upgradekit-test "$2" && echo "$1" > "$2/marker" && exec sleep 600`
	cmd := exec.Command(unshareBin, "--uts", "--mount", "--ipc", "--net", "--pid", "--fork", "--kill-child",
		"--propagation", "private", "/bin/sh", "-c", script, "sh", hostname, markerDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// unshare --fork: the namespaced process is unshare's only child.
	childrenFile := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(childrenFile)
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return false
		}
		pid, _ = strconv.Atoi(f[0])
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	}, 10*time.Second, 10*time.Millisecond, "namespaced child did not start: %s", out)
	return pid, hostname, markerDir
}

func TestRunnerEntersRealNamespaces(t *testing.T) {
	pid, childHost, markerDir := namespacedChild(t)
	ourHost, err := os.Hostname()
	require.NoError(t, err)
	require.NotEqual(t, ourHost, childHost)
	_, err = os.Stat(filepath.Join(markerDir, "marker"))
	require.ErrorIs(t, err, os.ErrNotExist, "the marker exists only in the child's mount namespace")

	plan := Plan{Name: "ns", Node: "node-a", Steps: []Step{
		{Name: "uts-only", Argv: []string{"hostname"}, Namespaces: []Namespace{NamespaceUTS}, Idempotent: true},
		{Name: "mount-only", Argv: []string{"cat", filepath.Join(markerDir, "marker")}, Namespaces: []Namespace{NamespaceMount}, Idempotent: true},
		{Name: "defaults", Argv: []string{"hostname"}, Idempotent: true},
		{Name: "pid", Argv: []string{"/bin/sh", "-c", `echo "$$"`}, Namespaces: []Namespace{NamespacePID}, Idempotent: true},
		{Name: "net", Argv: []string{"cat", "/proc/self/net/dev"}, Namespaces: []Namespace{NamespaceNet}, Idempotent: true},
		{Name: "env", Argv: []string{"printenv", "UPGRADEKIT_TEST_VALUE"}, Env: []EnvVar{{Name: "UPGRADEKIT_TEST_VALUE", Value: "a b; $(c)"}}, Idempotent: true},
		{Name: "in-container", Argv: []string{"hostname"}, InContainer: true, Idempotent: true},
	}}
	r := newTestRunner(t, OSExecutor{NsenterPath: nsenterBin}, t.TempDir(), RunnerOptions{TargetPID: pid})
	out, err := r.Run(t.Context(), plan)
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range out.Steps {
		got[s.Name] = strings.TrimSpace(s.Output)
		t.Logf("step %-12s -> %q", s.Name, got[s.Name])
	}
	require.Equal(t, childHost, got["uts-only"], "nsenter --uts saw the child's hostname")
	require.Equal(t, childHost, got["mount-only"], "nsenter --mount saw the child's tmpfs")
	require.Equal(t, childHost, got["defaults"])
	require.NotEqual(t, strconv.Itoa(os.Getpid()), got["pid"])
	pidInNS, err := strconv.Atoi(got["pid"])
	require.NoError(t, err)
	require.Less(t, pidInNS, 10, "a PID from the child's fresh PID namespace is small")
	var ifaces []string
	for _, line := range strings.Split(got["net"], "\n")[2:] { // two header lines
		ifaces = append(ifaces, strings.TrimSpace(strings.SplitN(line, ":", 2)[0]))
	}
	require.Equal(t, []string{"lo"}, ifaces, "the child's network namespace has only loopback")
	require.Equal(t, "a b; $(c)", got["env"], "env values arrive verbatim, never shell-expanded")
	require.Equal(t, ourHost, got["in-container"], "InContainer steps do not nsenter")
}

// capExecutor runs the nsenter argv under setpriv with a reduced
// capability bounding set, as a container with only those capabilities
// would.
func capExecutor(caps []string) Executor {
	return ExecutorFunc(func(ctx context.Context, c Command) (Result, error) {
		bounding := "-all"
		for _, cp := range caps {
			bounding += ",+" + strings.ToLower(cp)
		}
		argv := append([]string{setprivBin, "--bounding-set", bounding, "--inh-caps", "-all", "--"},
			NsenterArgv(nsenterBin, *c.Target, c.Argv)...)
		c.Argv, c.Target = argv, nil
		return OSExecutor{}.Run(ctx, c)
	})
}

func without(caps []string, drop string) []string {
	var out []string
	for _, c := range caps {
		if c != drop {
			out = append(out, c)
		}
	}
	return out
}

// TestRequiredCapabilitiesAreMinimal proves against the kernel that
// RequiredCapabilities is enough and that each capability in it is needed.
func TestRequiredCapabilitiesAreMinimal(t *testing.T) {
	pid, childHost, _ := namespacedChild(t)
	sets := [][]Namespace{
		DefaultNamespaces(),
		{NamespaceUTS},
		{NamespaceNet},
		{NamespaceMount, NamespaceUTS, NamespaceIPC, NamespaceNet, NamespacePID},
	}
	for _, ns := range sets {
		required := RequiredCapabilities(ns)
		name := fmt.Sprint(ns)
		t.Run(name, func(t *testing.T) {
			run := func(caps []string) Outcome {
				plan := Plan{Name: "caps", Node: "n", Steps: []Step{{Name: "probe", Argv: []string{"hostname"}, Namespaces: ns, Idempotent: true}}}
				r := newTestRunner(t, capExecutor(caps), t.TempDir(), RunnerOptions{TargetPID: pid})
				out, _ := r.Run(t.Context(), plan)
				return out
			}
			out := run(required)
			require.Equal(t, PlanStateSucceeded, out.State, "with %v: %+v", required, out.Failure)
			if len(ns) == 1 && ns[0] == NamespaceNet {
				require.NotEqual(t, childHost, strings.TrimSpace(out.Steps[0].Output))
			} else {
				require.Equal(t, childHost, strings.TrimSpace(out.Steps[0].Output))
			}
			t.Logf("%v: works with exactly %v", ns, required)
			for _, drop := range required {
				out := run(without(required, drop))
				require.Equal(t, PlanStateFailed, out.State, "dropping %s must break nsenter into %v", drop, ns)
				require.NotEqual(t, 0, out.Failure.ExitCode)
				t.Logf("%v: without %s -> exit %d: %s", ns, drop, out.Failure.ExitCode, strings.TrimSpace(out.Failure.Output))
			}
		})
	}
}

func TestOSExecutorResults(t *testing.T) {
	ctx := t.Context()
	res, err := OSExecutor{}.Run(ctx, Command{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}})
	require.NoError(t, err, "a non-zero exit is a result, not an error")
	require.Equal(t, 3, res.ExitCode)
	require.Equal(t, "out\nerr\n", string(res.Output))

	res, err = OSExecutor{OutputLimit: 10}.Run(ctx, Command{Argv: []string{"/bin/sh", "-c", "seq 1 1000"}})
	require.NoError(t, err)
	require.True(t, res.Truncated)
	require.Equal(t, "\n999\n1000\n", string(res.Output))

	_, err = OSExecutor{}.Run(ctx, Command{Argv: []string{"/nonexistent/binary"}})
	require.Error(t, err)
	require.ErrorContains(t, err, "start")

	_, err = OSExecutor{}.Run(ctx, Command{})
	require.ErrorIs(t, err, errEmptyArgv)

	// The runner's own environment is not inherited.
	t.Setenv("UPGRADEKIT_SECRET", "leak")
	res, err = OSExecutor{}.Run(ctx, Command{Argv: []string{"/usr/bin/env"}, Env: []string{"A=1"}})
	require.NoError(t, err)
	require.Equal(t, DefaultPath+"\nA=1\n", string(res.Output))

	// A deadline kills the whole process group, grandchildren included.
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err = OSExecutor{}.Run(dctx, Command{Argv: []string{"/bin/sh", "-c", "sleep 30 & sleep 30; wait"}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, -1, res.ExitCode)
	require.Less(t, time.Since(start), 5*time.Second, "pipes held by the killed grandchild must not block Run")
}

// TestOSExecutorStopsGracefully: a cancelled command gets SIGTERM first and
// may end cleanly (a step that traps it finishes its cleanup and reports
// its own exit code); one that ignores SIGTERM is SIGKILLed, with its
// whole process group, KillGrace later.
func TestOSExecutorStopsGracefully(t *testing.T) {
	t.Run("SIGTERM first", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(300*time.Millisecond, cancel)
		res, err := OSExecutor{}.Run(ctx, Command{Argv: []string{"/bin/sh", "-c", `trap 'echo cleaned up; exit 7' TERM; sleep 30 & wait`}})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 7, res.ExitCode, "the step ended itself: %s", res.Output)
		require.Contains(t, string(res.Output), "cleaned up")
	})
	t.Run("SIGKILL after the grace", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		res, err := OSExecutor{KillGrace: 500 * time.Millisecond}.Run(ctx, Command{Argv: []string{"/bin/sh", "-c", `trap '' TERM; sleep 30 & sleep 30; wait`}})
		took := time.Since(start)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, -1, res.ExitCode, "killed by a signal")
		require.GreaterOrEqual(t, took, 650*time.Millisecond, "not killed before the grace")
		require.Less(t, took, 5*time.Second)
	})
}

// TestRunnerSoftStopLetsTheStepFinish: once the soft stop is done the step
// under way finishes and the next does not start; the plan stays Running
// and the next run starts where it stopped.
func TestRunnerSoftStopLetsTheStepFinish(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "first-done")
	soft, stop := context.WithCancel(t.Context())
	plan := Plan{Name: "p", Node: "n", Steps: []Step{
		{Name: "first", Argv: []string{"/bin/sh", "-c", `sleep 0.5; touch "$1"`, "sh", marker}, Timeout: time.Minute, Idempotent: true},
		{Name: "second", Argv: []string{"/bin/true"}, Timeout: time.Minute, Idempotent: true},
	}}
	r, err := NewRunner(OSExecutor{}, RunnerOptions{JournalDir: filepath.Join(dir, "journal"), Direct: true, SoftStop: soft})
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, stop) // SIGTERM while the first step runs
	out, err := r.Run(t.Context(), plan)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), `before step "second"`)
	require.Equal(t, PlanStateRunning, out.State)
	require.Equal(t, StepStateSucceeded, out.Steps[0].State, "the step under way finished")
	require.Equal(t, StepStatePending, out.Steps[1].State)
	_, err = os.Stat(marker)
	require.NoError(t, err)

	r, err = NewRunner(OSExecutor{}, RunnerOptions{JournalDir: filepath.Join(dir, "journal"), Direct: true})
	require.NoError(t, err)
	out, err = r.Run(t.Context(), plan)
	require.NoError(t, err)
	require.Equal(t, PlanStateSucceeded, out.State)
	require.Equal(t, 1, out.Steps[0].Attempts, "the first step did not run again")
}
