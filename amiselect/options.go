package amiselect

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Option changes how Validate, Resolve, NewCatalog, LoadCatalog and NewCache
// behave. Each option says which of them read it; the others ignore it.
type Option func(*options)

type options struct {
	family       Family
	k8sVersion   string
	clock        clock.PassiveClock
	minAge       time.Duration
	pin          *Resolution
	log          logr.Logger
	accountID    string
	imageTTL     time.Duration
	parameterTTL func(name string) time.Duration
}

func newOptions(opts []Option) *options {
	o := &options{
		clock:        clock.RealClock{},
		log:          logr.Discard(),
		imageTTL:     time.Minute,
		parameterTTL: defaultParameterTTL,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	return o
}

// WithFamily sets the node class's amiFamily (Validate, Resolve: it must
// agree with an alias or be Custom).
func WithFamily(f Family) Option { return func(o *options) { o.family = f } }

// WithKubernetesVersion sets the cluster's Kubernetes version, "1.31"
// (Resolve: required when the terms use an alias).
func WithKubernetesVersion(v string) Option { return func(o *options) { o.k8sVersion = v } }

// WithClock sets the clock used for deprecation, minimum age, the resolution
// time stamp and cache expiry (Resolve, NewCatalog, LoadCatalog, NewCache).
// The default is the real clock.
func WithClock(c clock.PassiveClock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithMinAge makes Resolve pass over images created less than d ago, so a new
// release is only chosen once it has aged (staged promotion). Skipped images
// are recorded in Resolution.Skipped.
func WithMinAge(d time.Duration) Option { return func(o *options) { o.minAge = d } }

// WithPin restricts Resolve to the images an earlier resolution chose, so an
// environment runs only what an earlier stage already runs (dev -> staging ->
// prod). Pass the earlier stage's stored Resolution; nil means no pin.
func WithPin(earlier *Resolution) Option { return func(o *options) { o.pin = earlier } }

// WithLogger sets a logger for skipped parameters and images at V(1)
// (Resolve).
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithAccountID sets the account id the owner "self" stands for (NewCatalog,
// LoadCatalog).
func WithAccountID(id string) Option { return func(o *options) { o.accountID = id } }

// WithCacheTTL sets how long NewCache keeps DescribeImages answers (default 1
// minute) and SSM parameter values (default: 24 hours for parameters under
// /aws/service/, 5 minutes for others, as Karpenter does). A zero duration
// keeps the default.
func WithCacheTTL(images, parameters time.Duration) Option {
	return func(o *options) {
		if images > 0 {
			o.imageTTL = images
		}
		if parameters > 0 {
			o.parameterTTL = func(string) time.Duration { return parameters }
		}
	}
}
