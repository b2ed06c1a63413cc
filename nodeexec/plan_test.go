package nodeexec

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func validPlan() Plan {
	return Plan{
		Name: "upgrade-node-1",
		Node: "node-1",
		Steps: []Step{
			{Name: "a", Argv: []string{"true"}, Idempotent: true},
			{Name: "b", Argv: []string{"echo", "hi"}, Check: []string{"test", "-f", "/done"}},
		},
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Plan)
		want   []error
		field  string
	}{
		{"valid", func(*Plan) {}, nil, ""},
		{"empty argv", func(p *Plan) { p.Steps[0].Argv = nil }, []error{errEmptyArgv}, "steps[0].argv"},
		{"empty program", func(p *Plan) { p.Steps[0].Argv = []string{"", "x"} }, []error{errEmptyArgv}, "steps[0].argv"},
		{"nul in argv", func(p *Plan) { p.Steps[1].Argv = []string{"echo", "a\x00b"} }, []error{errInvalidArgv}, "steps[1].argv[1]"},
		{"empty check argv", func(p *Plan) { p.Steps[1].Check = []string{} }, []error{errEmptyArgv}, "steps[1].check"},
		{"unknown namespace", func(p *Plan) { p.Steps[0].Namespaces = []Namespace{"mount", "cgroup"} }, []error{errUnknownNamespace}, "steps[0].namespaces[1]"},
		{"namespace twice", func(p *Plan) { p.Steps[0].Namespaces = []Namespace{"uts", "uts"} }, []error{errUnknownNamespace}, "steps[0].namespaces[1]"},
		{"in container with namespaces", func(p *Plan) { p.Steps[0].InContainer = true; p.Steps[0].Namespaces = []Namespace{"uts"} }, []error{errConflictingFields}, "steps[0].namespaces"},
		{"nothing to undo with a rollback", func(p *Plan) { p.Steps[0].NothingToUndo = true; p.Steps[0].Rollback = []string{"r"} }, []error{errConflictingFields}, "steps[0].nothingToUndo"},
		{"negative timeout", func(p *Plan) { p.Steps[0].Timeout = -time.Second }, []error{errNegativeDuration}, "steps[0].timeout"},
		{"negative attempts", func(p *Plan) { p.Steps[0].Retry.Attempts = -1 }, []error{errNegativeDuration}, "steps[0].retry.attempts"},
		{"negative backoff", func(p *Plan) { p.Steps[0].Retry.Backoff = -1 }, []error{errNegativeDuration}, "steps[0].retry.backoff"},
		{"negative max backoff", func(p *Plan) { p.Steps[0].Retry.MaxBackoff = -1 }, []error{errNegativeDuration}, "steps[0].retry.maxBackoff"},
		{"bad step name", func(p *Plan) { p.Steps[0].Name = "Bad_Name" }, []error{errInvalidName}, "steps[0].name"},
		{"duplicate step", func(p *Plan) { p.Steps[1].Name = "a" }, []error{errDuplicateStep}, "steps[1].name"},
		{"bad plan name", func(p *Plan) { p.Name = "" }, []error{errInvalidName}, "name"},
		{"bad node", func(p *Plan) { p.Node = "Node_1" }, []error{errInvalidName}, "node"},
		{"no steps", func(p *Plan) { p.Steps = nil }, []error{errNoSteps}, "steps"},
		{"env with =", func(p *Plan) { p.Steps[0].Env = []EnvVar{{Name: "A=B", Value: "x"}} }, []error{errInvalidEnv}, "steps[0].env[0]"},
		{"empty env name", func(p *Plan) { p.Steps[0].Env = []EnvVar{{Value: "x"}} }, []error{errInvalidEnv}, "steps[0].env[0]"},
		{"check policy without check", func(p *Plan) { p.Steps[0].OnInterrupt = InterruptPolicyCheck }, []error{errInvalidPolicy}, "steps[0].onInterrupt"},
		{"rollback policy without rollback", func(p *Plan) { p.Steps[0].OnInterrupt = InterruptPolicyRollback }, []error{errInvalidPolicy}, "steps[0].onInterrupt"},
		{"unknown policy", func(p *Plan) { p.Steps[0].OnInterrupt = "Pray" }, []error{errInvalidPolicy}, "steps[0].onInterrupt"},
		{"two problems", func(p *Plan) { p.Steps[0].Argv = nil; p.Steps[1].Timeout = -1 }, []error{errEmptyArgv, errNegativeDuration}, "steps[0].argv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPlan()
			tt.mutate(&p)
			err := p.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalidPlan)
			for _, w := range tt.want {
				require.ErrorIs(t, err, w)
			}
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tt.field, ve.Field)
			require.Contains(t, err.Error(), tt.field)
		})
	}
}

func TestEffectiveDefaults(t *testing.T) {
	s := Step{Name: "x", Argv: []string{"x"}}
	require.Equal(t, InterruptPolicyStop, s.EffectiveInterruptPolicy())
	s.Idempotent = true
	require.Equal(t, InterruptPolicyRerun, s.EffectiveInterruptPolicy())
	s.Check = []string{"c"}
	require.Equal(t, InterruptPolicyCheck, s.EffectiveInterruptPolicy())
	s.OnInterrupt = InterruptPolicyStop
	require.Equal(t, InterruptPolicyStop, s.EffectiveInterruptPolicy())

	require.Equal(t, DefaultNamespaces(), s.EffectiveNamespaces())
	s.Namespaces = []Namespace{NamespacePID, NamespaceMount, NamespaceNet}
	require.Equal(t, []Namespace{NamespaceMount, NamespaceNet, NamespacePID}, s.EffectiveNamespaces())
	s.InContainer = true
	require.Nil(t, s.EffectiveNamespaces())
}

func TestRetryDelay(t *testing.T) {
	r := RetryPolicy{Attempts: 5, Backoff: time.Second, MaxBackoff: 5 * time.Second}
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, r.delay(n))
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, got)
	require.Equal(t, time.Duration(0), RetryPolicy{}.delay(3))
	require.Equal(t, 1, RetryPolicy{}.attempts())
	huge := RetryPolicy{Backoff: time.Duration(1) << 62}
	require.Positive(t, huge.delay(10), "doubling must not overflow into a negative wait")
}

func TestEncodeDecodePlan(t *testing.T) {
	p := validPlan()
	p.Steps[0].Timeout = time.Minute
	p.Steps[0].Env = []EnvVar{{Name: "A", Value: "b c"}}
	p.Steps[1].Namespaces = []Namespace{NamespaceUTS}
	data, err := EncodePlan(p)
	require.NoError(t, err)
	got, err := DecodePlan(data)
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(p, got))
	require.Equal(t, p.Fingerprint(), got.Fingerprint())

	_, err = DecodePlan([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"]}],"extra":1}`))
	require.ErrorContains(t, err, "unknown field")
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodePlan([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"]}]} {}`))
	require.ErrorContains(t, err, "trailing data")
	require.ErrorIs(t, err, ErrMalformed)
	_, err = DecodePlan([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":[]}]}`))
	require.ErrorIs(t, err, errEmptyArgv)

	bad := validPlan()
	bad.Steps[0].Argv = nil
	_, err = EncodePlan(bad)
	require.ErrorIs(t, err, errEmptyArgv)
}

func TestFingerprintChangesWithContent(t *testing.T) {
	a, b := validPlan(), validPlan()
	require.Equal(t, a.Fingerprint(), b.Fingerprint())
	b.Steps[1].Argv = []string{"echo", "ho"}
	require.NotEqual(t, a.Fingerprint(), b.Fingerprint())
}

func TestFingerprintIgnoresEmptyVersusNil(t *testing.T) {
	// Found by FuzzDecodePlan: "env": [] must not change the identity of a
	// plan, or a journal would be refused after a harmless re-encoding.
	a, b := validPlan(), validPlan()
	b.Steps[0].Env = []EnvVar{}
	b.Steps[1].Namespaces = []Namespace{}
	require.Equal(t, a.Fingerprint(), b.Fingerprint())
	got, err := DecodePlan([]byte(`{"name":"x","node":"n","steps":[{"name":"a","argv":["true"],"env":[],"namespaces":[]}]}`))
	require.NoError(t, err)
	require.Nil(t, got.Steps[0].Env)
	require.Nil(t, got.Steps[0].Namespaces)
}

func TestShellArgv(t *testing.T) {
	got := ShellArgv(`cp -a -- "$1"/. /`, "/staging/dir; rm -rf /")
	require.Equal(t, []string{"/bin/sh", "-c", `cp -a -- "$1"/. /`, "sh", "/staging/dir; rm -rf /"}, got)
}

func TestNsenterArgv(t *testing.T) {
	got := NsenterArgv("/usr/bin/nsenter", Target{PID: 1, Namespaces: DefaultNamespaces()}, []string{"kubeadm", "version"})
	require.Equal(t, []string{"/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--", "kubeadm", "version"}, got)
}

func TestFromEnv(t *testing.T) {
	data, err := EncodePlan(validPlan())
	require.NoError(t, err)
	env := map[string]string{EnvPlan: string(data), EnvJournalDir: "/j", EnvTargetPID: "42", EnvNsenter: "/bin/nsenter"}
	cfg, err := FromEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "/j", cfg.JournalDir)
	require.Equal(t, 42, cfg.TargetPID)
	require.Equal(t, "/bin/nsenter", cfg.Executor().NsenterPath)
	require.Equal(t, RunnerOptions{JournalDir: "/j", TargetPID: 42}, cfg.RunnerOptions())

	_, err = FromEnv(func(string) string { return "" })
	require.ErrorIs(t, err, ErrMissingEnv)
	env[EnvTargetPID] = "0"
	_, err = FromEnv(func(k string) string { return env[k] })
	require.ErrorContains(t, err, EnvTargetPID)
	require.ErrorIs(t, err, ErrInvalidOption)
	env[EnvPlan] = "{"
	_, err = FromEnv(func(k string) string { return env[k] })
	require.ErrorIs(t, err, ErrMalformed)
	require.False(t, errors.Is(err, ErrMissingEnv))
}
