package strategy

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestStrategies(t *testing.T) {
	noChangeD := Decision{Outcome: OutcomeNoChange, Message: "no changes"}
	inPlaceD := Decision{Outcome: OutcomeInPlace, Message: "in place: 1 changes covered by k8s"}
	replaceD := Decision{Outcome: OutcomeReplace, Message: "cannot update in place: 1 change not covered: x (Other)"}
	rolling, err := RollingReplaceStrategy(RollingUpdate{})
	require.NoError(t, err)
	fallback, err := FallbackStrategy(ReplaceFirstStrategy())
	require.NoError(t, err)
	custom, err := NewStrategy("custom", func(d Decision) (Choice, bool) {
		return Choice{Method: MethodOnDelete, Reason: "always"}, d.Outcome == OutcomeReplace
	})
	require.NoError(t, err)

	type want struct {
		method Method
		ok     bool
	}
	tests := []struct {
		name                       string
		s                          Strategy
		strategy                   string
		noChange, inPlace, replace want
	}{
		{"in-place", InPlaceStrategy(), "in-place", want{MethodSkip, true}, want{MethodInPlace, true}, want{"", false}},
		{"rolling", rolling, "rolling-replace", want{MethodSkip, true}, want{MethodReplace, true}, want{MethodReplace, true}},
		{"replace-first", ReplaceFirstStrategy(), "replace-first", want{MethodSkip, true}, want{MethodReplaceFirst, true}, want{MethodReplaceFirst, true}},
		{"on-delete", OnDeleteStrategy(), "on-delete", want{MethodSkip, true}, want{MethodOnDelete, true}, want{MethodOnDelete, true}},
		{"fallback", fallback, "fallback(replace-first)", want{MethodSkip, true}, want{MethodInPlace, true}, want{MethodReplaceFirst, true}},
		{"never-replace", NeverReplaceStrategy(), "never-replace", want{MethodSkip, true}, want{MethodInPlace, true}, want{MethodBlocked, true}},
		{"custom", custom, "custom", want{"", false}, want{"", false}, want{MethodOnDelete, true}},
		{"list in-place then never", Strategies{InPlaceStrategy(), NeverReplaceStrategy()}, "", want{MethodSkip, true}, want{MethodInPlace, true}, want{MethodBlocked, true}},
		{"list in-place only fails closed", Strategies{nil, InPlaceStrategy()}, "", want{MethodSkip, true}, want{MethodInPlace, true}, want{MethodBlocked, true}},
		{"empty list", Strategies{}, "[]", want{MethodSkip, true}, want{MethodBlocked, true}, want{MethodBlocked, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, c := range []struct {
				d Decision
				w want
			}{{noChangeD, tt.noChange}, {inPlaceD, tt.inPlace}, {replaceD, tt.replace}} {
				got, ok := tt.s.Choose(c.d)
				require.Equal(t, c.w.ok, ok, "%s decision", c.d.Outcome)
				if !ok {
					continue
				}
				require.Equal(t, c.w.method, got.Method, "%s decision", c.d.Outcome)
				require.NotEmpty(t, got.Reason)
				require.NotEmpty(t, got.Strategy)
				if tt.strategy != "" {
					require.Equal(t, tt.strategy, got.Strategy)
				}
			}
		})
	}
}

func TestStrategyReasonsNameTheDecision(t *testing.T) {
	d := Decision{Outcome: OutcomeReplace, Message: "cannot update in place: 1 change not covered: infrastructure.spec.ami.id (InfrastructureImage)"}
	c, _ := NeverReplaceStrategy().Choose(d)
	require.Contains(t, c.Reason, "infrastructure.spec.ami.id")
	c, _ = Strategies{InPlaceStrategy()}.Choose(d)
	require.Equal(t, MethodBlocked, c.Method)
	require.Contains(t, c.Reason, "no strategy handles a Replace decision")
}

func TestInvalidStrategies(t *testing.T) {
	_, err := NewStrategy("", func(Decision) (Choice, bool) { return Choice{}, false })
	require.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = NewStrategy("x", nil)
	require.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = FallbackStrategy(nil)
	require.ErrorIs(t, err, ErrInvalidStrategy)
	_, err = RollingReplaceStrategy(RollingUpdate{MaxSurge: new(intstr.FromInt32(0)), MaxUnavailable: new(intstr.FromString("0%"))})
	require.ErrorIs(t, err, ErrInvalidStrategy)
}

func TestRollingUpdateLimits(t *testing.T) {
	i := func(n int32) *intstr.IntOrString { return new(intstr.FromInt32(n)) }
	s := func(v string) *intstr.IntOrString { return new(intstr.FromString(v)) }
	tests := []struct {
		name        string
		r           RollingUpdate
		replicas    int
		surge, unav int
		errField    string
	}{
		{"CAPI defaults", RollingUpdate{}, 10, 1, 0, ""},
		{"counts", RollingUpdate{MaxSurge: i(2), MaxUnavailable: i(3)}, 10, 2, 3, ""},
		{"25% of 10: surge rounds up, unavailable down", RollingUpdate{MaxSurge: s("25%"), MaxUnavailable: s("25%")}, 10, 3, 2, ""},
		{"1% of 3", RollingUpdate{MaxSurge: s("1%"), MaxUnavailable: s("1%")}, 3, 1, 0, ""},
		{"100%", RollingUpdate{MaxSurge: s("0%"), MaxUnavailable: s("100%")}, 7, 0, 7, ""},
		{"zero replicas", RollingUpdate{MaxSurge: s("50%"), MaxUnavailable: s("50%")}, 0, 0, 0, ""},
		{"negative surge", RollingUpdate{MaxSurge: i(-1)}, 10, 0, 0, "maxSurge"},
		{"negative unavailable", RollingUpdate{MaxUnavailable: i(-2)}, 10, 0, 0, "maxUnavailable"},
		{"percent over 100", RollingUpdate{MaxUnavailable: s("150%")}, 10, 0, 0, "maxUnavailable"},
		{"not a percent", RollingUpdate{MaxSurge: s("abc")}, 10, 0, 0, "maxSurge"},
		{"negative percent", RollingUpdate{MaxSurge: s("-5%")}, 10, 0, 0, "maxSurge"},
		{"both zero", RollingUpdate{MaxSurge: i(0), MaxUnavailable: s("0%")}, 10, 0, 0, "both 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			surge, unav, err := tt.r.Limits(tt.replicas)
			if tt.errField != "" {
				require.ErrorIs(t, err, ErrInvalidStrategy)
				require.Contains(t, err.Error(), tt.errField)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.surge, surge, "surge")
			require.Equal(t, tt.unav, unav, "unavailable")
		})
	}
}
