// Package drain cordons and drains a node before an in-place upgrade, and
// uncordons it after, without the two classic failure modes of node
// tooling: uncordoning a node someone else cordoned, and a drain that
// hangs on a PodDisruptionBudget with no explanation.
//
// Cordon records, in the node annotation AnnotationCordon, who cordoned
// the node and whether it was already unschedulable. Uncordon only lifts a
// cordon that the same owner placed on a schedulable node; another owner's
// record is an *OwnershipError, and a node that was already cordoned stays
// cordoned.
//
// Drain evicts through the Eviction API with k8s.io/kubectl/pkg/drain, so
// PodDisruptionBudgets are respected. DaemonSet and mirror pods are left
// alone, pods matching WithSkip (the upgrader pod: nodepod.Selector()) are
// left alone, and pods annotated karpenter.sh/do-not-disrupt=true block
// the drain before anything is evicted. When the drain cannot finish, the
// *DrainError lists every pod still there and the PDBs that allow it no
// disruption (Diagnose does the same on demand).
//
// WithClusterAPIRules makes Drain and Blockers follow Cluster API's own
// drain rules for a Machine (the pod label cluster.x-k8s.io/drain, the
// MachineDrainRules with their order and selectors, pods without a
// controller evicted with a warning); see ClusterAPIRules.
//
// It is not a scheduler-aware drain: it does not check that evicted pods
// fit elsewhere, and it does not wait for their replacements to be ready.
package drain
