package kubeadmnode

// Fidelity: run the plan a real node ran on a simulator.Host set up like that
// node was, and compare the two step by step, so that the simulated host
// (package fake) cannot drift from what real kubeadm, kubelet and
// containerd do.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// Bundle says what a node's staging directory holds besides the target
// version's kubeadm, kubelet and kubectl: StageOptions without the
// machine-specific image sources, so that it can be recorded.
type Bundle struct {
	Etcdctl    bool `json:"etcdctl,omitempty"`
	Containerd bool `json:"containerd,omitempty"`
	CNIPlugins bool `json:"cniPlugins,omitempty"`
	Images     bool `json:"images,omitempty"`
}

// BundleOf is the Bundle StageBundle stages for o.
func BundleOf(o StageOptions) Bundle {
	return Bundle{Etcdctl: o.Etcdctl, Containerd: o.Containerd, CNIPlugins: o.CNIPlugins, Images: len(o.Images) > 0}
}

// CrashingContainerd is what the real broken-containerd scenario stages in
// place of containerd: a program that answers `--version` as containerd
// CrashingContainerdVersion does and `config migrate` with a version 3
// configuration, but exits right after it starts.
const CrashingContainerd = `#!/bin/sh
case "$*" in
--version) echo "containerd github.com/containerd/containerd/v2 ` + CrashingContainerdVersion + ` crashing"; exit 0 ;;
*"config migrate"*) printf 'version = 3\n'; exit 0 ;;
esac
sleep 1
exit 1
`

// CrashingContainerdVersion is the version CrashingContainerd reports.
const CrashingContainerdVersion = "v2.4.2"

// FakeNode is a real node as it was before a plan ran, for FakeRun.
type FakeNode struct {
	// Name is the node name (the plan's Node).
	Name string `json:"name"`
	// Role is the plan's role: RoleFirstControlPlane and RoleControlPlane
	// make a control plane host, RoleWorker a worker.
	Role kubeadm.Role `json:"role"`
	// FromVersion is the Kubernetes version the node runs before the plan
	// (its kubeadm, kubelet, kubectl and, on a control plane, static
	// pods); ToVersion the version of the staged bundle.
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// ContainerdVersion is the running containerd's version ("" for
	// simulator.DefaultContainerdVersion).
	ContainerdVersion string `json:"containerdVersion,omitempty"`
	// StagedContainerdVersion is the version of the containerd the bundle
	// stages (Bundle.Containerd); "" when it is the running one (the
	// machine's own binary, staged again).
	StagedContainerdVersion string `json:"stagedContainerdVersion,omitempty"`
	// ClusterVersion is the Kubernetes version in kube-system/kubeadm-config
	// before the plan ("" for FromVersion): a worker or a second control
	// plane is upgraded after the first control plane's `kubeadm upgrade
	// apply` set it to ToVersion.
	ClusterVersion string `json:"clusterVersion,omitempty"`
	// Bundle is what was staged besides kubeadm, kubelet and kubectl.
	Bundle Bundle `json:"bundle"`
	// ContainerdCrashes stages CrashingContainerd in place of containerd
	// (only with Bundle.Containerd); the fake stages a containerd
	// CrashingContainerdVersion that crashes on start
	// (simulator.Staging.ContainerdCrashes).
	ContainerdCrashes bool `json:"containerdCrashes,omitempty"`
	// Files are host files as they were on the real node before the plan
	// (path -> content), written over the fake host's defaults: the ones
	// the plan reads or changes and the comparison looks at (for example
	// kubeadm-flags.env, whose content kubeadm join chose).
	Files map[string]string `json:"files,omitempty"`
}

// FakeResult is what FakeRun's plan did to the fake host.
type FakeResult struct {
	// Journal is the journal the runner wrote.
	Journal nodeexec.Journal
	// Versions are the host's versions at the end, by simulator.Component name:
	// kubeadm, kubelet, kubectl and containerd (binaries on disk), cni,
	// etcd and control-plane (the static pods; empty on workers).
	Versions map[string]string
	// UnitsActive says whether containerd and the kubelet are active.
	UnitsActive map[string]bool
	// Written are the host files the plan added or changed (path ->
	// content at the end); Removed the ones it deleted.
	Written map[string]string
	Removed []string
	// Host is the fake host, for anything else a caller wants to look at.
	Host *simulator.Host
}

// ErrFakeRun is wrapped by FakeRun's errors about its input.
var ErrFakeRun = errors.New("nodetest: fake run")

// FakeRun runs plan on a simulator.Host set up as node was before the real run
// (name, role, version, containerd version, the files given, the bundle of
// ToVersion staged in kubeadm.DefaultStagingDir) through a real
// nodeexec.Runner with its journal in a temporary directory, and returns
// the journal and the host's end state. Retry backoffs cost no wall time
// (simulator.SkipAheadClock). A plan that fails or rolls back is a result, not
// an error: the error is for a run that could not happen (bad input, a
// journal that could not be written or read).
//
// The fake host interprets only the step library's commands
// (nodeexec/kubeadm's plans): a step it does not know ends with
// simulator.ExitUnknownCommand, which the comparison then reports.
func FakeRun(ctx context.Context, node FakeNode, plan nodeexec.Plan, log logr.Logger) (FakeResult, error) {
	var role strategy.Role
	switch node.Role {
	case kubeadm.RoleFirstControlPlane, kubeadm.RoleControlPlane:
		role = strategy.RoleControlPlane
	case kubeadm.RoleWorker:
		role = strategy.RoleWorker
	default:
		return FakeResult{}, fmt.Errorf("%w: role %q", ErrFakeRun, node.Role)
	}
	if plan.Node != node.Name {
		return FakeResult{}, fmt.Errorf("%w: plan %q is for node %q, not %q", ErrFakeRun, plan.Name, plan.Node, node.Name)
	}
	if node.ToVersion == "" {
		return FakeResult{}, fmt.Errorf("%w: toVersion is empty", ErrFakeRun)
	}
	if node.StagedContainerdVersion != "" && !node.Bundle.Containerd {
		return FakeResult{}, fmt.Errorf("%w: stagedContainerdVersion needs bundle.containerd", ErrFakeRun)
	}
	if node.ContainerdCrashes && !node.Bundle.Containerd {
		return FakeResult{}, fmt.Errorf("%w: containerdCrashes needs bundle.containerd", ErrFakeRun)
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := fakeAPI(node)
	if err != nil {
		return FakeResult{}, err
	}
	h, err := simulator.NewHost(node.Name, role, node.FromVersion, simulator.WithComponentVersions(node.ContainerdVersion, "", ""), simulator.WithHostClock(clk), simulator.WithNodeClient(c))
	if err != nil {
		return FakeResult{}, fmt.Errorf("%w: %w", ErrFakeRun, err)
	}
	for p, c := range node.Files {
		h.WriteFile(p, c)
	}
	staging := kubeadm.DefaultStagingDir
	st := simulator.Staging{Kubernetes: node.ToVersion}
	if node.Bundle.Containerd {
		st.Containerd = h.Version(simulator.ComponentContainerd)
		if node.StagedContainerdVersion != "" {
			st.Containerd = node.StagedContainerdVersion
		}
		if node.ContainerdCrashes {
			st.Containerd, st.ContainerdCrashes = CrashingContainerdVersion, true
		}
	}
	if node.Bundle.CNIPlugins {
		st.CNI = h.Version(simulator.ComponentCNI)
	}
	h.Stage(st)
	if !node.Bundle.Etcdctl {
		h.RemoveFile(path.Join(staging, "etcd", "etcdctl")) // simulator.Stage always stages it
	}

	if node.Bundle.Images {
		h.WriteFile(path.Join(staging, "images", "images.tar"), "image archive of "+node.ToVersion)
	}
	before := snapshot(h)

	dir, err := os.MkdirTemp("", "nodetest-fake-run-")
	if err != nil {
		return FakeResult{}, err
	}
	defer os.RemoveAll(dir)
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: dir, Clock: simulator.SkipAheadClock{FakeClock: clk}, Logger: log})
	if err != nil {
		return FakeResult{}, err
	}
	out, runErr := r.Run(ctx, plan)
	if !out.State.Terminal() {
		return FakeResult{}, fmt.Errorf("nodetest: fake run of %s ended %q: %w", plan.Name, out.State, runErr)
	}
	jp, err := r.JournalPath(plan.Name)
	if err != nil {
		return FakeResult{}, err
	}
	j, err := nodeexec.ReadJournal(jp)
	if err != nil {
		return FakeResult{}, err
	}
	res := FakeResult{Journal: j, Host: h, Versions: map[string]string{}, UnitsActive: map[string]bool{}, Written: map[string]string{}}
	for _, c := range []simulator.Component{simulator.ComponentKubeadm, simulator.ComponentKubelet, simulator.ComponentKubectl, simulator.ComponentContainerd, simulator.ComponentCNI, simulator.ComponentEtcd, simulator.ComponentControlPlane} {
		res.Versions[string(c)] = h.Version(c)
	}
	for _, u := range []string{"containerd", "kubelet"} {
		res.UnitsActive[u] = h.UnitState(u) == simulator.UnitActive
	}
	after := snapshot(h)
	for p, c := range after {
		if old, ok := before[p]; !ok || old != c {
			res.Written[p] = c
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			res.Removed = append(res.Removed, p)
		}
	}
	sort.Strings(res.Removed)
	return res, nil
}

// fakeAPI is the API server the fake host's kubeadm and verify step talk
// to: the Node (Ready, its kubelet at FromVersion) and kubeadm-config at
// the cluster's version.
func fakeAPI(node FakeNode) (client.Client, error) {
	cluster := node.ClusterVersion
	if cluster == "" {
		cluster = node.FromVersion
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	n.Status.NodeInfo.KubeletVersion = node.FromVersion
	n.Status.Conditions = []corev1.NodeCondition{simulator.NodeReady(true)}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: " + cluster + "\n"}}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return crfake.NewClientBuilder().WithScheme(s).WithObjects(n, cm).WithStatusSubresource(&corev1.Node{}).Build(), nil
}

func snapshot(h *simulator.Host) map[string]string {
	m := map[string]string{}
	for _, p := range h.Files("/") {
		if c, ok := h.File(p); ok {
			m[p] = c
		}
	}
	return m
}

// RealNode is what a real run left: its journal, and the end-state facts
// the caller observed on the node. Only the facts given are compared.
type RealNode struct {
	// Journal is the journal the upgrader wrote on the real node.
	Journal nodeexec.Journal `json:"journal"`
	// Versions by simulator.Component name: "kubeadm" (`kubeadm version -o
	// short`), "kubelet" and "kubectl" (the binaries' versions, "v1.37.2"),
	// "containerd" (the version field of `containerd --version`),
	// "control-plane" (the kube-apiserver image's tag).
	Versions map[string]string `json:"versions,omitempty"`
	// UnitsActive: "containerd", "kubelet" -> `systemctl is-active` said
	// active.
	UnitsActive map[string]bool `json:"unitsActive,omitempty"`
	// Files: path -> content of text files at the end (files the plan
	// wrote, not binaries: a fake binary is not the real one).
	Files map[string]string `json:"files,omitempty"`
}

// Difference is one way the fake run differs from the real one.
type Difference struct {
	// What is "plan", "step", "order", "state", "exit-code", "attempts",
	// "failure", "version", "unit" or "file".
	What string
	// Name is the step, component, unit or file it is about ("" for the
	// plan).
	Name string
	// Real and Fake are what each side had ("" for absent).
	Real, Fake string
}

// String says what differs, and how on each side.
func (d Difference) String() string {
	n := d.What
	if d.Name != "" {
		n += " " + d.Name
	}
	return fmt.Sprintf("%s: real %q, fake %q", n, d.Real, d.Fake)
}

// CompareWithFake compares a real run with the fake run of the same plan
// and returns every difference (none: the fake did what the real node
// did). It compares:
//
//   - the plan: fingerprint (the same plan ran), final state;
//   - the steps: which steps each journal has and their order, each
//     step's final state, and for a step that did not succeed (Failed,
//     RolledBack, RollingBack) its exit code and attempts;
//   - the recorded failure: step, phase and exit code;
//   - the end state the caller observed on the real node (real.Versions,
//     real.UnitsActive, real.Files): each against the fake host's.
//
// Succeeded and Skipped are different states here: FakeRun starts the
// fake host as the real node was, so a step whose check passed on one and
// not the other means the fake's check (cmp on its file model, the files
// plan's content test) disagrees with the real one, which is drift.
//
// It does not compare: step output and notes (real programs' wording),
// times, attempts of steps that succeeded (a real verify may need a retry
// while the kubelet reports its version; the fake's kubelet reports at
// once), Resumed and Runs (a real run killed and resumed has them; FakeRun
// runs once), backups taken, the contents of binaries, files the caller
// did not observe, and anything the fake host does not model (images in
// containerd, etcd data, certificates, pods other than the control plane's
// version).
func CompareWithFake(real RealNode, f FakeResult) []Difference {
	var d []Difference
	add := func(what, name, r, fk string) { d = append(d, Difference{What: what, Name: name, Real: r, Fake: fk}) }
	rj, fj := real.Journal, f.Journal
	if rj.Fingerprint != fj.Fingerprint {
		add("plan", "fingerprint", rj.Fingerprint, fj.Fingerprint)
	}
	if rj.State != fj.State {
		add("plan", "state", string(rj.State), string(fj.State))
	}
	fsteps := map[string]nodeexec.StepRecord{}
	for _, s := range fj.Steps {
		fsteps[s.Name] = s
	}
	var common []string
	for _, r := range rj.Steps {
		fs, ok := fsteps[r.Name]
		if !ok {
			add("step", r.Name, string(r.State), "")
			continue
		}
		common = append(common, r.Name)
		if r.State != fs.State {
			add("state", r.Name, string(r.State), string(fs.State))
		}
		if notSucceeded(r.State) || notSucceeded(fs.State) {
			if r.ExitCode != fs.ExitCode {
				add("exit-code", r.Name, fmt.Sprint(r.ExitCode), fmt.Sprint(fs.ExitCode))
			}
			if r.Attempts != fs.Attempts {
				add("attempts", r.Name, fmt.Sprint(r.Attempts), fmt.Sprint(fs.Attempts))
			}
		}
	}
	rnames := map[string]bool{}
	for _, r := range rj.Steps {
		rnames[r.Name] = true
	}
	var fcommon []string
	for _, s := range fj.Steps {
		if !rnames[s.Name] {
			add("step", s.Name, "", string(s.State))
			continue
		}
		fcommon = append(fcommon, s.Name)
	}
	if !slices.Equal(common, fcommon) {
		add("order", "", strings.Join(common, ","), strings.Join(fcommon, ","))
	}
	if rf, ff := failure(rj.Failure), failure(fj.Failure); rf != ff {
		add("failure", "", rf, ff)
	}
	for _, k := range sortedKeys(real.Versions) {
		if real.Versions[k] != f.Versions[k] {
			add("version", k, real.Versions[k], f.Versions[k])
		}
	}
	for _, k := range sortedKeys(real.UnitsActive) {
		if real.UnitsActive[k] != f.UnitsActive[k] {
			add("unit", k, active(real.UnitsActive[k]), active(f.UnitsActive[k]))
		}
	}
	for _, p := range sortedKeys(real.Files) {
		var got string
		var ok bool
		if f.Host != nil {
			got, ok = f.Host.File(p)
		}
		if !ok || got != real.Files[p] {
			if !ok {
				got = "(absent)"
			}
			add("file", p, real.Files[p], got)
		}
	}
	return d
}

func notSucceeded(s nodeexec.StepState) bool {
	return s == nodeexec.StepStateFailed || s == nodeexec.StepStateRolledBack || s == nodeexec.StepStateRollingBack
}

func failure(f *nodeexec.Failure) string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("step %s %s exit %d", f.Step, f.Phase, f.ExitCode)
}

func active(b bool) string {
	if b {
		return simulator.UnitActive
	}
	return simulator.UnitInactive
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Recording is one real run, kept as a file in RecordingsDir: the node as
// it was before, the plan, and what the run left. The fidelity test runs
// Plan on a FakeNode and compares (CompareWithFake).
type Recording struct {
	// Scenario names the recording (its file name without .json):
	// lower-case letters, digits and dashes.
	Scenario string `json:"scenario"`
	// Source says where the recording came from.
	Source string        `json:"source"`
	Node   FakeNode      `json:"node"`
	Plan   nodeexec.Plan `json:"plan"`
	Real   RealNode      `json:"real"`
}

// RecordRealEnvVar, set to "1", makes RecordReal write recordings.
const RecordRealEnvVar = "UPGRADEKIT_RECORD_REAL"

// RecordingsDir is where the recordings live, relative to this package's
// directory (where `go test` runs its tests).
const RecordingsDir = "testdata/real"

var scenarioName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// RecordReal writes r as dir/<scenario>.json when RecordRealEnvVar is "1"
// and says whether it did. The realnode scenarios call it after a run, with
// dir RecordingsDir, to replace the recordings with real ones.
func RecordReal(dir string, r Recording) (bool, error) {
	if os.Getenv(RecordRealEnvVar) != "1" {
		return false, nil
	}
	return true, WriteRecording(dir, r)
}

// WriteRecording writes r as dir/<scenario>.json, indented.
func WriteRecording(dir string, r Recording) error {
	if !scenarioName.MatchString(r.Scenario) {
		return fmt.Errorf("nodetest: recording scenario %q: want lower-case letters, digits and dashes", r.Scenario)
	}
	if err := checkRecording(r); err != nil {
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the plan's scripts stay readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Scenario+".json"), b.Bytes(), 0o644)
}

// ReadRecording reads and checks a recording file: the plan valid, the
// journal one the runner can have written (nodeexec.DecodeJournal) for
// that plan.
func ReadRecording(p string) (Recording, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return Recording{}, err
	}
	var r Recording
	if err := json.Unmarshal(data, &r); err != nil {
		return Recording{}, fmt.Errorf("nodetest: recording %s: %w", p, err)
	}
	if err := checkRecording(r); err != nil {
		return Recording{}, fmt.Errorf("recording %s: %w", p, err)
	}
	return r, nil
}

func checkRecording(r Recording) error {
	if err := r.Plan.Validate(); err != nil {
		return fmt.Errorf("nodetest: recording %s: plan: %w", r.Scenario, err)
	}
	data, err := json.Marshal(r.Real.Journal)
	if err != nil {
		return err
	}
	if _, err := nodeexec.DecodeJournal(data); err != nil {
		return fmt.Errorf("nodetest: recording %s: journal: %w", r.Scenario, err)
	}
	if r.Real.Journal.Plan != r.Plan.Name || r.Real.Journal.Fingerprint != r.Plan.Fingerprint() {
		return fmt.Errorf("nodetest: recording %s: the journal (plan %q) was not written for the recorded plan %q", r.Scenario, r.Real.Journal.Plan, r.Plan.Name)
	}
	return nil
}

// ObserveReal reads what a real run left on n: the journal at journalPath,
// the versions of kubeadm, kubelet, kubectl and containerd on its PATH
// (not "control-plane": the caller adds the kube-apiserver image's tag if
// it wants it compared), whether
// containerd and the kubelet are active, and the content of files (node
// paths). For the realnode scenarios' recordings.
func ObserveReal(ctx context.Context, n *Node, journalPath string, files ...string) (RealNode, error) {
	j, err := nodeexec.ReadJournal(journalPath)
	if err != nil {
		return RealNode{}, err
	}
	r := RealNode{Journal: j, Versions: map[string]string{}, UnitsActive: map[string]bool{}, Files: map[string]string{}}
	for _, v := range []struct {
		name   string
		argv   []string
		prefix string
	}{
		{"kubeadm", []string{"kubeadm", "version", "-o", "short"}, ""},
		{"kubelet", []string{"kubelet", "--version"}, "Kubernetes "},
		{"kubectl", []string{"kubectl", "version", "--client"}, "Client Version: "},
	} {
		out, err := n.Run(ctx, v.argv...)
		if err != nil {
			return RealNode{}, fmt.Errorf("nodetest: %s: %w", strings.Join(v.argv, " "), err)
		}
		line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		r.Versions[v.name] = strings.TrimPrefix(strings.TrimSpace(line), v.prefix)
	}
	out, err := n.Run(ctx, "containerd", "--version")
	if err != nil {
		return RealNode{}, fmt.Errorf("nodetest: containerd --version: %w", err)
	}
	// "containerd github.com/containerd/containerd 1.6.20~ds1 <revision>"
	if f := strings.Fields(out); len(f) >= 3 {
		r.Versions["containerd"] = f[2]
	}
	for _, u := range []string{"containerd", "kubelet"} {
		_, err := n.Run(ctx, "systemctl", "is-active", "--quiet", u)
		r.UnitsActive[u] = err == nil
	}
	for _, p := range files {
		data, err := os.ReadFile(n.Path(p))
		if err != nil {
			return RealNode{}, err
		}
		r.Files[p] = string(data)
	}
	return r, nil
}
