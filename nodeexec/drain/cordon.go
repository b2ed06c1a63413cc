package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
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
	return fmt.Sprintf("drain: node %s: %v: held by %q, requested by %q", e.Node, e.Err, e.Holder, e.Owner)
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
// an *OwnershipError (ErrCordonedByOther). Updates use the node's
// resourceVersion and retry on conflict.
func Cordon(ctx context.Context, cs kubernetes.Interface, node, owner string) (CordonRecord, error) {
	if owner == "" {
		return CordonRecord{}, ErrInvalidOwner
	}
	var rec CordonRecord
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
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
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[AnnotationCordon] = string(raw)
		n.Spec.Unschedulable = true
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
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
	var res UncordonResult
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
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
		delete(n.Annotations, AnnotationCordon)
		if existing.PriorUnschedulable {
			res.Reason = "node was already cordoned before we cordoned it; left cordoned"
		} else {
			n.Spec.Unschedulable = false
			res.Uncordoned = true
		}
		_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return UncordonResult{}, wrapf(err, "uncordon node %s", node)
	}
	return res, nil
}

func wrapf(err error, format string, args ...any) error {
	var oe *OwnershipError
	if errors.As(err, &oe) {
		return err
	}
	return fmt.Errorf("drain: %s: %w", fmt.Sprintf(format, args...), err)
}
