package nodepod_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// FuzzKubeadmPlans feeds kubeadm's four plan constructors hostile configurations
// (names, versions, paths, arguments): none panics or takes more than 2
// seconds, every refusal wraps kubeadm.ErrInvalidConfig (or the plan's
// ErrInvalidPlan, or a version error of CheckUpgrade), and every plan
// returned validates and builds into a pod.
func FuzzKubeadmPlans(f *testing.F) {
	f.Add("n-0", "", "v1.30.4", "v1.31.1", "/var/lib/upgradekit/staging", "max-pods", "110", "kube-apiserver", "3.5.15-0", "audit-log-maxage", "30")
	f.Add("", "../x", "1.30", "v2.0.0", "relative", "", "\n", "etcd", "a/b", "--x", "\x00")
	f.Add("N", "p", "v1.31.1", "v1.30.4", "/", "a=b", "c d", "nope", " ", "-", "")
	f.Fuzz(func(t *testing.T, node, name, from, to, dir, argName, argValue, component, tag, cpArg, cpValue string) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				panic(fmt.Sprintf("no answer within 2s for %q", []string{node, name, from, to, dir, argName, argValue, component, tag, cpArg, cpValue}))
			}
		}()
		ok := func(what string, p nodeexec.Plan, err error) {
			if err != nil {
				var verr *kubeadm.VersionError
				if !errors.Is(err, kubeadm.ErrInvalidConfig) && !errors.Is(err, nodeexec.ErrInvalidPlan) && !errors.As(err, &verr) && !errors.Is(err, kubeadm.ErrInvalidVersion) {
					t.Fatalf("%s: untyped error: %v", what, err)
				}
				return
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("%s: returned an invalid plan: %v", what, err)
			}
			if _, err := nodepod.Build(p, nodepod.WithImage("img"), nodepod.WithRunnerCommand("/upgrader", "run")); err != nil {
				t.Fatalf("%s: its pod cannot be built: %v", what, err)
			}
		}
		p, err := kubeadm.NewPlan(kubeadm.Config{PlanName: name, Node: node, Role: kubeadm.RoleWorker, FromVersion: from, ToVersion: to, StagingDir: dir})
		ok("NewPlan", p, err)
		p, err = kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{PlanName: name, Node: node, BackupDir: dir, Desired: []kubeadm.KubeletArg{{Name: argName, Value: argValue}}})
		ok("NewKubeletArgsPlan", p, err)
		p, err = kubeadm.NewControlPlaneConfigPlan(kubeadm.ControlPlaneConfig{PlanName: name, Node: node, ManifestDir: dir,
			Expect: []kubeadm.ManifestExpectation{{Component: component, ImageTag: tag, Args: []kubeadm.KubeletArg{{Name: cpArg, Value: cpValue}}}}})
		ok("NewControlPlaneConfigPlan", p, err)
		p, err = kubeadm.NewFilesPlan(kubeadm.FilesConfig{PlanName: name, Node: node, Files: []kubeadm.File{{Path: dir, Content: []byte(cpValue), Permissions: argValue, Owner: argName}}})
		ok("NewFilesPlan", p, err)
	})
}
