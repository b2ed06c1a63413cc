package preview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// Snapshot is one workload cluster as Read found it on the management
// cluster and, when a workload reader was given, in the cluster itself.
// Maps are keyed by Machine name unless said otherwise.
type Snapshot struct {
	// Cluster is the Cluster object.
	Cluster *clusterv1.Cluster
	// ControlPlane is the cluster's KubeadmControlPlane; nil when its
	// control plane is something else (or none).
	ControlPlane *controlplanev1.KubeadmControlPlane
	// MachineDeployments and MachineSets are the cluster's (label
	// cluster.x-k8s.io/cluster-name), sorted by name.
	MachineDeployments []*clusterv1.MachineDeployment
	// MachineSets are the cluster's MachineSets, sorted by name.
	MachineSets []*clusterv1.MachineSet
	// Machines are the cluster's Machines, sorted by name.
	Machines []*clusterv1.Machine
	// KubeadmConfigs are the machines' bootstrap configs, by Machine name
	// (machines bootstrapped otherwise have none).
	KubeadmConfigs map[string]*bootstrapv1.KubeadmConfig
	// InfraMachines are the machines' infrastructure machines, by Machine
	// name.
	InfraMachines map[string]*unstructured.Unstructured
	// Nodes are the workload cluster's Nodes by name; nil when the
	// workload cluster was not read.
	Nodes map[string]*corev1.Node
	// DrainBlockers are, by node name, the pods that would stop the drain
	// before an update (drain.Blockers, with the options given to Read);
	// nil when the workload cluster was not read.
	DrainBlockers map[string][]drain.BlockedPod
	// MachineDrainRules are the MachineDrainRules of the Cluster's
	// namespace, by name, which the drain blockers follow as Cluster
	// API's drain and the extension's do (drain.WithClusterAPIRules); read
	// only with the workload cluster.
	MachineDrainRules []clusterv1.MachineDrainRule
}

// WorkloadReader gives a reader of a workload cluster (Nodes, Pods,
// PodDisruptionBudgets); workload.KubeconfigClient is one.
type WorkloadReader func(ctx context.Context, cluster client.ObjectKey) (client.Client, error)

// ReadOption configures Read.
type ReadOption func(*readOptions)

type readOptions struct {
	workload  WorkloadReader
	drainOpts []drain.Option
}

// WithWorkload reads Nodes, Pods and PodDisruptionBudgets of the workload
// cluster through get (and its Namespaces when the Cluster's namespace
// has MachineDrainRules), so the preview can say which nodes a drain
// would stop on, following Cluster API's drain rules for each node's
// Machine as both drains do. Without it the preview knows nothing of
// workloads and says so.
func WithWorkload(get WorkloadReader) ReadOption {
	return func(o *readOptions) { o.workload = get }
}

// WithDrainOptions are the options the extension drains with (its
// WithDrainOptions), so blockers are judged as its drain will judge
// them. The upgrader pods (nodepod.Selector in nodepod.DefaultNamespace)
// are always left out.
func WithDrainOptions(opts ...drain.Option) ReadOption {
	return func(o *readOptions) { o.drainOpts = append(o.drainOpts, opts...) }
}

// ErrNotFound is matched by Read's error when the Cluster does not exist.
var ErrNotFound = errors.New("not found")

// Read reads the cluster named key from the management cluster: the
// Cluster, its KubeadmControlPlane, MachineDeployments, MachineSets,
// Machines, KubeadmConfigs and infrastructure machines, with one List per
// kind (label cluster.x-k8s.io/cluster-name), so a cluster of a thousand
// machines costs a handful of requests. mgmt needs get/list on those
// kinds, and with WithWorkload list on MachineDrainRules, and nothing
// else. Errors name what could not be read.
func Read(ctx context.Context, mgmt client.Client, key client.ObjectKey, opts ...ReadOption) (*Snapshot, error) {
	if mgmt == nil {
		return nil, fmt.Errorf("%w: Read: nil management client", ErrInvalidArgument)
	}
	if errs := validation.IsDNS1123Label(key.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("%w: Read: cluster namespace %s: %s", ErrInvalidArgument, errtext.Quote(key.Namespace), errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(key.Name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: Read: cluster name %s: %s", ErrInvalidArgument, errtext.Quote(key.Name), errs[0])
	}
	o := readOptions{}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	s := &Snapshot{Cluster: &clusterv1.Cluster{}, KubeadmConfigs: map[string]*bootstrapv1.KubeadmConfig{}, InfraMachines: map[string]*unstructured.Unstructured{}}
	if err := mgmt.Get(ctx, key, s.Cluster); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("preview: Cluster %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("preview: read Cluster %s: %w", key, err)
	}
	in := []client.ListOption{client.InNamespace(key.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: key.Name}}

	if ref := s.Cluster.Spec.ControlPlaneRef; ref.IsDefined() && ref.Kind == "KubeadmControlPlane" && ref.APIGroup == controlplanev1.GroupVersion.Group {
		s.ControlPlane = &controlplanev1.KubeadmControlPlane{}
		if err := mgmt.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: ref.Name}, s.ControlPlane); err != nil {
			return nil, fmt.Errorf("preview: read KubeadmControlPlane %s/%s (Cluster %s spec.controlPlaneRef): %w", key.Namespace, ref.Name, key, err)
		}
	}
	var mds clusterv1.MachineDeploymentList
	if err := mgmt.List(ctx, &mds, in...); err != nil {
		return nil, fmt.Errorf("preview: list MachineDeployments of %s: %w", key, err)
	}
	for i := range mds.Items {
		s.MachineDeployments = append(s.MachineDeployments, &mds.Items[i])
	}
	var mss clusterv1.MachineSetList
	if err := mgmt.List(ctx, &mss, in...); err != nil {
		return nil, fmt.Errorf("preview: list MachineSets of %s: %w", key, err)
	}
	for i := range mss.Items {
		s.MachineSets = append(s.MachineSets, &mss.Items[i])
	}
	var ms clusterv1.MachineList
	if err := mgmt.List(ctx, &ms, in...); err != nil {
		return nil, fmt.Errorf("preview: list Machines of %s: %w", key, err)
	}
	infraKinds := map[schema.GroupKind]bool{}
	bootstrapByName := map[string]string{} // KubeadmConfig name -> Machine name
	infraByName := map[schema.GroupKind]map[string]string{}
	for i := range ms.Items {
		m := &ms.Items[i]
		s.Machines = append(s.Machines, m)
		if r := m.Spec.Bootstrap.ConfigRef; r.IsDefined() && r.Kind == "KubeadmConfig" && r.APIGroup == bootstrapv1.GroupVersion.Group {
			bootstrapByName[r.Name] = m.Name
		}
		if r := m.Spec.InfrastructureRef; r.IsDefined() {
			gk := schema.GroupKind{Group: r.APIGroup, Kind: r.Kind}
			infraKinds[gk] = true
			if infraByName[gk] == nil {
				infraByName[gk] = map[string]string{}
			}
			infraByName[gk][r.Name] = m.Name
		}
	}
	byName := func(a, b interface{ GetName() string }) int { return strings.Compare(a.GetName(), b.GetName()) }
	slices.SortFunc(s.MachineDeployments, func(a, b *clusterv1.MachineDeployment) int { return byName(a, b) })
	slices.SortFunc(s.MachineSets, func(a, b *clusterv1.MachineSet) int { return byName(a, b) })
	slices.SortFunc(s.Machines, func(a, b *clusterv1.Machine) int { return byName(a, b) })

	if len(bootstrapByName) > 0 {
		var kcs bootstrapv1.KubeadmConfigList
		if err := mgmt.List(ctx, &kcs, in...); err != nil {
			return nil, fmt.Errorf("preview: list KubeadmConfigs of %s: %w", key, err)
		}
		for i := range kcs.Items {
			if m, ok := bootstrapByName[kcs.Items[i].Name]; ok {
				s.KubeadmConfigs[m] = &kcs.Items[i]
			}
		}
	}
	gks := make([]schema.GroupKind, 0, len(infraKinds))
	for gk := range infraKinds {
		gks = append(gks, gk)
	}
	slices.SortFunc(gks, func(a, b schema.GroupKind) int { return strings.Compare(a.String(), b.String()) })
	for _, gk := range gks {
		mapping, err := mgmt.RESTMapper().RESTMapping(gk)
		if err != nil {
			return nil, fmt.Errorf("preview: infrastructure kind %s of %s's machines: %w", gk, key, err)
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(mapping.GroupVersionKind.GroupVersion().WithKind(gk.Kind + "List"))
		if err := mgmt.List(ctx, list, in...); err != nil {
			return nil, fmt.Errorf("preview: list %s of %s: %w", gk, key, err)
		}
		for i := range list.Items {
			if m, ok := infraByName[gk][list.Items[i].GetName()]; ok {
				s.InfraMachines[m] = &list.Items[i]
			}
		}
	}
	if o.workload != nil {
		var rules clusterv1.MachineDrainRuleList
		if err := mgmt.List(ctx, &rules, client.InNamespace(key.Namespace)); err != nil {
			return nil, fmt.Errorf("preview: list MachineDrainRules in namespace %s: %w", key.Namespace, err)
		}
		s.MachineDrainRules = rules.Items
		slices.SortFunc(s.MachineDrainRules, func(a, b clusterv1.MachineDrainRule) int { return strings.Compare(a.Name, b.Name) })
		if err := s.readWorkload(ctx, key, o); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readWorkload reads Nodes, Pods and PodDisruptionBudgets of the workload
// cluster and works out the drain blockers.
func (s *Snapshot) readWorkload(ctx context.Context, key client.ObjectKey, o readOptions) error {
	wc, err := o.workload(ctx, key)
	if err != nil {
		return fmt.Errorf("preview: workload cluster %s: %w", key, err)
	}
	if wc == nil {
		return fmt.Errorf("%w: workload cluster %s: the WorkloadReader returned no client", ErrInvalidArgument, key)
	}
	var nodes corev1.NodeList
	if err := wc.List(ctx, &nodes); err != nil {
		return fmt.Errorf("preview: workload cluster %s: list Nodes: %w", key, err)
	}
	var pods corev1.PodList
	if err := wc.List(ctx, &pods); err != nil {
		return fmt.Errorf("preview: workload cluster %s: list Pods: %w", key, err)
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := wc.List(ctx, &pdbs); err != nil {
		return fmt.Errorf("preview: workload cluster %s: list PodDisruptionBudgets: %w", key, err)
	}
	var nss corev1.NamespaceList
	if len(s.MachineDrainRules) > 0 {
		if err := wc.List(ctx, &nss); err != nil {
			return fmt.Errorf("preview: workload cluster %s: list Namespaces: %w", key, err)
		}
	}
	s.Nodes = make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		s.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	// Cluster API's drain rules depend on the Machine: blockers are
	// worked out node by node, each with its Machine's rules.
	machineOf := map[string]*clusterv1.Machine{}
	for _, m := range s.Machines {
		if m.Status.NodeRef.IsDefined() {
			machineOf[m.Status.NodeRef.Name] = m
		}
	}
	podsOf := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		podsOf[p.Spec.NodeName] = append(podsOf[p.Spec.NodeName], p)
	}
	s.DrainBlockers = map[string][]drain.BlockedPod{}
	for node, ps := range podsOf {
		dopts := append([]drain.Option{drain.WithSkip(nodepod.Selector()), drain.WithSkipNamespace(nodepod.DefaultNamespace)}, o.drainOpts...)
		dopts = append(dopts, drain.WithNamespaces(nss.Items),
			drain.WithClusterAPIRules(drain.ClusterAPIRules{Rules: s.MachineDrainRules, Machine: machineOf[node], Cluster: s.Cluster}))
		got, err := drain.Blockers(ps, pdbs.Items, dopts...)
		if err != nil {
			return fmt.Errorf("%w: drain options: %w", ErrInvalidArgument, err)
		}
		for n, bs := range got {
			s.DrainBlockers[n] = bs
		}
	}
	return nil
}

// controlledBy says whether m's controller is the kind and name given.
func controlledBy(m *clusterv1.Machine, kind, name string) bool {
	for _, r := range m.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.Kind == kind && r.Name == name {
			return true
		}
	}
	return false
}

func schemaGK(ref clusterv1.ContractVersionedObjectReference) schema.GroupKind {
	return schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind}
}

// nodeReady is the Node's Ready condition.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// check refuses a snapshot that Read would not have made: nil objects in
// its lists or maps, machines without names. A Snapshot may be built by
// hand (from a dump, in a test), so Predict checks it first.
func (s *Snapshot) check() error {
	bad := func(field string) error {
		return fmt.Errorf("%w: snapshot %s is nil", ErrInvalidArgument, field)
	}
	if s.Cluster == nil {
		return bad("Cluster")
	}
	for i, md := range s.MachineDeployments {
		if md == nil {
			return bad(fmt.Sprintf("MachineDeployments[%d]", i))
		}
	}
	for i, ms := range s.MachineSets {
		if ms == nil {
			return bad(fmt.Sprintf("MachineSets[%d]", i))
		}
	}
	seen := make(map[string]bool, len(s.Machines))
	for i, m := range s.Machines {
		switch {
		case m == nil:
			return bad(fmt.Sprintf("Machines[%d]", i))
		case m.Name == "":
			return fmt.Errorf("%w: snapshot Machines[%d] has no name", ErrInvalidArgument, i)
		case seen[m.Name]:
			return fmt.Errorf("%w: snapshot Machines[%d]: machine %s appears twice", ErrInvalidArgument, i, errtext.Quote(m.Name))
		}
		seen[m.Name] = true
	}
	for k, v := range s.KubeadmConfigs {
		if v == nil {
			return bad("KubeadmConfigs[" + errtext.Quote(k) + "]")
		}
	}
	for k, v := range s.InfraMachines {
		if v == nil {
			return bad("InfraMachines[" + errtext.Quote(k) + "]")
		}
	}
	return nil
}
