package capi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// ErrWorkloadUnreachable is matched by WorkloadReachableCheck's errors,
// the declines (which also match ErrInfeasible) and the Failures alike.
var ErrWorkloadUnreachable = errors.New("workload cluster unreachable")

// Defaults of WorkloadReachableCheck.
const (
	// DefaultReachableTimeout bounds one reachability probe (the
	// kubeconfig secret read and one request to the workload cluster's API
	// server), well within HandlerTimeoutCanUpdate.
	DefaultReachableTimeout = 3 * time.Second
	// DefaultReachableCacheTTL is how long a probe's outcome is reused
	// for the same cluster: a KubeadmControlPlane asks once per machine,
	// a MachineDeployment once per MachineSet, in a burst.
	DefaultReachableCacheTTL = 30 * time.Second
)

// ReachableOptions configures WorkloadReachableCheck. The zero value is
// the default of each field.
type ReachableOptions struct {
	// Timeout bounds each probe (default DefaultReachableTimeout; a
	// non-positive value keeps the default).
	Timeout time.Duration
	// CacheTTL is how long a probe's outcome is reused for the same
	// cluster (default DefaultReachableCacheTTL; negative probes on every
	// call).
	CacheTTL time.Duration
	// Clock times the cache (default: the real clock).
	Clock clock.PassiveClock
}

// WorkloadReachableCheck declines an in-place update of a cluster whose
// workload cluster the extension cannot reach through get (in the example
// extension, workload.KubeconfigClient: the <cluster>-kubeconfig secret in
// the cluster's namespace): UpdateMachine could only wait for a client it
// never gets, and Cluster API cannot fall back to a replacement once the
// update is accepted. It probes with get and then one request to the
// workload cluster's API server (a list of at most one Node's metadata,
// which the updater needs anyway), bounded by ReachableOptions.Timeout, and
// reuses the outcome per cluster for ReachableOptions.CacheTTL.
//
// What does not pass by itself is declined (an error wrapping
// ErrInfeasible and ErrWorkloadUnreachable, whose message names the cause
// and says "permanent"): the kubeconfig secret is Forbidden (the
// extension's RoleBindings are not in the cluster's namespace) or
// NotFound, or holds no usable kubeconfig (ErrKubeconfigUnusable), or the
// workload API server refuses the kubeconfig's credentials (Unauthorized,
// Forbidden). Cluster API then replaces the machines; for a MachineSet it
// remembers that "no" for a day (per old and new MachineSet), so the
// rollout goes on by replacement even if the access is fixed meanwhile.
//
// Anything else (a timeout, a refused connection, a 5xx or 429 from
// either API server, a failed read of the secret that is not Forbidden or
// NotFound) may pass by itself: it is a Failure (an error wrapping
// ErrWorkloadUnreachable but not ErrInfeasible, whose message says
// "transient"), which Cluster API does not remember and asks again about,
// so a brief outage of the workload API server does not turn a whole
// MachineDeployment into replacements. While it lasts, the rollout waits;
// the message says why.
//
// The Extension runs checks only for changes it would apply in place: a
// request with no changes or one it declines anyway is not probed.
func WorkloadReachableCheck(get workload.Client, opts ReachableOptions) Check {
	r := &reachable{get: get, timeout: DefaultReachableTimeout, ttl: DefaultReachableCacheTTL,
		clock: clock.RealClock{}, cache: map[types.NamespacedName]reachResult{}}
	if opts.Timeout > 0 {
		r.timeout = opts.Timeout
	}
	switch {
	case opts.CacheTTL < 0:
		r.ttl = 0
	case opts.CacheTTL > 0:
		r.ttl = opts.CacheTTL
	}
	if opts.Clock != nil {
		r.clock = opts.Clock
	}
	return CheckFunc(r.check)
}

type reachable struct {
	get     workload.Client
	timeout time.Duration
	ttl     time.Duration
	clock   clock.PassiveClock

	mu    sync.Mutex
	cache map[types.NamespacedName]reachResult
}

type reachResult struct {
	at  time.Time
	err error
}

// maxReachCache bounds the cache: past it, expired entries are dropped.
const maxReachCache = 1024

func (r *reachable) check(ctx context.Context, req CheckRequest) error {
	if r.get == nil {
		return fmt.Errorf("%w: WorkloadReachableCheck: nil workload.Client", ErrInvalidOption)
	}
	var cluster types.NamespacedName
	switch m := req.Desired.Machine.(type) {
	case *clusterv1.Machine:
		cluster = types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
	case *clusterv1.MachineSet:
		cluster = types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
	default:
		return fmt.Errorf("workload cluster reachability: desired object is a %T, not a Machine or MachineSet", req.Desired.Machine)
	}
	if cluster.Namespace == "" || cluster.Name == "" {
		return fmt.Errorf("%w: desired spec.clusterName or metadata.namespace is missing", ErrIncompleteRequest)
	}
	now := r.clock.Now()
	r.mu.Lock()
	e, ok := r.cache[cluster]
	r.mu.Unlock()
	if ok && now.Sub(e.at) < r.ttl {
		return e.err
	}
	err := r.probe(ctx, cluster)
	if ctx.Err() != nil {
		return err // the caller gave up: nothing learnt about the cluster
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxReachCache {
		for k, v := range r.cache {
			if now.Sub(v.at) >= r.ttl {
				delete(r.cache, k)
			}
		}
	}
	if len(r.cache) < maxReachCache || ok {
		r.cache[cluster] = reachResult{at: now, err: err}
	}
	return err
}

// probe gets the cluster's client and makes one request with it.
func (r *reachable) probe(ctx context.Context, cluster types.NamespacedName) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c, err := r.get(ctx, cluster)
	if err != nil {
		if cause := permanentSecretError(err); cause != "" {
			return fmt.Errorf("%w: %w: cluster %s: the extension cannot use the kubeconfig secret %s/%s-kubeconfig (%s; permanent: it does not pass by itself, so the machines are replaced; in place needs the extension's two RoleBindings in namespace %s and the namespace in the ExtensionConfig's namespaceSelector): %s",
				ErrInfeasible, ErrWorkloadUnreachable, cluster, cluster.Namespace, cluster.Name, cause, cluster.Namespace, errtext.Clip(err.Error()))
		}
		return fmt.Errorf("%w: cluster %s: getting its client (transient: Cluster API asks again): %w", ErrWorkloadUnreachable, cluster, err)
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "NodeList"})
	if err := c.List(ctx, nodes, client.Limit(1)); err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return fmt.Errorf("%w: %w: cluster %s: its API server refuses the kubeconfig's credentials (%s; permanent: the machines are replaced): %s",
				ErrInfeasible, ErrWorkloadUnreachable, cluster, apierrors.ReasonForError(err), errtext.Clip(err.Error()))
		}
		return fmt.Errorf("%w: cluster %s: its API server did not answer a request bounded by %s (transient: Cluster API asks again): %w", ErrWorkloadUnreachable, cluster, r.timeout, err)
	}
	return nil
}

// permanentSecretError names why err (a workload.Client's) does not pass
// by itself, or is "" when it may.
func permanentSecretError(err error) string {
	switch {
	case errors.Is(err, workload.ErrKubeconfigUnusable):
		return "unusable"
	case apierrors.IsForbidden(err):
		return "Forbidden"
	case apierrors.IsNotFound(err):
		return "NotFound"
	}
	return ""
}
