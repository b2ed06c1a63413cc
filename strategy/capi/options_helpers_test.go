package capi_test

import (
	"time"

	"k8s.io/utils/clock"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// updOpt changes one capi.UpdaterOptions field, so that test helpers can
// take a few settings on top of their own.
type updOpt func(*capi.UpdaterOptions)

// updaterOpts applies opts in order to zero UpdaterOptions.
func updaterOpts(opts ...updOpt) capi.UpdaterOptions {
	var o capi.UpdaterOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

func withWorkloadClientset(cs workload.Clientset) updOpt {
	return func(o *capi.UpdaterOptions) { o.Clientset = cs }
}
func withoutDrain() updOpt   { return func(o *capi.UpdaterOptions) { o.SkipDrain = true } }
func withoutPrePull() updOpt { return func(o *capi.UpdaterOptions) { o.SkipPrePull = true } }
func withDrainAttempt(d time.Duration) updOpt {
	return func(o *capi.UpdaterOptions) { o.DrainAttempt = d }
}
func withPrePullTimeout(d time.Duration) updOpt {
	return func(o *capi.UpdaterOptions) { o.PrePullTimeout = d }
}
func withNodeGoneGrace(d time.Duration) updOpt {
	return func(o *capi.UpdaterOptions) { o.NodeGoneGrace = d }
}
func withUpdateTimeout(d time.Duration) updOpt {
	return func(o *capi.UpdaterOptions) { o.UpdateTimeout = d }
}
func withDrainOptions(opts ...drain.Option) updOpt {
	return func(o *capi.UpdaterOptions) { o.DrainOptions = append(o.DrainOptions, opts...) }
}
func withPodOptions(opts ...nodepod.Option) updOpt {
	return func(o *capi.UpdaterOptions) { o.PodOptions = append(o.PodOptions, opts...) }
}
func withUpdaterClock(c clock.PassiveClock) updOpt {
	return func(o *capi.UpdaterOptions) { o.Clock = c }
}
func withUpdaterMetrics(m *capi.Metrics) updOpt {
	return func(o *capi.UpdaterOptions) { o.Metrics = m }
}
func withGates(gs ...strategy.Gate) updOpt {
	return func(o *capi.UpdaterOptions) { o.Gates = append(o.Gates, gs...) }
}
func withRetryAfter(seconds int32) updOpt {
	return func(o *capi.UpdaterOptions) { o.RetryAfter = time.Duration(seconds) * time.Second }
}

// extOpt changes one capi.ExtensionOptions field.
type extOpt func(*capi.ExtensionOptions)

// extensionOpts applies opts in order to zero ExtensionOptions.
func extensionOpts(opts ...extOpt) capi.ExtensionOptions {
	var o capi.ExtensionOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

func withDiffOptions(opts ...diff.Option) extOpt {
	return func(o *capi.ExtensionOptions) { o.DiffOptions = append(o.DiffOptions, opts...) }
}
func withUpgraderImages(m capi.ImagesByVersion) extOpt {
	return func(o *capi.ExtensionOptions) { o.Images = m }
}
func withChecks(cs ...capi.Check) extOpt {
	return func(o *capi.ExtensionOptions) { o.Checks = append(o.Checks, cs...) }
}
func withInfrastructureDryRun(c client.Client) extOpt {
	return func(o *capi.ExtensionOptions) { o.InfrastructureDryRun = c }
}
func withFailurePolicy(p runtimehooksv1.FailurePolicy) extOpt {
	return func(o *capi.ExtensionOptions) { o.FailurePolicy = p }
}
