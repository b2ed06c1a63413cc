// Command simulate is upgradekit's main demo: on an embedded fake cluster it
// plans a rollout (per machine: in place or replace, and why), runs it
// with the real kubeadm plans against simulated node hosts on a virtual
// clock, printing every step, retry, runner crash, rollback and failure in
// virtual-time order as each batch ends (with a progress bar after each
// batch on a terminal), and prints a summary. --timeline writes the rollout
// as a self-contained HTML/SVG timeline: a time axis, a lane per group
// with a bar per batch, and a lane per machine with its steps, marks for
// failures, rollbacks, crashes and retries; above 60 machines only the
// machines where something went wrong or was retried get a lane. --updater capi has the
// real capi.MachineUpdater update the in-place machines, called as Cluster
// API calls the UpdateMachine hook, with the simulated kubelets running
// its upgrader pods (simulator.Options.MachineUpdater). A machine whose update
// fails stalls the rollout where Cluster API would (simulator.FailurePolicyStall):
// its machine deployment goes on only within maxSurge+maxUnavailable, a
// failed control plane machine stops the control plane and the workers;
// --on-failure continue plays on as if it were fixed.
//
//	go run ./examples/simulate
//	go run ./examples/simulate --from v1.34.2 --to v1.35.4 --workers md-0=5,md-1=5 --new-image md-1 --timeline rollout.html
//	go run ./examples/simulate --updater capi --control-planes 1 --workers md-0=3 --new-image ""
//
// Exit codes: 0 done (and for -h), 1 the rollout broke an invariant or
// could not run, 2 a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/simulator/timeline"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// Exit codes, as in every example (examples/README.md): 0 every machine
// done (or -h), 1 an error (a broken invariant among them), 2 a usage
// error, 3 machines failed, 4 machines blocked or held back (none failed).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitFailed  = 3
	exitBlocked = 4
)

// Findings run returns: the rollout ran, and its summary says what.
var (
	errMachinesFailed  = errors.New("machines failed")
	errMachinesBlocked = errors.New("machines blocked or held back")
)

// Updaters (--updater).
const (
	updaterSimulator = "simulator"
	updaterCAPI      = "capi"
)

// usageError is a command line the command cannot run; printed, when the
// flag package has already printed it.
type usageError struct {
	err     error
	printed bool
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

type options struct {
	version       bool // --version: print it, simulate nothing
	controlPlanes int
	workers       []pool
	from, to      string
	newImage      []string
	strategy      string
	faults        []fault
	crashes       []fault
	seed          uint64
	flaky         float64
	timeline      string
	bar           bool
	updater       string
	onFailure     string
	// output is text (the demo's narration) or json/yaml (only the
	// simulation's result, as one object).
	output string
}

type pool struct {
	name     string
	replicas int
}

type fault struct {
	node, step string
	times      int
}

// parseFlags parses the command line; its errors are usageErrors (or
// flag.ErrHelp for -h, after the usage is printed).
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o, printed, err := parseArgs(args, stderr)
	if err != nil && !errors.Is(err, cli.ErrHelp) {
		return o, usageError{err: err, printed: printed}
	}
	return o, err
}

// parseArgs parses args; printed says the flag package printed the error.
func parseArgs(args []string, stderr io.Writer) (o options, printed bool, err error) {
	var workers, newImage, faults string
	fs := cli.NewFlagSet("simulate")
	fs.Usage = func() {
		cli.WriteHelp(stderr, fs, "usage: simulate [flags]",
			"exit: 0 every machine done, 1 error, 2 usage, 3 machines failed, 4 machines blocked or held back")
	}
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.IntVar(&o.controlPlanes, "control-planes", 3, "control plane machines")
	fs.StringVar(&workers, "workers", "md-0=5,md-1=5", "machine deployments as name=replicas,...")
	fs.StringVar(&o.from, "from", "v1.35.4", "Kubernetes version the cluster runs")
	fs.StringVar(&o.to, "to", "v1.36.3", "Kubernetes version to roll out")
	fs.StringVar(&newImage, "new-image", "md-1", "machine deployments whose infrastructure image also changes (replaced, not updated in place)")
	fs.StringVar(&o.strategy, "strategy", "fallback", "fallback (in place, else rolling replace), inplace-only (never replace), rolling (always replace)")
	fs.StringVar(&faults, "fail", "", "inject step failures: node/step=times,... (e.g. demo-md-0-1/kubeadm-upgrade=1)")
	var crashes string
	fs.StringVar(&crashes, "crash", "", "crash the node's upgrader during a step (a new one resumes from the journal): node/step,... (e.g. demo-md-0-0/kubelet)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed for --flaky's random failures (the same seed, the same failures)")
	fs.Float64Var(&o.flaky, "flaky", 0, "make every step fail with this probability (0 to 1), drawn from --seed")
	fs.StringVar(&o.timeline, "timeline", "", "write an HTML/SVG timeline of the rollout to this file")
	fs.BoolVar(&o.bar, "progress-bar", isTerminal(os.Stdout), "print a progress bar after each batch (default: when stdout is a terminal)")
	fs.StringVar(&o.updater, "updater", updaterSimulator, "what updates in-place machines: simulator (the simulator runs the kubeadm plans), capi (a real capi.MachineUpdater called as Cluster API calls the UpdateMachine hook, the simulated kubelets running its upgrader pods)")
	cli.OutputFlag(fs, &o.output, cli.Text, cli.JSON, cli.YAML)
	fs.StringVar(&o.onFailure, "on-failure", string(simulator.FailurePolicyStall), "what the rollout does after a machine's update fails: stall (as Cluster API: the failed machine stays unavailable, so its machine deployment goes on only within maxSurge+maxUnavailable, and a failed control plane machine stops the control plane and the workers), continue (as if the failed machine were fixed at once)")
	if err := cli.Parse(fs, args); err != nil {
		return o, false, err
	}
	if o.version {
		return o, false, nil
	}
	if o.updater != updaterSimulator && o.updater != updaterCAPI {
		return o, false, fmt.Errorf("--updater: unknown %q (%s, %s)", o.updater, updaterSimulator, updaterCAPI)
	}
	if err := cli.CheckOutput(o.output, cli.Text, cli.JSON, cli.YAML); err != nil {
		return o, false, err
	}
	if o.output != cli.Text {
		o.bar = false // the object alone on stdout
	}
	if o.onFailure != string(simulator.FailurePolicyStall) && o.onFailure != string(simulator.FailurePolicyContinue) {
		return o, false, fmt.Errorf("--on-failure: unknown %q (%s, %s)", o.onFailure, simulator.FailurePolicyStall, simulator.FailurePolicyContinue)
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.flaky < 0 || o.flaky > 1 {
		return o, false, fmt.Errorf("--flaky: %v is not a probability from 0 to 1", o.flaky)
	}
	if o.controlPlanes < 1 {
		return o, false, errors.New("--control-planes must be at least 1")
	}
	for _, w := range splitList(workers) {
		name, n, ok := strings.Cut(w, "=")
		r, err := strconv.Atoi(n)
		if !ok || err != nil || r < 1 || name == "" {
			return o, false, fmt.Errorf("--workers: %q is not name=replicas", w)
		}
		o.workers = append(o.workers, pool{name, r})
	}
	o.newImage = splitList(newImage)
	explicit := false
	fs.Visit(func(f *pflag.Flag) { explicit = explicit || f.Name == "new-image" })
	if !explicit {
		// The default names md-1 of the default --workers: keep it only
		// where there is such a deployment.
		o.newImage = slices.DeleteFunc(o.newImage, func(n string) bool {
			return !slices.ContainsFunc(o.workers, func(p pool) bool { return p.name == n })
		})
	}
	for _, f := range splitList(faults) {
		target, n, ok := strings.Cut(f, "=")
		node, step, ok2 := strings.Cut(target, "/")
		times, err := strconv.Atoi(n)
		if !ok || !ok2 || err != nil || times < 1 {
			return o, false, fmt.Errorf("--fail: %q is not node/step=times", f)
		}
		o.faults = append(o.faults, fault{node, step, times})
	}
	for _, c := range splitList(crashes) {
		node, step, ok := strings.Cut(c, "/")
		if !ok || node == "" || step == "" {
			return o, false, fmt.Errorf("--crash: %q is not node/step", c)
		}
		o.crashes = append(o.crashes, fault{node: node, step: step})
	}
	return o, false, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func planner(name string) (*strategy.Planner, error) {
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	if err != nil {
		return nil, err
	}
	rolling, err := strategy.RollingReplaceStrategy(strategy.RollingUpdate{})
	if err != nil {
		return nil, err
	}
	var s strategy.Strategy
	switch name {
	case "fallback":
		if s, err = strategy.FallbackStrategy(rolling); err != nil {
			return nil, err
		}
	case "inplace-only":
		s = strategy.Strategies{strategy.InPlaceStrategy(), strategy.NeverReplaceStrategy()}
	case "rolling":
		s = rolling
	default:
		return nil, fmt.Errorf("--strategy: unknown %q (fallback, inplace-only, rolling)", name)
	}
	decider := strategy.Updaters(kubeadm)
	if name == "rolling" {
		decider = strategy.Updaters()
	}
	return strategy.NewPlanner(strategy.PlannerOptions{Decider: decider, Strategy: s})
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Version("simulate"))
		return err
	}
	cl := simulator.NewCluster("demo").ControlPlane(o.controlPlanes, o.from)
	images := map[string]string{}
	for _, w := range o.workers {
		cl.MachineDeployment(w.name, w.replicas, o.from, simulator.WithImage("kindest/node:"+o.from))
	}
	for _, name := range o.newImage {
		images[name] = "kindest/node:" + o.to
	}
	p, err := planner(o.strategy)
	if err != nil {
		return usageError{err: err}
	}
	if err := checkNames(o, cl); err != nil {
		return usageError{err: err}
	}
	faults := simulator.NewFaults(o.seed).FlakySteps(o.flaky)
	for _, f := range o.faults {
		faults.FailStep(f.node, f.step, f.times)
	}
	for _, c := range o.crashes {
		faults.CrashRunner(c.node, c.step, simulator.CrashPointDuring)
	}
	out := stdout // the narration
	if o.output != cli.Text {
		out = io.Discard
	}
	total := 0
	prog := newProgress(out, o.bar)
	simOpts := simulator.Options{Planner: p, Faults: faults, OnEvent: prog.event,
		OnFailure: simulator.FailurePolicy(o.onFailure)}
	if o.updater == updaterCAPI {
		simOpts.MachineUpdater = &capi.UpdaterOptions{RetryAfter: 30 * time.Second}
	}
	sim, err := simulator.NewSimulator(cl, simOpts)
	if errors.Is(err, simulator.ErrInvalidCluster) {
		return usageError{err: err} // a --from that is no version, say
	}
	if err != nil {
		return err
	}
	rollout := simulator.Rollout{ToVersion: o.to, Images: images}

	fmt.Fprintf(out, "Cluster demo: %d control plane machines, %d machine deployments, %s -> %s\n", o.controlPlanes, len(o.workers), o.from, o.to)
	if o.updater == updaterCAPI {
		fmt.Fprintln(out, "In-place machines are updated by capi.MachineUpdater, called as Cluster API calls the UpdateMachine hook.")
	}
	fmt.Fprintln(out)
	plan, err := sim.Plan(ctx, rollout)
	if errors.Is(err, simulator.ErrInvalidCluster) {
		return usageError{err: err} // a --to that is no version
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "Plan (nothing has happened yet):")
	if err := plan.WriteTable(out); err != nil {
		return err
	}
	for _, pm := range plan.Machines {
		if pm.Batch > 0 {
			total++
		}
	}
	prog.total = total

	fmt.Fprintln(out, "\nRollout:")
	res, err := sim.Run(ctx, rollout)
	if err != nil {
		return err
	}
	prog.finish()
	summarize(out, res)
	if o.output != cli.Text {
		if err := cli.WriteObject(stdout, o.output, "Simulation", res); err != nil {
			return err
		}
	}
	if o.timeline != "" {
		f, err := os.Create(o.timeline)
		if err != nil {
			return err
		}
		if err := timeline.Write(f, res); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "timeline written to %s\n", o.timeline)
	}
	if len(res.Violations) > 0 {
		return fmt.Errorf("%d invariant violations", len(res.Violations))
	}
	switch {
	case len(res.Failed) > 0:
		return errMachinesFailed
	case len(res.Held) > 0 || blocked(res.Plan) > 0:
		return errMachinesBlocked
	}
	return nil
}

// blocked counts the machines the plan could not update or replace.
func blocked(p *strategy.RolloutPlan) int {
	n := 0
	for _, m := range p.Machines {
		if m.Method == strategy.MethodBlocked {
			n++
		}
	}
	return n
}

// checkNames refuses --fail, --crash and --new-image entries that name no
// node, step or machine deployment of the cluster: silently ignored, they
// would make a run look fault-free.
func checkNames(o options, cl *simulator.Cluster) error {
	nodes := map[string]bool{}
	for _, n := range cl.Nodes() {
		nodes[n.Name] = true
	}
	steps, err := stepNames(o)
	if err != nil {
		return err
	}
	for flagName, list := range map[string][]fault{"--fail": o.faults, "--crash": o.crashes} {
		for _, f := range list {
			if !nodes[f.node] {
				return fmt.Errorf("%s: no node %q (nodes: %s)", flagName, f.node, strings.Join(slices.Sorted(maps.Keys(nodes)), ", "))
			}
			if !steps[f.step] {
				return fmt.Errorf("%s: no step %q (steps: %s)", flagName, f.step, strings.Join(slices.Sorted(maps.Keys(steps)), ", "))
			}
		}
	}
	pools := map[string]bool{}
	for _, w := range o.workers {
		pools[w.name] = true
	}
	for _, name := range o.newImage {
		if !pools[name] {
			return fmt.Errorf("--new-image: no machine deployment %q (machine deployments: %s)", name, strings.Join(slices.Sorted(maps.Keys(pools)), ", "))
		}
	}
	return nil
}

// stepNames are the steps the kubeadm plans of this rollout run.
func stepNames(o options) (map[string]bool, error) {
	out := map[string]bool{}
	for _, role := range []kubeadm.Role{kubeadm.RoleFirstControlPlane, kubeadm.RoleControlPlane, kubeadm.RoleWorker} {
		p, err := kubeadm.NewPlan(kubeadm.Config{Node: "n", Role: role, FromVersion: o.from, ToVersion: o.to})
		if err != nil {
			return nil, fmt.Errorf("--from %s --to %s: %w", o.from, o.to, err)
		}
		for _, s := range p.Steps {
			out[s.Name] = true
		}
	}
	return out, nil
}

// progress prints the rollout as it happens: every step, retry, runner
// crash, rollback, failure and replacement, one line each, in virtual-time
// order. The simulator reports a machine's events when the machine is
// done, so lines are held until their batch ends and then printed sorted
// by time (batches do not overlap). With bar (a terminal), a progress bar
// follows each batch.
type progress struct {
	w       io.Writer
	bar     bool
	total   int
	done    map[string]bool
	batch   int
	pending []simulator.Event
}

func newProgress(w io.Writer, bar bool) *progress {
	return &progress{w: w, bar: bar, done: map[string]bool{}}
}

func (p *progress) event(e simulator.Event) {
	if e.Batch != p.batch {
		p.flush()
		p.batch = e.Batch
	}
	p.pending = append(p.pending, e)
}

// flush prints the held lines in time order (by end, then start; a
// machine's own order breaks ties).
func (p *progress) flush() {
	if len(p.pending) == 0 {
		return
	}
	sort.SliceStable(p.pending, func(i, j int) bool {
		a, b := p.pending[i], p.pending[j]
		if !a.End.Equal(b.End) {
			return a.End.Before(b.End)
		}
		return a.Start.Before(b.Start)
	})
	for _, e := range p.pending {
		if e.Step == "verify" || e.Step == "drain-and-delete-old" || e.Outcome == "Failed" ||
			e.Step == simulator.UpdateMachineStep+observe.ReasonSucceeded {
			p.done[e.Machine] = true
		}
		fmt.Fprintf(p.w, "  %s  batch %-2d %-24s %-7s %-22s %s\n", e.End.Format("15:04:05"), e.Batch, e.Machine, e.Method, e.Step, timeline.Describe(e))
	}
	p.pending = p.pending[:0]
	if p.bar {
		const width = 30
		n := 0
		if p.total > 0 {
			n = min(len(p.done)*width/p.total, width)
		}
		fmt.Fprintf(p.w, "  [%s%s] %d/%d machines\n", strings.Repeat("#", n), strings.Repeat(".", width-n), len(p.done), p.total)
	}
}

// outcome is an event's outcome as printed: retries and crashes say so.
func (p *progress) finish() { p.flush() }

func summarize(w io.Writer, res *simulator.Result) {
	methods := map[strategy.Method]int{}
	for _, pm := range res.Plan.Machines {
		if pm.Batch > 0 {
			methods[pm.Method]++
		}
	}
	var parts []string
	for m, n := range methods {
		parts = append(parts, fmt.Sprintf("%d %s", n, m))
	}
	sort.Strings(parts)
	fmt.Fprintf(w, "\nSummary: %s in %d batches, %s of virtual time", strings.Join(parts, ", "), len(res.Plan.Batches), res.End.Sub(res.Start).Round(time.Second))
	if len(res.Failed) > 0 {
		fmt.Fprintf(w, "; failed: %s", strings.Join(res.Failed, ", "))
	}
	if res.Restarts > 0 {
		fmt.Fprintf(w, "; %d upgrader restarts resumed from the journal", res.Restarts)
	}
	if res.UpdateCalls > 0 {
		fmt.Fprintf(w, "; %d UpdateMachine calls", res.UpdateCalls)
	}
	fmt.Fprintln(w)
	for _, m := range res.Failed {
		if why := res.Reasons[m]; why != "" {
			fmt.Fprintf(w, "Failed: %s: %s\n", m, why)
		}
	}
	for _, h := range res.Held {
		fmt.Fprintf(w, "Held back: %s (%s)\n", h.Machine, h.Reason)
	}
	if len(res.Failed) > 0 && res.OnFailure == simulator.FailurePolicyStall {
		fmt.Fprintf(w, "Stalled where Cluster API would: it keeps retrying %s until that succeeds; --on-failure continue plays on as if it were fixed.\n", strings.Join(res.Failed, ", "))
	}
	if len(res.LeftCordoned) > 0 {
		fmt.Fprintf(w, "Left cordoned for a person (failed without a rollback): %s\n", strings.Join(res.LeftCordoned, ", "))
	}
	if n := blocked(res.Plan); n > 0 {
		fmt.Fprintf(w, "Blocked: %d machines could be neither updated nor replaced (see the plan's reasons)\n", n)
	}
	switch {
	case len(res.Violations) == 0 && len(res.Plan.Batches) == 0:
		fmt.Fprintln(w, "Nothing was updated or replaced, so no invariant was put to the test.")
	case len(res.Violations) == 0:
		fmt.Fprintln(w, "Invariants held: control plane first and one at a time; no group over maxSurge+maxUnavailable at once;")
		fmt.Fprintln(w, "no kubelet newer than the control plane; no completed step run twice; no node left cordoned; every updated machine converged.")
		if res.OnFailure == simulator.FailurePolicyStall && len(res.Failed) > 0 {
			fmt.Fprintln(w, "After the failure nothing started that Cluster API would not have started.")
		}
	}
	for _, v := range res.Violations {
		fmt.Fprintln(w, "VIOLATION:", v)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode prints err (the flag package has printed its own) and maps it
// to the exit code (see the constants). Findings (failed, blocked) are
// in the summary already; they are not printed again.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil || errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.Is(err, errMachinesFailed):
		return exitFailed
	case errors.Is(err, errMachinesBlocked):
		return exitBlocked
	}
	var ue usageError
	if errors.As(err, &ue) {
		if !ue.printed {
			cli.PrintUsageError(stderr, "simulate", err)
		}
		return exitUsage
	}
	fmt.Fprintln(stderr, "simulate:", err)
	return exitFailure
}
