package kubeadm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestControlPlaneConfigPlan: the plan's shape and its refusals.
func TestControlPlaneConfigPlan(t *testing.T) {
	ok := ControlPlaneConfig{Node: "cp-0", Expect: []ManifestExpectation{{Component: "kube-apiserver", Args: []KubeletArg{{Name: "audit-log-maxage", Value: "30"}}}}}
	p, err := NewControlPlaneConfigPlan(ok)
	require.NoError(t, err)
	require.Equal(t, []string{StepControlPlaneConfig, StepControlPlaneConfigVerify}, names(p))
	require.Equal(t, []string{"/usr/bin/kubeadm", "upgrade", "node", "phase", "control-plane", "--certificate-renewal=false"}, p.Steps[0].Argv)
	require.NotEmpty(t, p.Steps[0].Backup)
	require.NotEmpty(t, p.Steps[0].Rollback)

	for _, tc := range []struct {
		name  string
		edit  func(*ControlPlaneConfig)
		field string
	}{
		{"no expectation", func(c *ControlPlaneConfig) { c.Expect = nil }, "expect"},
		{"unknown component", func(c *ControlPlaneConfig) { c.Expect[0].Component = "kube-proxy" }, "expect[0].component"},
		{"a component twice", func(c *ControlPlaneConfig) { c.Expect = append(c.Expect, c.Expect[0]) }, "expect[1].component"},
		{"bad arg name", func(c *ControlPlaneConfig) { c.Expect[0].Args[0].Name = "--x" }, "expect[0].args[0].name"},
		{"value with a line break", func(c *ControlPlaneConfig) { c.Expect[0].Args[0].Value = "a\nb" }, "expect[0].args[0].value"},
		{"bad image tag", func(c *ControlPlaneConfig) { c.Expect[0].ImageTag = "a/b" }, "expect[0].imageTag"},
		{"bad node", func(c *ControlPlaneConfig) { c.Node = "Bad_Node" }, "node"},
		{"root backup dir", func(c *ControlPlaneConfig) { c.BackupDir = "/" }, "backupDir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Expect = []ManifestExpectation{{Component: "kube-apiserver", Args: []KubeletArg{{Name: "audit-log-maxage", Value: "30"}}}}
			tc.edit(&c)
			_, err := NewControlPlaneConfigPlan(c)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.field)
		})
	}
}

// TestControlPlaneConfigVerifyForReal runs the verify step's script
// against manifests in a temporary directory and a stand-in kubectl that
// reports the mirror pods' Ready status.
func TestControlPlaneConfigVerifyForReal(t *testing.T) {
	const apiserver = `apiVersion: v1
kind: Pod
spec:
  containers:
  - command:
    - kube-apiserver
    - --audit-log-maxage=30
    - --authorization-mode=Node,RBAC
    - --odd=.*$(id)
    image: registry.k8s.io/kube-apiserver:v1.31.1
`
	const etcd = `spec:
  containers:
  - command:
    - etcd
    - --quota-backend-bytes=8589934592
    image: registry.k8s.io/etcd:3.5.15-0
`
	run := func(t *testing.T, ready string, expect ...ManifestExpectation) (int, string) {
		dir := t.TempDir()
		manifests := filepath.Join(dir, "manifests")
		bin := filepath.Join(dir, "bin")
		require.NoError(t, os.MkdirAll(manifests, 0o755))
		require.NoError(t, os.MkdirAll(bin, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(manifests, "kube-apiserver.yaml"), []byte(apiserver), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(manifests, "etcd.yaml"), []byte(etcd), 0o600))
		// kubectl ... get pod NAME -o ...: True, unless NAME is the one
		// given as not ready.
		kubectl := "#!/bin/sh\nfor a; do case \"$a\" in " + ready + ") printf False; exit 0;; esac; done\nprintf True\n"
		require.NoError(t, os.WriteFile(filepath.Join(bin, "kubectl"), []byte(kubectl), 0o755))
		p, err := NewControlPlaneConfigPlan(ControlPlaneConfig{Node: "cp-0", BinDir: bin, ManifestDir: manifests, Expect: expect})
		require.NoError(t, err)
		argv := step(t, p, StepControlPlaneConfigVerify).Argv
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	api := func(args ...KubeletArg) ManifestExpectation {
		return ManifestExpectation{Component: "kube-apiserver", Args: args, ImageTag: "v1.31.1"}
	}
	for _, tc := range []struct {
		name   string
		ready  string
		expect []ManifestExpectation
		code   int
		out    string
	}{
		{"everything as desired", "none", []ManifestExpectation{
			api(KubeletArg{Name: "audit-log-maxage", Value: "30"}, KubeletArg{Name: "odd", Value: ".*$(id)"}),
			{Component: "etcd", Args: []KubeletArg{{Name: "quota-backend-bytes", Value: "8589934592"}}, ImageTag: "3.5.15-0"},
		}, 0, "control plane configuration verified on cp-0"},
		{"a missing argument", "none", []ManifestExpectation{api(KubeletArg{Name: "profiling", Value: "false"})}, 1, "has no argument --profiling=false"},
		{"another value", "none", []ManifestExpectation{api(KubeletArg{Name: "audit-log-maxage", Value: "7"})}, 1, "has no argument --audit-log-maxage=7"},
		{"a pattern is matched as text", "none", []ManifestExpectation{api(KubeletArg{Name: "authorization-mode", Value: ".*"})}, 1, "has no argument --authorization-mode=.*"},
		{"another image tag", "none", []ManifestExpectation{{Component: "etcd", ImageTag: "3.5.16-0"}}, 1, "want tag 3.5.16-0"},
		{"a manifest missing", "none", []ManifestExpectation{{Component: "kube-scheduler"}}, 1, "kube-scheduler.yaml is missing"},
		{"the mirror pod not Ready", "etcd-cp-0", []ManifestExpectation{{Component: "etcd", ImageTag: "3.5.15-0"}}, 1, "pod kube-system/etcd-cp-0 is not Ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, tc.ready, tc.expect...)
			require.Equal(t, tc.code, code, out)
			require.Contains(t, out, tc.out)
		})
	}
}
