package kubeadmnode_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/kubeadmnode"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

func recordings(t *testing.T) map[string]kubeadmnode.Recording {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubeadmnode.RecordingsDir, "*.json"))
	require.NoError(t, err)
	out := map[string]kubeadmnode.Recording{}
	for _, f := range files {
		r, err := kubeadmnode.ReadRecording(f)
		require.NoError(t, err)
		require.Equal(t, filepath.Base(f), r.Scenario+".json")
		out[r.Scenario] = r
	}
	// The scenarios of realnode_test.go this test holds the fake to.
	// One set per upgrade make e2e-node runs (NODE_UPGRADES), named by the
	// target minor.
	for _, s := range []string{"first-control-plane", "worker-broken-containerd", "worker-files-kubelet-args"} {
		for _, to := range []string{"-v1-36", "-v1-37"} {
			require.Contains(t, out, s+to, "recording %s/%s.json", kubeadmnode.RecordingsDir, s+to)
		}
	}
	return out
}

// TestFakeMatchesRealNode runs each recorded real plan on a simulator.Host set
// up as the real node was and requires the same steps, states, exit codes
// and end state: the fake cannot drift from the real node unnoticed.
func TestFakeMatchesRealNode(t *testing.T) {
	for name, rec := range recordings(t) {
		t.Run(name, func(t *testing.T) {
			res, err := kubeadmnode.FakeRun(context.Background(), rec.Node, rec.Plan, testr.New(t))
			require.NoError(t, err)
			diffs := kubeadmnode.CompareWithFake(rec.Real, res)
			for _, d := range diffs {
				t.Errorf("%s", d)
			}
			if t.Failed() {
				for _, s := range res.Journal.Steps {
					t.Logf("fake %s: %s exit %d: %s", s.Name, s.State, s.ExitCode, s.Output)
				}
			}
		})
	}
}

// TestCompareWithFakeCatchesDrift plants one difference at a time in a
// recorded real run and requires the comparison to report exactly it.
func TestCompareWithFakeCatchesDrift(t *testing.T) {
	recs := recordings(t)
	run := func(t *testing.T, rec kubeadmnode.Recording) kubeadmnode.FakeResult {
		t.Helper()
		res, err := kubeadmnode.FakeRun(context.Background(), rec.Node, rec.Plan, testr.New(t))
		require.NoError(t, err)
		require.Empty(t, kubeadmnode.CompareWithFake(rec.Real, res), "the unmutated recording matches")
		return res
	}
	cpRes := run(t, recs["first-control-plane-v1-37"])
	brokenRes := run(t, recs["worker-broken-containerd-v1-37"])
	argsRes := run(t, recs["worker-files-kubelet-args-v1-37"])
	step := func(j *nodeexec.Journal, name string) *nodeexec.StepRecord {
		for i := range j.Steps {
			if j.Steps[i].Name == name {
				return &j.Steps[i]
			}
		}
		t.Fatalf("no step %s", name)
		return nil
	}
	for _, tc := range []struct {
		name   string
		rec    string
		mutate func(r *nodeexec.Journal, real *kubeadmnode.RealNode)
		want   []kubeadmnode.Difference
	}{{
		name:   "plan state",
		rec:    "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) { j.State = nodeexec.PlanStateNeedsAttention },
		want:   []kubeadmnode.Difference{{What: "plan", Name: "state", Real: "NeedsAttention", Fake: "Succeeded"}},
	}, {
		name:   "another plan",
		rec:    "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) { j.Fingerprint = "sha256:other" },
		want:   []kubeadmnode.Difference{{What: "plan", Name: "fingerprint", Real: "sha256:other", Fake: cpRes.Journal.Fingerprint}},
	}, {
		name: "a step only the fake ran",
		rec:  "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			j.Steps = append(j.Steps[:5:5], j.Steps[6:]...) // images
		},
		want: []kubeadmnode.Difference{{What: "step", Name: kubeadm.StepImages, Fake: "Succeeded"}},
	}, {
		name: "a step only the real node ran",
		rec:  "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			j.Steps = append(j.Steps, nodeexec.StepRecord{Name: "extra", State: nodeexec.StepStateSucceeded, Attempts: 1})
		},
		want: []kubeadmnode.Difference{{What: "step", Name: "extra", Real: "Succeeded"}},
	}, {
		name: "order",
		rec:  "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			j.Steps[2], j.Steps[3] = j.Steps[3], j.Steps[2]
		},
		want: []kubeadmnode.Difference{{What: "order",
			Real: "bundle,etcd-snapshot,cni-plugins,containerd,kubeadm-binary,images,kubeadm-config,kubeadm-upgrade,kubectl-binary,kubelet,verify",
			Fake: "bundle,etcd-snapshot,containerd,cni-plugins,kubeadm-binary,images,kubeadm-config,kubeadm-upgrade,kubectl-binary,kubelet,verify"}},
	}, {
		name: "skipped where the fake ran the step (check semantics)",
		rec:  "first-control-plane-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			step(j, kubeadm.StepKubeadmBinary).State = nodeexec.StepStateSkipped
		},
		want: []kubeadmnode.Difference{{What: "state", Name: kubeadm.StepKubeadmBinary, Real: "Skipped", Fake: "Succeeded"}},
	}, {
		name: "exit code of the failed step",
		rec:  "worker-broken-containerd-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			step(j, kubeadm.StepContainerd).ExitCode = 2
			j.Failure.ExitCode = 2
		},
		want: []kubeadmnode.Difference{
			{What: "exit-code", Name: kubeadm.StepContainerd, Real: "2", Fake: "1"},
			{What: "failure", Real: "step containerd run exit 2", Fake: "step containerd run exit 1"},
		},
	}, {
		name: "attempts of the failed step",
		rec:  "worker-broken-containerd-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			step(j, kubeadm.StepContainerd).Attempts = 1
		},
		want: []kubeadmnode.Difference{{What: "attempts", Name: kubeadm.StepContainerd, Real: "1", Fake: "3"}},
	}, {
		name: "failed where the fake rolled back",
		rec:  "worker-broken-containerd-v1-37",
		mutate: func(j *nodeexec.Journal, _ *kubeadmnode.RealNode) {
			j.State = nodeexec.PlanStateFailed
			step(j, kubeadm.StepContainerd).State = nodeexec.StepStateFailed
		},
		want: []kubeadmnode.Difference{
			{What: "plan", Name: "state", Real: "Failed", Fake: "RolledBack"},
			{What: "state", Name: kubeadm.StepContainerd, Real: "Failed", Fake: "RolledBack"},
		},
	}, {
		name:   "version",
		rec:    "worker-broken-containerd-v1-37",
		mutate: func(_ *nodeexec.Journal, r *kubeadmnode.RealNode) { r.Versions["containerd"] = "2.0.0" },
		want:   []kubeadmnode.Difference{{What: "version", Name: "containerd", Real: "2.0.0", Fake: "1.6.20~ds1"}},
	}, {
		name:   "unit",
		rec:    "worker-broken-containerd-v1-37",
		mutate: func(_ *nodeexec.Journal, r *kubeadmnode.RealNode) { r.UnitsActive["containerd"] = false },
		want:   []kubeadmnode.Difference{{What: "unit", Name: "containerd", Real: "inactive", Fake: "active"}},
	}, {
		name: "file content",
		rec:  "worker-files-kubelet-args-v1-37",
		mutate: func(_ *nodeexec.Journal, r *kubeadmnode.RealNode) {
			r.Files[kubeadm.DefaultKubeadmFlagsFile] = "KUBELET_KUBEADM_ARGS=\"--max-pods=150\"\n"
		},
		want: []kubeadmnode.Difference{{What: "file", Name: kubeadm.DefaultKubeadmFlagsFile, Real: "KUBELET_KUBEADM_ARGS=\"--max-pods=150\"\n",
			Fake: argsRes.Written[kubeadm.DefaultKubeadmFlagsFile]}},
	}, {
		name:   "file the fake does not have",
		rec:    "worker-files-kubelet-args-v1-37",
		mutate: func(_ *nodeexec.Journal, r *kubeadmnode.RealNode) { r.Files["/etc/other"] = "x" },
		want:   []kubeadmnode.Difference{{What: "file", Name: "/etc/other", Real: "x", Fake: "(absent)"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := recordings(t)[tc.rec] // a fresh copy to mutate
			tc.mutate(&rec.Real.Journal, &rec.Real)
			res := map[string]kubeadmnode.FakeResult{"first-control-plane-v1-37": cpRes, "worker-broken-containerd-v1-37": brokenRes, "worker-files-kubelet-args-v1-37": argsRes}[tc.rec]
			require.Empty(t, cmp.Diff(tc.want, kubeadmnode.CompareWithFake(rec.Real, res)))
		})
	}
}

// TestCompareWithFakeIgnores: what the comparison documents it does not
// compare does not make a difference.
func TestCompareWithFakeIgnores(t *testing.T) {
	rec := recordings(t)["worker-files-kubelet-args-v1-37"]
	res, err := kubeadmnode.FakeRun(context.Background(), rec.Node, rec.Plan, testr.New(t))
	require.NoError(t, err)
	j := &rec.Real.Journal
	j.Runs = 7
	for i := range j.Steps {
		j.Steps[i].Output, j.Steps[i].Note = "other wording", "other note"
		if j.Steps[i].State == nodeexec.StepStateSucceeded {
			j.Steps[i].Attempts, j.Steps[i].Resumed = 5, 2
		}
	}
	require.Empty(t, kubeadmnode.CompareWithFake(rec.Real, res))
}

// TestFakeRunImagesStep: the fake host runs the images step
// (kubeadm.Config.ImportImages) as the plan's script does: an archive is
// imported, a bundle without one fails the step.
func TestFakeRunImagesStep(t *testing.T) {
	rec := recordings(t)["first-control-plane-v1-37"]
	for _, images := range []bool{true, false} {
		node := rec.Node
		node.Bundle.Images = images
		plan := rec.Plan
		// The bundle step would refuse the missing images directory first.
		plan.Steps = append([]nodeexec.Step{}, plan.Steps[1:]...)
		res, err := kubeadmnode.FakeRun(context.Background(), node, plan, testr.New(t))
		require.NoError(t, err)
		s, ok := res.Journal.Step(kubeadm.StepImages)
		require.True(t, ok)
		if images {
			require.Equal(t, nodeexec.StepStateSucceeded, s.State, s.Output)
			require.Equal(t, "images: imported 1 archive(s)", s.Output)
			continue
		}
		require.Equal(t, nodeexec.StepStateFailed, s.State)
		require.Equal(t, 1, s.ExitCode)
		require.Equal(t, "images: no image archive (*.tar) in "+path.Join(kubeadm.DefaultStagingDir, "images"), s.Output)
	}
}

func TestFakeRunResult(t *testing.T) {
	rec := recordings(t)["worker-files-kubelet-args-v1-37"]
	res, err := kubeadmnode.FakeRun(context.Background(), rec.Node, rec.Plan, testr.New(t))
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, res.Journal.State)
	require.Equal(t, "v1.37.2", res.Versions["kubelet"])
	require.Equal(t, map[string]bool{"containerd": true, "kubelet": true}, res.UnitsActive)
	require.Equal(t, "vm.swappiness = 10\n", res.Written["/etc/sysctl.d/99-upgradekit.conf"])
	require.NotContains(t, res.Written, kubeadm.DefaultStagingDir+"/kubernetes/kubeadm", "staged before the plan, not written by it")
}

func TestFakeRunRefuses(t *testing.T) {
	rec := recordings(t)["worker-broken-containerd-v1-37"]
	for name, mutate := range map[string]func(n *kubeadmnode.FakeNode){
		"role":                           func(n *kubeadmnode.FakeNode) { n.Role = "boss" },
		"another node":                   func(n *kubeadmnode.FakeNode) { n.Name = "w2" },
		"no target version":              func(n *kubeadmnode.FakeNode) { n.ToVersion = "" },
		"crashing containerd unstaged":   func(n *kubeadmnode.FakeNode) { n.Bundle.Containerd = false },
		"a version fake.NewHost refuses": func(n *kubeadmnode.FakeNode) { n.FromVersion = "latest" },
	} {
		t.Run(name, func(t *testing.T) {
			node := rec.Node
			mutate(&node)
			_, err := kubeadmnode.FakeRun(context.Background(), node, rec.Plan, testr.New(t))
			require.ErrorIs(t, err, kubeadmnode.ErrFakeRun)
		})
	}
}

func TestRecordReal(t *testing.T) {
	rec := recordings(t)["worker-broken-containerd-v1-37"]
	dir := t.TempDir()
	t.Setenv(kubeadmnode.RecordRealEnvVar, "")
	written, err := kubeadmnode.RecordReal(dir, rec)
	require.NoError(t, err)
	require.False(t, written)
	_, err = os.Stat(filepath.Join(dir, rec.Scenario+".json"))
	require.ErrorIs(t, err, os.ErrNotExist)

	t.Setenv(kubeadmnode.RecordRealEnvVar, "1")
	written, err = kubeadmnode.RecordReal(dir, rec)
	require.NoError(t, err)
	require.True(t, written)
	got, err := kubeadmnode.ReadRecording(filepath.Join(dir, rec.Scenario+".json"))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(rec, got))

	bad := rec
	bad.Scenario = "../escape"
	_, err = kubeadmnode.RecordReal(dir, bad)
	require.Error(t, err)
	bad = rec
	bad.Real.Journal.Fingerprint = "sha256:other"
	_, err = kubeadmnode.RecordReal(dir, bad)
	require.ErrorContains(t, err, "was not written for the recorded plan")
}
