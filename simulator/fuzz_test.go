package simulator

import (
	"context"
	"path"
	"strings"
	"testing"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// FuzzHostRun checks that the simulated host never panics and never
// succeeds silently: exit code 0 only comes from a program it interprets.
func FuzzHostRun(f *testing.F) {
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.30.4", ToVersion: "v1.31.2"})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range plan.Steps {
		for _, argv := range [][]string{s.Argv, s.Check, s.Backup, s.Rollback} {
			if len(argv) > 0 {
				f.Add(strings.Join(argv, "\x00"))
			}
		}
	}
	f.Add("rm\x00-rf\x00/")
	f.Add("nsenter\x00--target\x001\x00--mount\x00--\x00systemctl\x00stop\x00kubelet")
	f.Add("/bin/sh\x00-c\x00echo hi\x00sh")
	known := map[string]bool{"systemctl": true, "cmp": true, "kubeadm": true, "kubelet": true, "kubectl": true, "containerd": true, "sh": true}
	f.Fuzz(func(t *testing.T, joined string) {
		h, err := NewHost("cp-0", strategy.RoleControlPlane, "v1.30.4")
		if err != nil {
			t.Fatal(err)
		}
		h.Stage(Staging{Kubernetes: "v1.31.2", Containerd: "2.0.5", CNI: "v1.7.1"})
		argv := strings.Split(joined, "\x00")
		res, err := h.Run(context.Background(), nodeexec.Command{Step: "s", Phase: nodeexec.PhaseRun, Argv: argv,
			Env: []string{"UPGRADEKIT_FILE_CONTENT=x"}})
		if err != nil {
			t.Fatalf("Run returned an error for a command that ran: %v", err)
		}
		inner := stripNsenter(argv)
		if res.ExitCode == 0 && (len(inner) == 0 || !known[path.Base(inner[0])]) {
			t.Fatalf("%q succeeded but is not a command the host interprets", argv)
		}
		if res.ExitCode == 0 && path.Base(inner[0]) == "sh" {
			if _, ok := knownScripts()[inner[2]]; !ok {
				t.Fatalf("unknown script succeeded: %q", argv)
			}
		}
	})
}
