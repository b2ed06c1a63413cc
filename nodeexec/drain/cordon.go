package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/upgradekit/upgradekit/internal/errtext"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// AnnotationCordon is the node annotation that records who cordoned the
// node through this package and whether it was already unschedulable.
const AnnotationCordon = "upgradekit.io/cordon"

// Ownership errors.
var (
	// ErrCordonedByOther: the node carries another owner's cordon record.
	ErrCordonedByOther = errors.New("node is cordoned by another owner")
	// ErrNotOwner: Uncordon was asked by an owner that did not cordon.
	ErrNotOwner = errors.New("node was cordoned by another owner")
	// ErrInvalidOwner: the owner string is empty.
	ErrInvalidOwner = errors.New("owner must not be empty")
)

// CordonRecord is stored, as JSON, in AnnotationCordon.
type CordonRecord struct {
	Owner string `json:"owner"`
	// PriorUnschedulable is true when the node was already cordoned
	// (by someone else) before we cordoned it: Uncordon then leaves it
	// cordoned.
	PriorUnschedulable bool        `json:"priorUnschedulable"`
	Time               metav1.Time `json:"time"`
}

// OwnershipError reports a cordon owned by someone else.
type OwnershipError struct {
	Node, Owner, Holder string
	Err                 error
}

// Error implements error.
func (e *OwnershipError) Error() string {
	return fmt.Sprintf("drain: node %s: %v: held by %s, requested by %s", errtext.Quote(e.Node), e.Err, errtext.Quote(e.Holder), errtext.Quote(e.Owner))
}

// Unwrap returns the sentinel.
func (e *OwnershipError) Unwrap() error { return e.Err }

func readRecord(n *corev1.Node) (*CordonRecord, error) {
	raw, ok := n.Annotations[AnnotationCordon]
	if !ok {
		return nil, nil
	}
	var r CordonRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Owner == "" {
		return nil, fmt.Errorf("drain: node %s: annotation %s is not a cordon record: %q", n.Name, AnnotationCordon, raw)
	}
	return &r, nil
}

// Cordon marks node unschedulable on behalf of owner and records the prior
// state in AnnotationCordon. It is idempotent for the same owner (and
// re-cordons if someone uncordoned in between); another owner's record is
// an *OwnershipError (ErrCordonedByOther). The change is a JSON merge
// patch of spec.unschedulable and the annotation (other fields are left
// alone), preconditioned on the resourceVersion the record was read at;
// conflicts are retried from a fresh read with backoff.
func Cordon(ctx context.Context, cs kubernetes.Interface, node, owner string) (CordonRecord, error) {
	if owner == "" {
		return CordonRecord{}, ErrInvalidOwner
	}
	if err := checkArgs(cs, node); err != nil {
		return CordonRecord{}, err
	}
	var rec CordonRecord
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		existing, err := readRecord(n)
		if err != nil {
			return err
		}
		if existing != nil && existing.Owner != owner {
			return &OwnershipError{Node: node, Owner: owner, Holder: existing.Owner, Err: ErrCordonedByOther}
		}
		if existing != nil {
			rec = *existing
			if n.Spec.Unschedulable {
				return nil
			}
		} else {
			rec = CordonRecord{Owner: owner, PriorUnschedulable: n.Spec.Unschedulable, Time: metav1.Now()}
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return patchNode(ctx, cs, n, ptr.To(string(raw)), ptr.To(true))
	})
	if err != nil {
		return CordonRecord{}, wrapf(err, "cordon node %s", node)
	}
	return rec, nil
}

// UncordonResult says what Uncordon did.
type UncordonResult struct {
	// Uncordoned is true when the node was made schedulable.
	Uncordoned bool
	// Reason explains a no-op: no record of ours, or the node was already
	// cordoned before we cordoned it.
	Reason string
}

// Uncordon undoes Cordon for owner: it removes the record and makes the
// node schedulable, unless the node was already unschedulable before the
// cordon (someone else's cordon, which we never lift). A node without a
// record is left alone; another owner's record is an *OwnershipError
// (ErrNotOwner).
func Uncordon(ctx context.Context, cs kubernetes.Interface, node, owner string) (UncordonResult, error) {
	if owner == "" {
		return UncordonResult{}, ErrInvalidOwner
	}
	if err := checkArgs(cs, node); err != nil {
		return UncordonResult{}, err
	}
	var res UncordonResult
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		res = UncordonResult{}
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		existing, err := readRecord(n)
		if err != nil {
			return err
		}
		switch {
		case existing == nil:
			res.Reason = "node carries no cordon record of ours; left as is"
			return nil
		case existing.Owner != owner:
			return &OwnershipError{Node: node, Owner: owner, Holder: existing.Owner, Err: ErrNotOwner}
		}
		var unschedulable *bool
		if existing.PriorUnschedulable {
			res.Reason = "node was already cordoned before we cordoned it; left cordoned"
		} else {
			unschedulable = ptr.To(false)
			res.Uncordoned = true
		}
		return patchNode(ctx, cs, n, nil, unschedulable)
	})
	if err != nil {
		return UncordonResult{}, wrapf(err, "uncordon node %s", node)
	}
	return res, nil
}

// conflictBackoff spaces out retries after a conflict: node objects change
// often (kubelet status updates), and the record must be written against
// the version it was read from. About 13s in all.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 5 * time.Second}

// patchNode sets (or, with a nil record, removes) the cordon record and,
// when unschedulable is not nil, spec.unschedulable, with a JSON merge
// patch like kubectl cordon: it touches nothing else, so fields this
// client does not know survive. The resourceVersion read with the record
// is a precondition, so a record changed meanwhile is a Conflict (retried
// from a fresh read), never overwritten.
func patchNode(ctx context.Context, cs kubernetes.Interface, n *corev1.Node, record *string, unschedulable *bool) error {
	type meta struct {
		ResourceVersion string             `json:"resourceVersion"`
		Annotations     map[string]*string `json:"annotations"`
	}
	type spec struct {
		Unschedulable *bool `json:"unschedulable,omitempty"`
	}
	patch := struct {
		Metadata meta  `json:"metadata"`
		Spec     *spec `json:"spec,omitempty"`
	}{Metadata: meta{ResourceVersion: n.ResourceVersion, Annotations: map[string]*string{AnnotationCordon: record}}}
	if unschedulable != nil {
		patch.Spec = &spec{Unschedulable: unschedulable}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func wrapf(err error, format string, args ...any) error {
	var oe *OwnershipError
	if errors.As(err, &oe) {
		return err
	}
	return fmt.Errorf("drain: %s: %w", fmt.Sprintf(format, args...), err)
}
