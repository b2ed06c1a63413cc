package simulator

import "github.com/upgradekit/upgradekit/nodeexec/nodepod"

// Names fake's external tests (package fake_test) use that users do not
// need.
const (
	AnswerDone           = answerDone
	AnswerFailure        = answerFailure
	FailedAnnotation     = failedAnnotation
	SimulatorCordonOwner = simulatorCordonOwner
)

// WithMaxRestarts gives o with Options.maxRestarts set to n.
func WithMaxRestarts(o Options, n int) Options { o.maxRestarts = &n; return o }

// WithUpdateCallBudget gives o with Options.updateCallBudget set to n.
func WithUpdateCallBudget(o Options, n int) Options { o.updateCallBudget = &n; return o }

// WithUpgraderPodOptions gives o with Options.upgraderPodOptions set to
// opts (none: an empty, not nil, list, which replaces the defaults).
func WithUpgraderPodOptions(o Options, opts ...nodepod.Option) Options {
	o.upgraderPodOptions = append([]nodepod.Option{}, opts...)
	return o
}
