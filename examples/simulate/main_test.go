package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/examples/cli"
)

// TestDefaultDemo runs the README's command (with a timeline) and checks the
// preview, the live progress, the summary and the timeline.
func TestDefaultDemo(t *testing.T) {
	timeline := filepath.Join(t.TempDir(), "rollout.html")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-progress-bar=false", "-timeline", timeline}, &out, &bytes.Buffer{}))
	s := out.String()
	require.Contains(t, s, "Cluster demo: 3 control plane machines, 2 machine deployments, v1.35.4 -> v1.36.3",
		"the demo runs Cluster API v1.14's newest supported step")
	require.Contains(t, s, "Plan (nothing has happened yet):")
	require.Contains(t, s, "demo-control-plane-0  control-plane  InPlace  v1.35.4 -> v1.36.3  in place by kubeadm: machine.spec.version")
	require.Contains(t, s, "infrastructure.spec.customImage (InfrastructureImage)", "the preview says why md-1 is replaced")
	require.Contains(t, s, "demo-control-plane-0     InPlace kubeadm-upgrade        Succeeded")
	require.Contains(t, s, "demo-md-1-4              Replace drain-and-delete-old   Replaced")
	require.Contains(t, s, "Summary: 5 Replace, 8 InPlace in 13 batches")
	require.Contains(t, s, "Invariants held")

	machines := []string{"demo-control-plane-0", "demo-control-plane-1", "demo-control-plane-2"}
	for _, md := range []string{"demo-md-0-", "demo-md-1-"} {
		for i := 0; i < 5; i++ {
			machines = append(machines, md+string(rune('0'+i)))
		}
	}
	checkTimeline(t, timeline, machines, false)
}

// TestDemoReplacesControlPlanesWhereClusterAPIWould: from v1.30 to v1.31
// KubeadmControlPlane turns ControlPlaneKubeletLocalMode on, which no
// updater applies in place, so the demo replaces the control planes, as
// Cluster API does, and the workers still go in place.
func TestDemoReplacesControlPlanesWhereClusterAPIWould(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-progress-bar=false", "-from", "v1.30.4", "-to", "v1.31.2", "-new-image", ""}, &out, &bytes.Buffer{}))
	s := out.String()
	require.Contains(t, s, "demo-control-plane-0  control-plane  Replace  v1.30.4 -> v1.31.2  in place not possible, falling back: cannot update in place: "+
		"1 change not covered: bootstrap.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode (ControlPlaneConfig)")
	require.Contains(t, s, "demo-md-0-0           md-0           InPlace  v1.30.4 -> v1.31.2  in place by kubeadm: machine.spec.version")
	require.Contains(t, s, "Summary: 10 InPlace, 3 Replace in 13 batches")
	require.Contains(t, s, "Invariants held")
}

// checkTimeline parses the SVG out of the page as XML and finds one lane
// per machine (and a failure mark when expected).
func checkTimeline(t *testing.T, path string, machines []string, wantFailure bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(raw)
	require.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))
	start, end := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	require.True(t, start > 0 && end > start, "the page holds an SVG")
	var svg struct {
		Texts []string `xml:"text"`
		Rects []struct {
			Fill  string `xml:"fill,attr"`
			Title string `xml:"title"`
		} `xml:"rect"`
	}
	require.NoError(t, xml.Unmarshal([]byte(page[start:end+len("</svg>")]), &svg), "the SVG is well-formed XML")
	labels := strings.Join(svg.Texts, "\n")
	for _, m := range machines {
		require.Contains(t, labels, m+" (", "a lane for %s", m)
	}
	failed := false
	for _, r := range svg.Rects {
		if r.Fill == "#d64545" {
			failed = true
		}
	}
	require.Equal(t, wantFailure, failed)
	require.Equal(t, wantFailure, strings.Contains(labels, "✗"))
}

func TestDemoWithAFailure(t *testing.T) {
	timeline := filepath.Join(t.TempDir(), "rollout.html")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=2", "-new-image", "",
		"-fail", "demo-md-0-1/kubeadm-upgrade=50", "-timeline", timeline}, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, errMachinesFailed, out.String())
	require.Contains(t, out.String(), "failed: demo-md-0-1")
	checkTimeline(t, timeline, []string{"demo-control-plane-0", "demo-md-0-0", "demo-md-0-1"}, true)
}

// TestDemoStallsAtAFailureAsClusterAPIDoes: a machine whose update fails
// for good stops its machine deployment, as Cluster API keeps it Updating
// (unavailable) and retries it; the other deployment goes on. The
// timeline draws the stall. --on-failure continue plays on past it.
func TestDemoStallsAtAFailureAsClusterAPIDoes(t *testing.T) {
	timeline := filepath.Join(t.TempDir(), "rollout.html")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-fail", "demo-md-0-1/kubeadm-upgrade=9", "-timeline", timeline}, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, errMachinesFailed, out.String())
	s := out.String()
	held := "(1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 1)"
	for _, m := range []string{"demo-md-0-2", "demo-md-0-3", "demo-md-0-4"} {
		require.Contains(t, s, "Held back: "+m+" "+held)
		require.NotContains(t, s, m+"              InPlace", "%s never starts", m)
	}
	require.Contains(t, s, "  09:55:10  batch 5  demo-md-0-1              InPlace failed-update-retried  Blocked since 09:30:10: its update failed; "+
		"Cluster API keeps the Machine Updating and retries it, so it stays unavailable\n")
	require.Contains(t, s, "demo-md-1-4              Replace drain-and-delete-old   Replaced", "the other machine deployment goes on")
	require.Contains(t, s, "Stalled where Cluster API would: it keeps retrying demo-md-0-1 until that succeeds; --on-failure continue plays on as if it were fixed.")
	require.Contains(t, s, "After the failure nothing started that Cluster API would not have started.")

	page, err := os.ReadFile(timeline)
	require.NoError(t, err)
	d := parseSVG(t, string(page))
	var stalls []string
	for _, r := range d.Rects {
		if r.Fill == "#8a8a8a" /* blocked */ && strings.Contains(r.Title, "Blocked since 09:30:10") {
			stalls = append(stalls, r.Title)
		}
	}
	require.Equal(t, []string{
		"md-0 stalled at demo-md-0-1: Blocked since 09:30:10: its update failed; Cluster API keeps the Machine Updating and retries it, so it stays unavailable",
		"demo-md-0-1: Blocked since 09:30:10: its update failed; Cluster API keeps the Machine Updating and retries it, so it stays unavailable",
	}, stalls, "the stall is drawn in md-0's lane and demo-md-0-1's")

	out.Reset()
	err = run(context.Background(), []string{"-progress-bar=false", "-fail", "demo-md-0-1/kubeadm-upgrade=9", "-on-failure", "continue"}, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, errMachinesFailed, out.String())
	s = out.String()
	require.NotContains(t, s, "Held back")
	require.NotContains(t, s, "failed-update-retried")
	require.NotContains(t, s, "Stalled where")
	require.Contains(t, s, "demo-md-0-4              InPlace verify                 Succeeded")
}

// TestREADMEShowsTheStall: the README's stalled demo is what the command
// prints.
func TestREADMEShowsTheStall(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)`go run ./examples/simulate ([^`]*)` ends with[^`]*```\n(.*?)\n```").FindSubmatch(readme)
	require.NotNil(t, m, "README.md shows the demo stalling")
	var out bytes.Buffer
	err = run(context.Background(), append([]string{"-progress-bar=false"}, strings.Fields(string(m[1]))...), &out, &bytes.Buffer{})
	require.Equal(t, exitFailed, exitCode(err, &bytes.Buffer{}), "README.md says it exits 3")
	require.Contains(t, out.String(), string(m[2])+"\n")
	require.Contains(t, string(m[2]), "Held back: demo-md-0-2")
}

func TestDemoWithACrash(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=2", "-new-image", "",
		"-crash", "demo-md-0-0/containerd,demo-md-0-1/kubelet"}, &out, &bytes.Buffer{})
	require.NoError(t, err, out.String())
	s := out.String()
	require.Contains(t, s, "demo-md-0-0              InPlace runner-restart         Crashed")
	require.Contains(t, s, "Summary: 3 InPlace in 3 batches")
	require.Contains(t, s, "; 2 upgrader restarts resumed from the journal")
	require.Contains(t, s, "Invariants held")
	require.NotContains(t, s, "failed:")
}

// TestDemoHoldsBackAfterAFailureLeftCordoned: even carrying on past
// failures, a machine left cordoned holds its group's slot.
func TestDemoHoldsBackAfterAFailureLeftCordoned(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=3", "-new-image", "",
		"-fail", "demo-md-0-0/kubectl-binary=50", "-on-failure", "continue"}, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, errMachinesFailed, out.String())
	s := out.String()
	require.Contains(t, s, "Left cordoned for a person (failed without a rollback): demo-md-0-0")
	require.Contains(t, s, "Held back: demo-md-0-1 (1 machines of the group are left cordoned after failures; the limit is 1)")
	require.Contains(t, s, "Invariants held")
}

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-progress-bar", "-control-planes", "1", "-workers", "md-0=1"}, &out, &bytes.Buffer{}))
	require.Contains(t, out.String(), "  [##############################] 2/2 machines\n")
	require.Contains(t, out.String(), "demo-md-0-0", "step lines are printed on a terminal too")
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workers", "md-0"}, {"-workers", "md-0=0"}, {"-fail", "node-step=1"}, {"-strategy", "yolo"},
		{"-control-planes", "0"}, {"-to", "latest"}, {"-from", "latest"}, {"extra"}, {"-crash", "node-step"},
		{"-updater", "kubeadm"}, {"-updater"}, {"-no-such-flag"},
		// Names a flag refers to must exist: ignored, they would make a
		// run look fault-free.
		{"-fail", "nosuch/kubelet=1"}, {"-fail", "demo-md-0-0/nosuchstep=1"}, {"-crash", "x/kubelet"},
		{"-crash", "demo-md-0-0/nosuchstep"}, {"-new-image", "nosuch"}, {"-flaky", "1.5"},
		{"-on-failure", "retry"}, {"-on-failure"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, &bytes.Buffer{}, &stderr)
		require.Error(t, err, "%v", args)
		require.Equal(t, exitUsage, exitCode(err, &stderr), "%v: a usage error exits 2", args)
		require.Equal(t, 1, strings.Count(stderr.String(), err.Error()), "%v: the error is printed once: %s", args, stderr.String())
	}
}

// TestFindingsHaveTheirOwnExitCodes: failed machines exit 3, blocked
// ones 4, and a run that updated nothing does not claim that the
// invariants held.
func TestFindingsHaveTheirOwnExitCodes(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", "",
		"-fail", "demo-md-0-0/kubelet=50"}, &out, &bytes.Buffer{})
	require.Equal(t, exitFailed, exitCode(err, &bytes.Buffer{}), out.String())

	// inplace-only cannot replace the machines whose image changes: they
	// are blocked.
	out.Reset()
	err = run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=2",
		"-new-image", "md-0", "-strategy", "inplace-only"}, &out, &bytes.Buffer{})
	require.Equal(t, exitBlocked, exitCode(err, &bytes.Buffer{}), out.String())
	require.Contains(t, out.String(), "Blocked: 2 machines")

	// Nothing to do: exit 0, and no claim about invariants.
	out.Reset()
	err = run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=2",
		"-from", "v1.31.2", "-to", "v1.31.2"}, &out, &bytes.Buffer{})
	require.Equal(t, exitOK, exitCode(err, &bytes.Buffer{}), out.String())
	require.NotContains(t, out.String(), "Invariants held")
	require.Contains(t, out.String(), "Nothing was updated or replaced")
}

// TestSeedDrivesFlakyFailures: -flaky draws from -seed; the same seed gives
// the same run, another seed another.
func TestSeedDrivesFlakyFailures(t *testing.T) {
	summary := func(seed string) string {
		var out bytes.Buffer
		_ = run(context.Background(), []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=4", "-new-image", "",
			"-flaky", "0.2", "-seed", seed}, &out, &bytes.Buffer{})
		i := strings.Index(out.String(), "Summary:")
		require.GreaterOrEqual(t, i, 0, out.String())
		return out.String()[i:]
	}
	a := summary("1")
	require.Equal(t, a, summary("1"))
	differs := false
	for _, seed := range []string{"2", "3", "4", "5"} {
		differs = differs || summary(seed) != a
	}
	require.True(t, differs, "another seed, other failures")
}

func TestHelpExitsZero(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &stderr)
	require.ErrorIs(t, err, cli.ErrHelp)
	require.Equal(t, exitOK, exitCode(err, &stderr))
	require.Contains(t, stderr.String(), "--updater string")
	require.Contains(t, stderr.String(), "capi (a real capi.MachineUpdater")
	require.Equal(t, exitOK, exitCode(nil, &stderr))
	require.Equal(t, exitFailure, exitCode(errors.New("3 invariant violations"), &stderr))
}

// TestUpdaterCAPI runs the rollout with -updater capi: the in-place
// machines are updated by capi.MachineUpdater, and the timeline shows its
// answers.
func TestUpdaterCAPI(t *testing.T) {
	timeline := filepath.Join(t.TempDir(), "rollout.html")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-updater", "capi", "-control-planes", "1", "-workers", "md-0=2", "-new-image", "",
		"-crash", "demo-md-0-0/kubelet", "-timeline", timeline}, &out, &bytes.Buffer{})
	require.NoError(t, err, out.String())
	s := out.String()
	require.Contains(t, s, "In-place machines are updated by capi.MachineUpdater")
	require.Contains(t, s, "demo-control-plane-0     InPlace UpdateMachine/Upgrading Waiting")
	require.Contains(t, s, "demo-md-0-1              InPlace UpdateMachine/Succeeded Succeeded")
	require.Contains(t, s, "demo-md-0-0              InPlace runner-restart         Crashed")
	require.Contains(t, s, "Summary: 3 InPlace in 3 batches")
	require.Contains(t, s, "; 1 upgrader restarts resumed from the journal; 6 UpdateMachine calls")
	require.Contains(t, s, "Invariants held")
	checkTimeline(t, timeline, []string{"demo-control-plane-0", "demo-md-0-0", "demo-md-0-1"}, false)
}

func TestUpdaterCAPIWithAFailedStep(t *testing.T) {
	timeline := filepath.Join(t.TempDir(), "rollout.html")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-progress-bar=false", "-updater", "capi", "-control-planes", "1", "-workers", "md-0=2", "-new-image", "",
		"-fail", "demo-control-plane-0/kubelet=50", "-timeline", timeline}, &out, &bytes.Buffer{})
	require.ErrorIs(t, err, errMachinesFailed, out.String())
	s := out.String()
	require.Contains(t, s, "demo-control-plane-0     InPlace UpdateMachine/Failed   Failed")
	require.Contains(t, s, "failed: demo-control-plane-0")
	require.Contains(t, s, "Failed: demo-control-plane-0: in-place update failed: StepFailed: node demo-control-plane-0: step kubelet failed with exit code")
	require.Contains(t, s, "Held back: demo-md-0-0 (control plane machine demo-control-plane-0 failed: workers wait (version skew))")
	require.Contains(t, s, "Left cordoned for a person (failed without a rollback): demo-control-plane-0")
	require.Contains(t, s, "Invariants held")
	checkTimeline(t, timeline, []string{"demo-control-plane-0", "demo-md-0-0", "demo-md-0-1"}, true)
}

// TestOutputAsAnObject: -o json|yaml prints the simulation's result alone,
// as one Kubernetes-shaped object (apiVersion, kind, no nulls), with the
// same exit codes as the narration.
func TestOutputAsAnObject(t *testing.T) {
	args := []string{"-control-planes", "1", "-workers", "md-0=2", "-new-image", "", "-fail", "demo-md-0-1/kubeadm-upgrade=9"}
	for _, format := range []string{"json", "yaml"} {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"-o", format}, args...), &out, &bytes.Buffer{})
		require.ErrorIs(t, err, errMachinesFailed, "the exit code follows the result, whatever the format")
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(out.Bytes(), &obj), "%s: stdout is the object alone:\n%s", format, out.String())
		require.Equal(t, "cli.upgradekit.io/v1alpha1", obj["apiVersion"])
		require.Equal(t, "Simulation", obj["kind"])
		require.NotEmpty(t, obj["events"])
		require.Equal(t, []any{"demo-md-0-1"}, obj["failed"])
		require.NotContains(t, out.String(), "Rollout:", "no narration")
		require.NotContains(t, out.String(), "null")
	}
}
