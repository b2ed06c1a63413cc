package nodeexec_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// A plan run against a simulated host: the second step fails once, is
// retried, and the plan succeeds. Running it again runs nothing, because
// the journal says it is done.
func Example() {
	dir, _ := os.MkdirTemp("", "nodeexec-example")
	defer os.RemoveAll(dir)

	plan := nodeexec.Plan{
		Name: "upgrade-worker-1", Node: "worker-1", FromVersion: "v1.35.4", ToVersion: "v1.36.3",
		Steps: []nodeexec.Step{
			{Name: "stage", Argv: []string{"cp", "-a", "/staging/.", "/"}, Idempotent: true},
			{Name: "restart", Argv: []string{"systemctl", "restart", "kubelet"}, Idempotent: true,
				Retry: nodeexec.RetryPolicy{Attempts: 3}},
		},
	}
	failures := 1
	host := nodeexec.ExecutorFunc(func(_ context.Context, c nodeexec.Command) (nodeexec.Result, error) {
		fmt.Printf("host runs %s %v in %v of PID %d\n", c.Step, c.Argv, c.Target.Namespaces, c.Target.PID)
		if c.Step == "restart" && failures > 0 {
			failures--
			return nodeexec.Result{ExitCode: 1, Output: []byte("unit busy")}, nil
		}
		return nodeexec.Result{}, nil
	})
	runner, err := nodeexec.NewRunner(host, nodeexec.RunnerOptions{JournalDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := runner.Run(context.Background(), plan)
	fmt.Println(out.State, err)
	for _, s := range out.Steps {
		fmt.Println(s.Name, s.State, "attempts:", s.Attempts)
	}
	again, _ := runner.Run(context.Background(), plan)
	fmt.Println("second run:", again.State, "runs recorded:", again.Runs)

	// Bad input is refused before anything runs.
	plan.Steps[0].Argv = nil
	_, err = runner.Run(context.Background(), plan)
	var verr *nodeexec.ValidationError
	fmt.Println(errors.Is(err, nodeexec.ErrInvalidPlan), errors.As(err, &verr) && verr.Field == "steps[0].argv")
	// Output:
	// host runs stage [cp -a /staging/. /] in [mount uts ipc net] of PID 1
	// host runs restart [systemctl restart kubelet] in [mount uts ipc net] of PID 1
	// host runs restart [systemctl restart kubelet] in [mount uts ipc net] of PID 1
	// Succeeded <nil>
	// stage Succeeded attempts: 1
	// restart Succeeded attempts: 2
	// second run: Succeeded runs recorded: 1
	// true true
}

func ExampleShellArgv() {
	// The script is constant; the user-supplied path is $1 and is never
	// parsed by the shell.
	fmt.Printf("%q\n", nodeexec.ShellArgv(`cp -a -- "$1"/. /`, "/staging/x; rm -rf /"))
	// Output:
	// ["/bin/sh" "-c" "cp -a -- \"$1\"/. /" "sh" "/staging/x; rm -rf /"]
}

func ExampleRequiredCapabilities() {
	fmt.Println(nodeexec.RequiredCapabilities(nodeexec.DefaultNamespaces()))
	fmt.Println(nodeexec.RequiredCapabilities([]nodeexec.Namespace{nodeexec.NamespaceUTS}))
	// Output:
	// [SYS_ADMIN SYS_CHROOT SYS_PTRACE]
	// [SYS_ADMIN SYS_PTRACE]
}

// An operator takes back a plan that succeeded: the steps are undone in
// reverse order, the verify step (NothingToUndo) is passed over, and the
// journal makes a second request a no-op.
func ExampleRunner_Rollback() {
	dir, _ := os.MkdirTemp("", "nodeexec-rollback-example")
	defer os.RemoveAll(dir)

	plan := nodeexec.Plan{
		Name: "upgrade-worker-1", Node: "worker-1",
		Steps: []nodeexec.Step{
			{Name: "kubelet-config", Argv: []string{"kubeadm", "upgrade", "node"}, Idempotent: true,
				Rollback: []string{"cp", "-a", "/backup/config.yaml", "/var/lib/kubelet/config.yaml"}},
			// A unit the upgrader pod depends on is replaced and restarted
			// in one step (nodeexec/kubeadm's scripts do it in shell), and
			// its rollback restarts it too: it is never left stopped.
			{Name: "kubelet", Argv: []string{"replace-and-restart", "kubelet", "/staging/kubelet"}, Idempotent: true,
				Backup:   []string{"cp", "-a", "/usr/bin/kubelet", "/backup/kubelet"},
				Rollback: []string{"replace-and-restart", "kubelet", "/backup/kubelet"}},
			{Name: "verify", Argv: []string{"kubelet", "--version"}, Idempotent: true, NothingToUndo: true},
		},
	}
	host := nodeexec.ExecutorFunc(func(_ context.Context, c nodeexec.Command) (nodeexec.Result, error) {
		if c.Phase == nodeexec.PhaseRollback {
			fmt.Println("host runs", c.Step, c.Phase, c.Argv)
		}
		return nodeexec.Result{}, nil
	})
	runner, _ := nodeexec.NewRunner(host, nodeexec.RunnerOptions{JournalDir: dir})
	out, _ := runner.Run(context.Background(), plan)
	fmt.Println("run:", out.State)

	out, err := runner.Rollback(context.Background(), plan)
	fmt.Println("rollback:", out.State, err)
	for _, s := range out.Steps {
		fmt.Println(" ", s.Name, s.State)
	}
	again, err := runner.Rollback(context.Background(), plan)
	fmt.Println("again:", again.State, err)

	// A plan that never ran here has nothing to undo.
	plan.Name = "never-ran"
	_, err = runner.Rollback(context.Background(), plan)
	fmt.Println(errors.Is(err, nodeexec.ErrNoJournal))
	// Output:
	// run: Succeeded
	// host runs kubelet rollback [replace-and-restart kubelet /backup/kubelet]
	// host runs kubelet-config rollback [cp -a /backup/config.yaml /var/lib/kubelet/config.yaml]
	// rollback: RolledBack <nil>
	//   kubelet-config RolledBack
	//   kubelet RolledBack
	//   verify Succeeded
	// again: RolledBack <nil>
	// true
}
