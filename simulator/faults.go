package simulator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// Verb is an API operation faults can be injected into: a verb of the
// controller-runtime client, "get", "list", "create", "update", "patch" or
// "delete", or "<verb>/<subresource>" for a subresource: "update/status",
// "patch/status", "create/eviction".
type Verb string

// Verbs of the controller-runtime client.
const (
	verbGet            Verb = "get"
	verbList           Verb = "list"
	verbCreate         Verb = "create"
	verbUpdate         Verb = "update"
	verbPatch          Verb = "patch"
	verbDelete         Verb = "delete"
	verbUpdateStatus   Verb = "update/status"
	verbPatchStatus    Verb = "patch/status"
	verbCreateEviction Verb = "create/eviction"
)

// APIFault is the kind of error an API call fails with.
type APIFault string

// API faults. Each produces the error the real API server would, so
// apierrors.IsConflict, IsTimeout/IsServerTimeout and IsTooManyRequests
// recognise them.
const (
	// APIFaultConflict is 409 Conflict (a stale resourceVersion).
	APIFaultConflict APIFault = "Conflict"
	// APIFaultTimeout is 504 Timeout.
	APIFaultTimeout APIFault = "Timeout"
	// APIFaultThrottled is 429 TooManyRequests with a Retry-After of 1s.
	APIFaultThrottled APIFault = "Throttled"
)

// Injection records one fault that fired.
type Injection struct {
	// Node and Step for host faults; Verb and Kind for API faults.
	Node, Step string
	Verb       Verb
	Kind       string
	// What is "fail", "slow", "deadline", "not-ready", "crash-during",
	// "crash-after", "crash-controller", "unhealthy-after-update" or the
	// APIFault.
	What string
}

type stepKey struct{ node, step string }

type apiRule struct {
	verb       Verb
	kind       string // "" matches every kind
	fault      APIFault
	remaining  int     // for counted rules
	p          float64 // for probabilistic rules (remaining ignored)
	randomized bool
}

// Faults describes failures to inject into Hosts (WithFaults) and into a
// client (Interceptor). It is deterministic: counted faults fire on the
// first matching calls, and probabilistic ones draw from a generator seeded
// by NewFaults, so the same seed and the same sequence of calls inject the
// same faults. Node "" in a rule matches every node (the count is then
// shared). It is safe for concurrent use; with concurrent callers the
// sequence, and so which call gets a probabilistic fault, depends on
// scheduling.
//
// A nil *Faults injects nothing (hosts and interceptors given one run
// unchanged) and reports nothing; its rule methods return a new Faults
// seeded with 0 that holds the rule, so build on their result. A zero
// Faults works as one from NewFaults(0).
type Faults struct {
	mu       sync.Mutex
	rng      *rand.Rand
	fail     map[stepKey]int
	flaky    float64
	notReady map[stepKey]bool
	fired    map[stepKey]bool
	slow     map[stepKey]time.Duration
	crash    map[crashKey]bool
	crashed  map[crashKey]bool
	ctrl     map[int]bool
	sick     map[string]bool // UnhealthyAfterUpdate
	api      []*apiRule
	log      []Injection
}

// NewFaults returns an empty set of faults whose random choices derive
// from seed.
func NewFaults(seed uint64) *Faults {
	return &Faults{
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		fail: map[stepKey]int{}, notReady: map[stepKey]bool{}, fired: map[stepKey]bool{}, slow: map[stepKey]time.Duration{},
		crash: map[crashKey]bool{}, crashed: map[crashKey]bool{}, ctrl: map[int]bool{},
	}
}

// ready returns f with its maps made, or a new Faults seeded with 0 when
// f is nil, so that a nil or zero Faults can be built on.
func (f *Faults) ready() *Faults {
	if f == nil {
		return NewFaults(0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng == nil {
		n := NewFaults(0)
		f.rng, f.fail, f.notReady, f.fired, f.slow = n.rng, n.fail, n.notReady, n.fired, n.slow
		f.crash, f.crashed, f.ctrl = n.crash, n.crashed, n.ctrl
	}
	return f
}

// UnhealthyAfterUpdate makes node's machine go bad once its update has
// succeeded: its Node turns NotReady and stays so (the kubelet does not
// recover). The simulator counts it for its circuit breaker (Options.Breaker)
// and its gates see it.
func (f *Faults) UnhealthyAfterUpdate(node string) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sick == nil {
		f.sick = map[string]bool{}
	}
	f.sick[node] = true
	return f
}

// TakeUnhealthy reports, once, whether node was made to go bad after its
// update (UnhealthyAfterUpdate).
func (f *Faults) TakeUnhealthy(node string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.sick[node] {
		return false
	}
	delete(f.sick, node)
	f.log = append(f.log, Injection{Node: node, What: "unhealthy-after-update"})
	return true
}

// FailStep makes the run phase of step on node exit with code 86 (an
// injected failure) the first times times it runs.
func (f *Faults) FailStep(node, step string, times int) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[stepKey{node, step}] += max(times, 0)
	return f
}

// Heal clears the failures FailStep has left to inject into step on node,
// as when an operator fixes the cause before retrying.
func (f *Faults) Heal(node, step string) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.fail, stepKey{node, step})
	return f
}

// FlakySteps makes every run-phase command fail with probability p, drawn
// from the seeded generator.
func (f *Faults) FlakySteps(p float64) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flaky = p
	return f
}

// NotReadyAfter marks node's Node NotReady right after step first
// succeeds on it (the kubelet's next start marks it Ready again). With node
// "" it fires once on every node.
func (f *Faults) NotReadyAfter(node, step string) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notReady[stepKey{node, step}] = true
	return f
}

// SlowStep makes every run of step on node take d of virtual time: the
// host's clock (WithHostClock; a FakeClock is stepped, nothing sleeps)
// advances by d, and if d does not fit in the command's deadline the
// command fails with context.DeadlineExceeded, as a real slow command
// killed at its deadline would.
func (f *Faults) SlowStep(node, step string, d time.Duration) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slow[stepKey{node, step}] = d
	return f
}

// CrashPoint is when, relative to a step, a simulated runner crash happens.
type CrashPoint string

// Crash points.
const (
	// CrashPointDuring kills the runner while the step runs: the command's
	// effects happened, its outcome never reached the journal, so the
	// journal shows the step Running and the next runner resumes it by its
	// InterruptPolicy.
	CrashPointDuring CrashPoint = "during"
	// CrashPointAfter kills the runner between the step and the next one: the
	// step is journaled as done, the next has not started. After a plan's
	// last step there is nothing left to interrupt, so it does not fire.
	CrashPointAfter CrashPoint = "after"
)

type crashKey struct {
	stepKey
	at CrashPoint
}

// CrashRunner makes the runner working on node crash once at point of
// step (node "" fires once on every node). A Host cannot kill the process
// that drives it: the Simulator (or a harness of your own, through
// TakeCrash) cancels the Runner's context at that point and starts a new
// Runner on the same journal, as the upgrader pod's restart would.
func (f *Faults) CrashRunner(node, step string, at CrashPoint) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crash[crashKey{stepKey{node, step}, at}] = true
	return f
}

// TakeCrash reports whether a crash is due on node at point of step, and
// if so consumes it (each rule fires once per node) and records the
// injection ("crash-during" or "crash-after").
func (f *Faults) TakeCrash(node, step string, at CrashPoint) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := crashKey{stepKey{node, step}, at}
	if f.crashed[k] || !(f.crash[k] || f.crash[crashKey{stepKey{"", step}, at}]) {
		return false
	}
	f.crashed[k] = true
	f.log = append(f.log, Injection{Node: node, Step: step, What: "crash-" + string(at)})
	return true
}

// CrashController makes the controller driving a rollout crash once after
// each given number of completed batches (counted over the whole rollout,
// from 1). Its plan is lost: the Simulator starts over as a new controller
// would, planning again from what the cluster says (machines already at
// the desired state have nothing to do; failed ones are marked on their
// Machine and count against the circuit breaker).
func (f *Faults) CrashController(afterBatches ...int) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range afterBatches {
		f.ctrl[n] = true
	}
	return f
}

// TakeControllerCrash reports whether the controller crashes now, after
// completed batches, consuming the crash and recording the injection
// ("crash-controller").
func (f *Faults) TakeControllerCrash(completed int) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ctrl[completed] {
		return false
	}
	delete(f.ctrl, completed)
	f.log = append(f.log, Injection{Step: fmt.Sprintf("after batch %d", completed), What: "crash-controller"})
	return true
}

// APIError makes the first times calls of verb on kind ("" for every kind,
// else the Kind such as "Node") fail with fault.
func (f *Faults) APIError(verb Verb, kind string, fault APIFault, times int) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.api = append(f.api, &apiRule{verb: verb, kind: kind, fault: fault, remaining: max(times, 0)})
	return f
}

// FlakyAPI makes calls of verb on kind fail with fault with probability p,
// drawn from the seeded generator.
func (f *Faults) FlakyAPI(verb Verb, kind string, fault APIFault, p float64) *Faults {
	f = f.ready()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.api = append(f.api, &apiRule{verb: verb, kind: kind, fault: fault, p: p, randomized: true})
	return f
}

// Injected returns the faults that fired, in order.
func (f *Faults) Injected() []Injection {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Injection(nil), f.log...)
}

func (f *Faults) match(m map[stepKey]int, node, step string) (stepKey, bool) {
	for _, k := range []stepKey{{node, step}, {"", step}} {
		if m[k] > 0 {
			return k, true
		}
	}
	return stepKey{}, false
}

// before runs ahead of a host command; handled means the command does not
// run and res/err are its outcome.
func (f *Faults) before(ctx context.Context, h *Host, cmd nodeexec.Command) (res nodeexec.Result, err error, handled bool) {
	if f == nil || cmd.Phase != nodeexec.PhaseRun {
		return res, nil, false
	}
	f.mu.Lock()
	d, slow := f.slow[stepKey{h.node, cmd.Step}]
	if !slow {
		d, slow = f.slow[stepKey{"", cmd.Step}]
	}
	f.mu.Unlock()
	if slow {
		if err := h.sleep(ctx, d); err != nil {
			f.record(Injection{Node: h.node, Step: cmd.Step, What: "deadline"})
			return nodeexec.Result{ExitCode: -1, Output: []byte("simulator: killed at its deadline")},
				fmt.Errorf("fake host %s: step %q takes %v: %w", h.node, cmd.Step, d, err), true
		}
		f.record(Injection{Node: h.node, Step: cmd.Step, What: "slow"})
	}
	f.mu.Lock()
	k, fail := f.match(f.fail, h.node, cmd.Step)
	if fail {
		f.fail[k]--
	} else if f.flaky > 0 && f.rng != nil && f.rng.Float64() < f.flaky {
		fail = true
	}
	f.mu.Unlock()
	if fail {
		f.record(Injection{Node: h.node, Step: cmd.Step, What: "fail"})
		return nodeexec.Result{ExitCode: exitInjected, Output: []byte(fmt.Sprintf("simulator: injected failure of step %q on %s", cmd.Step, h.node))}, nil, true
	}
	return res, nil, false
}

// after runs once a host command succeeded.
func (f *Faults) after(ctx context.Context, h *Host, cmd nodeexec.Command) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	k := stepKey{h.node, cmd.Step}
	fire := !f.fired[k] && (f.notReady[k] || f.notReady[stepKey{"", cmd.Step}])
	if fire {
		f.fired[k] = true
	}
	f.mu.Unlock()
	if !fire {
		return nil
	}
	f.record(Injection{Node: h.node, Step: cmd.Step, What: "not-ready"})
	return h.NodeNotReady(ctx)
}

func (f *Faults) record(i Injection) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, i)
}

// apiFault returns the error for a call, or nil.
func (f *Faults) apiFault(c client.Client, verb Verb, obj any, name string) error {
	if f == nil {
		return nil
	}
	kind := ""
	gvk := schema.GroupVersionKind{}
	if o, ok := obj.(client.Object); ok {
		if g, err := apiutil.GVKForObject(o, c.Scheme()); err == nil {
			gvk = g
		}
	} else if l, ok := obj.(client.ObjectList); ok {
		if g, err := apiutil.GVKForObject(l, c.Scheme()); err == nil {
			g.Kind = trimList(g.Kind)
			gvk = g
		}
	}
	kind = gvk.Kind
	f.mu.Lock()
	var hit *apiRule
	for _, r := range f.api {
		if r.verb != verb || (r.kind != "" && r.kind != kind) {
			continue
		}
		if r.randomized {
			if f.rng != nil && f.rng.Float64() < r.p {
				hit = r
				break
			}
			continue
		}
		if r.remaining > 0 {
			r.remaining--
			hit = r
			break
		}
	}
	if hit != nil {
		f.log = append(f.log, Injection{Verb: verb, Kind: kind, What: string(hit.fault)})
	}
	f.mu.Unlock()
	if hit == nil {
		return nil
	}
	gr := schema.GroupResource{Group: gvk.Group, Resource: kind}
	switch hit.fault {
	case APIFaultConflict:
		return apierrors.NewConflict(gr, name, errors.New("simulator: injected conflict: the object has been modified; please apply your changes to the latest version and try again"))
	case APIFaultTimeout:
		return apierrors.NewTimeoutError(fmt.Sprintf("simulator: injected timeout on %s %s", verb, kind), 1)
	case APIFaultThrottled:
		return apierrors.NewTooManyRequests(fmt.Sprintf("simulator: injected throttling on %s %s", verb, kind), 1)
	}
	return apierrors.NewInternalError(fmt.Errorf("simulator: unknown fault %q", hit.fault))
}

func trimList(kind string) string {
	if len(kind) > 4 && kind[len(kind)-4:] == "List" {
		return kind[:len(kind)-4]
	}
	return kind
}

// Interceptor returns controller-runtime interceptor functions that inject
// the API faults; pass them to WithInterceptor, or to
// interceptor.NewClient to wrap any client (including envtest's).
func (f *Faults) Interceptor() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := f.apiFault(c, verbGet, obj, key.Name); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := f.apiFault(c, verbList, list, ""); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := f.apiFault(c, verbCreate, obj, obj.GetName()); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := f.apiFault(c, verbUpdate, obj, obj.GetName()); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := f.apiFault(c, verbPatch, obj, obj.GetName()); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := f.apiFault(c, verbDelete, obj, obj.GetName()); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := f.apiFault(c, Verb("create/"+sub), obj, obj.GetName()); err != nil {
				return err
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := f.apiFault(c, Verb("update/"+sub), obj, obj.GetName()); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := f.apiFault(c, Verb("patch/"+sub), obj, obj.GetName()); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// DriveClock keeps stepping c by quantum whenever something waits on it
// (a Runner's retry backoff, a timer), so code that sleeps on a FakeClock
// runs at full speed. Call the returned function to stop it. A nil c has
// nothing to drive: stop does nothing.
func DriveClock(c *testingclock.FakeClock, quantum time.Duration) (stop func()) {
	if c == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if c.HasWaiters() {
					c.Step(quantum)
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// SkipAheadClock is a clock.Clock over a FakeClock whose After and Sleep
// do not wait: they step the FakeClock by the duration and return at
// once. Give it to a nodeexec.Runner (nodeexec.RunnerOptions.Clock) and its retry
// backoffs cost no wall time while still showing in virtual time, with no
// goroutine polling the clock as DriveClock does. Timers and tickers
// (NewTimer, Tick, AfterFunc) are the FakeClock's own and still wait for
// someone to step it.
type SkipAheadClock struct {
	*testingclock.FakeClock
}

// After steps the clock by d and returns a channel holding the new time.
// Without a FakeClock the channel holds the zero time.
func (c SkipAheadClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if c.FakeClock == nil {
		ch <- time.Time{}
		return ch
	}
	c.Step(max(d, 0))
	ch <- c.Now()
	return ch
}

// Now is the FakeClock's time (the zero time without a FakeClock).
func (c SkipAheadClock) Now() time.Time {
	if c.FakeClock == nil {
		return time.Time{}
	}
	return c.FakeClock.Now()
}

// Since is the time elapsed since t on the FakeClock (0 without one).
func (c SkipAheadClock) Since(t time.Time) time.Duration {
	if c.FakeClock == nil {
		return 0
	}
	return c.FakeClock.Since(t)
}

// Sleep steps the clock by d (without a FakeClock it returns at once).
func (c SkipAheadClock) Sleep(d time.Duration) {
	if c.FakeClock != nil {
		c.Step(max(d, 0))
	}
}

// String renders "node/step: what" for host faults and "verb Kind: what"
// for API faults.
func (i Injection) String() string {
	if i.Verb != "" {
		return fmt.Sprintf("%s %s: %s", i.Verb, i.Kind, i.What)
	}
	if i.Node == "" {
		return fmt.Sprintf("%s: %s", i.Step, i.What)
	}
	return fmt.Sprintf("%s/%s: %s", i.Node, i.Step, i.What)
}
