package nodeexec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Namespace names a Linux namespace of the target process that a step
// enters through nsenter.
type Namespace string

// The namespaces a step may enter. They map one to one onto nsenter's
// --mount, --uts, --ipc, --net and --pid flags.
const (
	NamespaceMount Namespace = "mount"
	NamespaceUTS   Namespace = "uts"
	NamespaceIPC   Namespace = "ipc"
	NamespaceNet   Namespace = "net"
	NamespacePID   Namespace = "pid"
)

// canonicalNamespaces is the order in which namespace flags are emitted.
var canonicalNamespaces = []Namespace{NamespaceMount, NamespaceUTS, NamespaceIPC, NamespaceNet, NamespacePID}

// DefaultNamespaces returns the namespaces a step enters when it names
// none: mount, uts, ipc and net of the target (PID 1 of the host by
// default), the same set EKS Anywhere's upgrader uses. The PID namespace is
// not entered by default: with hostPID the pod already shares it.
func DefaultNamespaces() []Namespace {
	return []Namespace{NamespaceMount, NamespaceUTS, NamespaceIPC, NamespaceNet}
}

func knownNamespace(n Namespace) bool {
	for _, k := range canonicalNamespaces {
		if n == k {
			return true
		}
	}
	return false
}

// EnvVar is one environment variable for a step. User-supplied values are
// passed to steps through EnvVar or as separate argv elements, never by
// splicing them into a command string.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// RetryPolicy is a step's retry budget. Attempts is the total number of
// runs (0 and 1 both mean "no retry"); the wait before retry n is Backoff
// doubled n-1 times, capped at MaxBackoff when MaxBackoff is positive.
type RetryPolicy struct {
	Attempts   int           `json:"attempts,omitempty"`
	Backoff    time.Duration `json:"backoff,omitempty"`
	MaxBackoff time.Duration `json:"maxBackoff,omitempty"`
}

func (r RetryPolicy) attempts() int {
	if r.Attempts < 1 {
		return 1
	}
	return r.Attempts
}

// delay returns the wait before attempt n+1 after attempt n (n >= 1) failed.
func (r RetryPolicy) delay(n int) time.Duration {
	d := r.Backoff
	for i := 1; i < n && d > 0; i++ {
		if d > math.MaxInt64/2 { // doubling would overflow
			d = math.MaxInt64
			break
		}
		d *= 2
	}
	if r.MaxBackoff > 0 && d > r.MaxBackoff {
		return r.MaxBackoff
	}
	return d
}

// InterruptPolicy says what the runner does, on resume, with a step the
// journal shows as started but not finished (the runner crashed or the pod
// was restarted while it ran).
type InterruptPolicy string

// Interrupt policies. The zero value picks a default: Check when the step
// has a check argv, Rerun when it is Idempotent, Stop otherwise.
const (
	// InterruptPolicyDefault derives the policy from the step (see above).
	InterruptPolicyDefault InterruptPolicy = ""
	// InterruptPolicyRerun runs the step again. Only for idempotent steps.
	InterruptPolicyRerun InterruptPolicy = "Rerun"
	// InterruptPolicyCheck runs the check argv: exit 0 means the step completed
	// before the interruption and it is marked succeeded; any other exit
	// code means it did not, and it is run again.
	InterruptPolicyCheck InterruptPolicy = "Check"
	// InterruptPolicyRollback runs the step's rollback argv (restoring the
	// backup taken before the first run) and then runs the step again.
	InterruptPolicyRollback InterruptPolicy = "Rollback"
	// InterruptPolicyStop ends the plan in PlanStateNeedsAttention without touching
	// the host: a human (or a higher-level controller) decides.
	InterruptPolicyStop InterruptPolicy = "Stop"
)

// Step is one command run on the node.
//
// Argv is executed directly (execve), never through a shell. A step that
// needs shell features must say so explicitly with ShellArgv, which keeps
// the script constant and passes every variable part as a positional
// argument.
type Step struct {
	// Name identifies the step in the journal, in logs and as the init
	// container name; it must be a DNS-1123 label.
	Name string `json:"name"`
	// Argv is the program and its arguments.
	Argv []string `json:"argv"`
	// Env is added to the runner's base environment.
	Env []EnvVar `json:"env,omitempty"`
	// Namespaces of the target process to enter; empty means
	// DefaultNamespaces.
	Namespaces []Namespace `json:"namespaces,omitempty"`
	// InContainer runs the step in the runner's own namespaces (no
	// nsenter), for work that needs the pod's service account rather than
	// the host.
	InContainer bool `json:"inContainer,omitempty"`
	// Timeout bounds one attempt (and each check, backup and rollback run);
	// zero means no per-step deadline.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Retry is the retry budget for the main argv.
	Retry RetryPolicy `json:"retry,omitempty"`
	// Idempotent declares that running the step twice is safe.
	Idempotent bool `json:"idempotent,omitempty"`
	// Check, when set, is run before the step: exit code 0 means "already
	// done" and the step is skipped. It is also what InterruptPolicyCheck runs.
	Check []string `json:"check,omitempty"`
	// Backup is run once, before the first attempt; the journal records
	// that it ran so a resumed runner never overwrites a good backup with
	// half-upgraded state.
	Backup []string `json:"backup,omitempty"`
	// Rollback undoes the step (typically restoring Backup). It is used
	// by InterruptPolicyRollback and by plan rollback on failure.
	Rollback []string `json:"rollback,omitempty"`
	// OnInterrupt picks the resume behaviour; see InterruptPolicy.
	OnInterrupt InterruptPolicy `json:"onInterrupt,omitempty"`
	// NothingToUndo declares that the step leaves nothing a plan rollback
	// has to undo (a service restart, a verification, a snapshot), so
	// rollback passes over it. A completed step with neither Rollback nor
	// NothingToUndo stops a plan rollback in PlanStateNeedsAttention: undoing
	// the steps before it would put old components under whatever it
	// changed (old binaries under an upgraded control plane, say).
	NothingToUndo bool `json:"nothingToUndo,omitempty"`
}

// EffectiveInterruptPolicy returns the policy the runner applies, with the
// defaults resolved.
func (s Step) EffectiveInterruptPolicy() InterruptPolicy {
	if s.OnInterrupt != InterruptPolicyDefault {
		return s.OnInterrupt
	}
	switch {
	case len(s.Check) > 0:
		return InterruptPolicyCheck
	case s.Idempotent:
		return InterruptPolicyRerun
	default:
		return InterruptPolicyStop
	}
}

// EffectiveNamespaces returns the namespaces the step enters, in canonical
// order (mount, uts, ipc, net, pid), or nil for an InContainer step.
func (s Step) EffectiveNamespaces() []Namespace {
	if s.InContainer {
		return nil
	}
	if len(s.Namespaces) == 0 {
		return DefaultNamespaces()
	}
	out := make([]Namespace, 0, len(s.Namespaces))
	for _, k := range canonicalNamespaces {
		for _, n := range s.Namespaces {
			if n == k {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// Plan is the ordered list of steps for one node plus metadata.
type Plan struct {
	// Name identifies the plan; it names the journal file and the pod, so
	// it must be a DNS-1123 label.
	Name string `json:"name"`
	// Node is the Kubernetes node the plan runs on.
	Node string `json:"node"`
	// Role is free-form metadata (the kubeadm library uses
	// "first-control-plane", "control-plane" and "worker").
	Role string `json:"role,omitempty"`
	// FromVersion and ToVersion are informational metadata.
	FromVersion string `json:"fromVersion,omitempty"`
	ToVersion   string `json:"toVersion,omitempty"`
	// Steps run in order.
	Steps []Step `json:"steps"`
	// RollbackOnFailure rolls back the failed step and every completed
	// step, in reverse order, when a step exhausts its retry budget. The
	// rollback stops in PlanStateNeedsAttention at a completed step that has
	// no Rollback and does not declare NothingToUndo.
	RollbackOnFailure bool `json:"rollbackOnFailure,omitempty"`
}

// CheckPlanName returns a *ValidationError (field "name", wrapping ErrInvalidPlan)
// unless name is a valid plan name: a DNS-1123 label, so it is safe as a
// file name in the journal directory and as part of a pod name.
func CheckPlanName(name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return &ValidationError{Field: "name", Err: errInvalidName, Detail: fmt.Sprintf("%s: %s", errtext.Quote(name), strings.Join(msgs, "; "))}
	}
	return nil
}

// Validate checks the plan and returns every problem found, joined; each
// is a *ValidationError that unwraps to ErrInvalidPlan and a specific
// sentinel; its Field names the problem.
func (p Plan) Validate() error {
	var errs []error
	add := func(field string, sentinel error, detail string, args ...any) {
		errs = append(errs, &ValidationError{Field: field, Err: sentinel, Detail: errtext.Clip(fmt.Sprintf(detail, args...))})
	}
	if err := CheckPlanName(p.Name); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsDNS1123Subdomain(p.Node); len(msgs) > 0 {
		add("node", errInvalidName, "%s: %s", errtext.Quote(p.Node), strings.Join(msgs, "; "))
	}
	if len(p.Steps) == 0 {
		add("steps", errNoSteps, "")
	}
	seen := make(map[string]int, len(p.Steps))
	for i, s := range p.Steps {
		f := fmt.Sprintf("steps[%d]", i)
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			add(f+".name", errInvalidName, "%q: %s", s.Name, strings.Join(msgs, "; "))
		} else if j, dup := seen[s.Name]; dup {
			add(f+".name", errDuplicateStep, "%q also used by steps[%d]", s.Name, j)
		} else {
			seen[s.Name] = i
		}
		validateArgv(f+".argv", s.Argv, true, add)
		validateArgv(f+".check", s.Check, false, add)
		validateArgv(f+".backup", s.Backup, false, add)
		validateArgv(f+".rollback", s.Rollback, false, add)
		nsSeen := map[Namespace]bool{}
		for k, n := range s.Namespaces {
			if !knownNamespace(n) {
				add(fmt.Sprintf("%s.namespaces[%d]", f, k), errUnknownNamespace, "%q (want one of mount, uts, ipc, net, pid)", n)
			} else if nsSeen[n] {
				add(fmt.Sprintf("%s.namespaces[%d]", f, k), errUnknownNamespace, "%q listed twice", n)
			}
			nsSeen[n] = true
		}
		if s.NothingToUndo && s.Rollback != nil {
			add(f+".nothingToUndo", errConflictingFields, "a step with a rollback argv has something to undo")
		}
		if s.InContainer && len(s.Namespaces) > 0 {
			add(f+".namespaces", errConflictingFields, "inContainer steps enter no host namespace")
		}
		for k, e := range s.Env {
			if e.Name == "" || strings.ContainsAny(e.Name, "=\x00") || strings.ContainsRune(e.Value, 0) {
				add(fmt.Sprintf("%s.env[%d]", f, k), errInvalidEnv, "%q", e.Name)
			}
		}
		if s.Timeout < 0 {
			add(f+".timeout", errNegativeDuration, "%v", s.Timeout)
		}
		if s.Retry.Attempts < 0 {
			add(f+".retry.attempts", errNegativeDuration, "%d", s.Retry.Attempts)
		}
		if s.Retry.Backoff < 0 {
			add(f+".retry.backoff", errNegativeDuration, "%v", s.Retry.Backoff)
		}
		if s.Retry.MaxBackoff < 0 {
			add(f+".retry.maxBackoff", errNegativeDuration, "%v", s.Retry.MaxBackoff)
		}
		switch s.OnInterrupt {
		case InterruptPolicyDefault, InterruptPolicyRerun, InterruptPolicyStop:
		case InterruptPolicyCheck:
			if len(s.Check) == 0 {
				add(f+".onInterrupt", errInvalidPolicy, "Check needs a check argv")
			}
		case InterruptPolicyRollback:
			if len(s.Rollback) == 0 {
				add(f+".onInterrupt", errInvalidPolicy, "Rollback needs a rollback argv")
			}
		default:
			add(f+".onInterrupt", errInvalidPolicy, "%q", s.OnInterrupt)
		}
	}
	return errors.Join(errtext.Cut(errs)...)
}

func validateArgv(field string, argv []string, required bool, add func(string, error, string, ...any)) {
	if argv == nil && !required {
		return
	}
	if len(argv) == 0 || argv[0] == "" {
		add(field, errEmptyArgv, "")
		return
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			add(fmt.Sprintf("%s[%d]", field, i), errInvalidArgv, "")
		}
	}
}

// Fingerprint is a stable hash of everything in the plan. The journal
// records it; a journal written for a plan with a different fingerprint is
// refused (ErrJournalMismatch) rather than applied to the wrong plan.
//
// Empty and nil Env or Namespaces lists hash the same (they mean the same).
func (p Plan) Fingerprint() string {
	b, err := json.Marshal(p.normalized())
	if err != nil { // a Plan holds only strings, numbers, bools and slices
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// normalized returns a copy with empty Env and Namespaces lists set to
// nil, the form JSON round trips produce.
func (p Plan) normalized() Plan {
	steps := make([]Step, len(p.Steps))
	copy(steps, p.Steps)
	for i := range steps {
		if len(steps[i].Env) == 0 {
			steps[i].Env = nil
		}
		if len(steps[i].Namespaces) == 0 {
			steps[i].Namespaces = nil
		}
	}
	p.Steps = steps
	return p
}

// EncodePlan returns the plan's JSON form, the format DecodePlan reads and
// the pod builder passes to the single-container runner.
func EncodePlan(p Plan) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// DecodePlan parses a plan written by EncodePlan. Unknown fields and
// trailing data are errors, and the decoded plan is validated.
func DecodePlan(data []byte) (Plan, error) {
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Plan{}, fmt.Errorf("nodeexec: decode plan: %w: %w", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Plan{}, fmt.Errorf("nodeexec: decode plan: %w: trailing data after the plan object", ErrMalformed)
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p.normalized(), nil
}

// ShellArgv returns an argv that runs script with /bin/sh -c. It is the
// explicit opt-in to a shell: script should be a constant written by the
// caller, and every variable part (paths, versions, node names) goes in
// args, which the script reads as "$1", "$2", ... so it is never parsed as
// shell syntax. Example:
//
//	ShellArgv(`cp -a -- "$1"/. /`, stagingDir)
func ShellArgv(script string, args ...string) []string {
	out := make([]string, 0, 4+len(args))
	out = append(out, "/bin/sh", "-c", script, "sh")
	return append(out, args...)
}
