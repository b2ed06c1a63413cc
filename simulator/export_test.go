package simulator

// Names fake's external tests (package fake_test) use that users do not
// need.
const (
	AnswerDone           = answerDone
	AnswerFailure        = answerFailure
	FailedAnnotation     = failedAnnotation
	SimulatorCordonOwner = simulatorCordonOwner
)

var (
	WithMaxRestarts        = withMaxRestarts
	WithUpdateCallBudget   = withUpdateCallBudget
	WithUpgraderPodOptions = withUpgraderPodOptions
)
