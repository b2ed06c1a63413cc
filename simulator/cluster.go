package simulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator/internal/memclient"
	"github.com/upgradekit/upgradekit/strategy"
)

// ErrInvalidCluster is wrapped by every error the Cluster builder reports
// (bad names, replica counts or versions, duplicate pools, pods on unknown
// nodes). The error names the offending builder call and value.
var ErrInvalidCluster = errors.New("invalid fake cluster")

// Infrastructure describes the infrastructure machine kind the builder
// creates for every Machine, as unstructured objects.
type Infrastructure struct {
	// APIVersion and Kind of the infrastructure machine, for example
	// infrastructure.cluster.x-k8s.io/v1beta1 DockerMachine.
	APIVersion, Kind string
	// ImageField is the path under the object to the machine image
	// ("spec", "customImage" for Docker; "spec", "ami", "id" for AWS).
	ImageField []string
	// ProviderID returns spec.providerID for the machine's node name;
	// it must be deterministic.
	ProviderID func(node string) string
}

// DockerMachine is CAPD's infrastructure machine (image in spec.customImage,
// provider IDs docker:////<node>).
var DockerMachine = Infrastructure{
	APIVersion: "infrastructure.cluster.x-k8s.io/v1beta1", Kind: "DockerMachine",
	ImageField: []string{"spec", "customImage"},
	ProviderID: func(node string) string { return "docker:////" + node },
}

// AWSMachine is CAPA's infrastructure machine (image in spec.ami.id,
// provider IDs aws:///us-east-1a/i-<hash of the node name>).
var AWSMachine = Infrastructure{
	APIVersion: "infrastructure.cluster.x-k8s.io/v1beta2", Kind: "AWSMachine",
	ImageField: []string{"spec", "ami", "id"},
	ProviderID: func(node string) string { return "aws:///us-east-1a/i-" + shortHash(node, 17) },
}

// PoolOption configures one pool (the control plane or a machine
// deployment).
type PoolOption func(*pool)

// WithImage sets the image written into every infrastructure machine of the
// pool (default "<pool>-image-<version>").
func WithImage(image string) PoolOption { return func(p *pool) { p.image = image } }

// WithNotReady makes the nodes with these indexes (0-based, in name order)
// start NotReady.
func WithNotReady(indexes ...int) PoolOption {
	return func(p *pool) {
		for _, i := range indexes {
			p.notReady[i] = true
		}
	}
}

// WithRollingUpdate sets a MachineDeployment's
// spec.rollout.strategy.rollingUpdate (nil keeps CAPI's defaults, maxSurge
// 1 and maxUnavailable 0). It has no effect on the control plane, which
// KubeadmControlPlane always rolls one machine at a time.
func WithRollingUpdate(maxSurge, maxUnavailable *intstr.IntOrString) PoolOption {
	return func(p *pool) { p.surge, p.unavailable = maxSurge, maxUnavailable }
}

type pool struct {
	name        string // "" for the control plane
	replicas    int
	version     string
	image       string
	notReady    map[int]bool
	surge       *intstr.IntOrString
	unavailable *intstr.IntOrString
}

type podSpec struct {
	name, node string
	labels     map[string]string
}

type pdbSpec struct {
	name           string
	selector       map[string]string
	maxUnavailable intstr.IntOrString
}

// Cluster is a fluent builder for a Cluster API v1beta2 cluster and its
// workload cluster's Nodes, Pods and PodDisruptionBudgets, all in one
// namespace of one API server (the management and workload cluster are the
// same here). Builder methods record the first error and return the
// builder; Objects, Client and Apply report it. Names are deterministic:
//
//	Cluster                <cluster>
//	KubeadmControlPlane    <cluster>-control-plane
//	control plane Machine  <cluster>-control-plane-<i>   (i from 0)
//	MachineDeployment      <cluster>-<md>
//	MachineSet             <cluster>-<md>-0
//	worker Machine         <cluster>-<md>-<i>
//
// Each Machine has a KubeadmConfig and an infrastructure machine of the
// same name, and a Node of the same name whose spec.providerID equals the
// Machine's.
type Cluster struct {
	name, namespace string
	infra           Infrastructure
	cp              *pool
	mds             []*pool
	pods            []podSpec
	pdbs            []pdbSpec
	err             error
}

// NewCluster starts a builder for the cluster called name in namespace
// "default", with DockerMachine infrastructure.
func NewCluster(name string) *Cluster {
	c := &Cluster{name: name, namespace: metav1.NamespaceDefault, infra: DockerMachine}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		c.fail("NewCluster: name %s: %s", errtext.Quote(name), strings.Join(msgs, "; "))
	}
	return c
}

// errNilCluster is what taking objects, a client, hosts or a simulator
// from a nil *Cluster returns.
var errNilCluster = fmt.Errorf("simulator: %w: nil or zero *Cluster (use NewCluster)", ErrInvalidCluster)

func (c *Cluster) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("simulator: %w: %s", ErrInvalidCluster, fmt.Sprintf(format, args...))
	}
}

// Name returns the cluster's name.
func (c *Cluster) Name() string { return c.name }

// InNamespace puts every namespaced object in ns.
func (c *Cluster) InNamespace(ns string) *Cluster {
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		c.fail("InNamespace: %q: %s", ns, strings.Join(msgs, "; "))
	}
	c.namespace = ns
	return c
}

// Namespace returns the namespace of the cluster's objects.
func (c *Cluster) Namespace() string { return c.namespace }

// WithInfrastructure sets the infrastructure machine kind (default
// DockerMachine).
func (c *Cluster) WithInfrastructure(infra Infrastructure) *Cluster {
	gv, gvErr := schema.ParseGroupVersion(infra.APIVersion)
	switch {
	case infra.APIVersion == "" || infra.Kind == "" || len(infra.ImageField) == 0 || infra.ProviderID == nil:
		c.fail("WithInfrastructure: %q %q: apiVersion, kind, imageField and providerID are all required", infra.APIVersion, infra.Kind)
	case gvErr != nil || gv.Version == "" || len(validation.IsDNS1123Subdomain(gv.Group)) > 0:
		c.fail("WithInfrastructure: apiVersion %q is not group/version", infra.APIVersion)
	case len(validation.IsDNS1035Label(strings.ToLower(infra.Kind))) > 0:
		c.fail("WithInfrastructure: kind %q is not a Kind name", infra.Kind)
	}
	c.infra = infra
	return c
}

func (c *Cluster) newPool(call, name string, replicas int, version string, opts []PoolOption) *pool {
	if replicas < 0 {
		c.fail("%s: replicas %d: must be >= 0", call, replicas)
	}
	if err := kubeadm.CheckUpgrade(version, version); err != nil {
		c.fail("%s: version %q is not a Kubernetes version (want vMAJOR.MINOR.PATCH)", call, version)
	}
	p := &pool{name: name, replicas: replicas, version: version, notReady: map[int]bool{}}
	for _, o := range opts {
		if o != nil {
			o(p)
		}
	}
	for i := range p.notReady {
		if i < 0 || i >= replicas {
			c.fail("%s: WithNotReady(%d): index out of range [0, %d)", call, i, replicas)
		}
	}
	if p.image == "" {
		n := name
		if n == "" {
			n = "control-plane"
		}
		p.image = n + "-image-" + version
	}
	return p
}

// ControlPlane adds a KubeadmControlPlane with replicas Machines at version.
func (c *Cluster) ControlPlane(replicas int, version string, opts ...PoolOption) *Cluster {
	if c.cp != nil {
		c.fail("ControlPlane: called twice")
	}
	c.cp = c.newPool("ControlPlane", "", replicas, version, opts)
	return c
}

// MachineDeployment adds a MachineDeployment called <cluster>-<name> with
// one MachineSet and replicas worker Machines at version.
func (c *Cluster) MachineDeployment(name string, replicas int, version string, opts ...PoolOption) *Cluster {
	if msgs := validation.IsDNS1123Label(c.name + "-" + name); len(msgs) > 0 || name == "" || name == "control-plane" {
		c.fail("MachineDeployment: name %q: %s", name, strings.Join(msgs, "; "))
	}
	for _, md := range c.mds {
		if md.name == name {
			c.fail("MachineDeployment: %q added twice", name)
		}
	}
	c.mds = append(c.mds, c.newPool("MachineDeployment "+name, name, replicas, version, opts))
	return c
}

// Pod adds a Running, Ready pod called name on node with labels, owned by
// nothing (tests that need a ReplicaSet owner add one themselves).
func (c *Cluster) Pod(name, node string, labels map[string]string) *Cluster {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		c.fail("Pod: name %q: %s", name, strings.Join(msgs, "; "))
	}
	c.pods = append(c.pods, podSpec{name: name, node: node, labels: labels})
	return c
}

// PodDisruptionBudget adds a PDB selecting pods by labels with the given
// maxUnavailable.
func (c *Cluster) PodDisruptionBudget(name string, selector map[string]string, maxUnavailable intstr.IntOrString) *Cluster {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		c.fail("PodDisruptionBudget: name %q: %s", name, strings.Join(msgs, "; "))
	}
	c.pdbs = append(c.pdbs, pdbSpec{name: name, selector: selector, maxUnavailable: maxUnavailable})
	return c
}

// NodeInfo describes one node of the built cluster.
type NodeInfo struct {
	// Name is the Node's and the Machine's name.
	Name string
	// Pool is "" for the control plane, else the MachineDeployment's short
	// name as given to MachineDeployment.
	Pool string
	// Role of the node.
	Role strategy.Role
	// Version is the node's Kubernetes version.
	Version string
	// ProviderID is the Node's and the Machine's spec.providerID.
	ProviderID string
	// Ready reports whether the node starts Ready.
	Ready bool
}

// Nodes lists the cluster's nodes: control plane first, then each machine
// deployment in the order added.
func (c *Cluster) Nodes() []NodeInfo {
	var out []NodeInfo
	add := func(p *pool, prefix string, role strategy.Role) {
		if p == nil {
			return
		}
		for i := 0; i < p.replicas; i++ {
			n := fmt.Sprintf("%s-%d", prefix, i)
			out = append(out, NodeInfo{Name: n, Pool: p.name, Role: role, Version: p.version, ProviderID: c.infra.ProviderID(n), Ready: !p.notReady[i]})
		}
	}
	add(c.cp, c.cpName(), strategy.RoleControlPlane)
	for _, md := range c.mds {
		add(md, c.mdName(md), strategy.RoleWorker)
	}
	return out
}

func (c *Cluster) cpName() string        { return c.name + "-control-plane" }
func (c *Cluster) mdName(p *pool) string { return c.name + "-" + p.name }

// newScheme returns a scheme with core Kubernetes, apiextensions v1 and
// Cluster API core, kubeadm bootstrap and kubeadm control plane v1beta2
// types.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		clusterv1.AddToScheme, bootstrapv1.AddToScheme, controlplanev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("simulator: building scheme: %w", err)
		}
	}
	return s, nil
}

// schemes caches one scheme per infrastructure kind: building one costs
// milliseconds, a scheme is safe for concurrent use once built, and tests
// build many clusters.
var schemes sync.Map // schema.GroupVersionKind -> *runtime.Scheme

// scheme is newScheme plus the cluster's infrastructure kind, registered as
// unstructured.
func (c *Cluster) scheme() (*runtime.Scheme, error) {
	gv, err := schema.ParseGroupVersion(c.infra.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w: infrastructure apiVersion %q: %v", ErrInvalidCluster, c.infra.APIVersion, err)
	}
	gvk := gv.WithKind(c.infra.Kind)
	if s, ok := schemes.Load(gvk); ok {
		return s.(*runtime.Scheme), nil
	}
	s, err := newScheme()
	if err != nil {
		return nil, err
	}
	s.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(gv.WithKind(c.infra.Kind+"List"), &unstructured.UnstructuredList{})
	actual, _ := schemes.LoadOrStore(gvk, s)
	return actual.(*runtime.Scheme), nil
}

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// uid is deterministic so that Objects is a pure function of the builder.
func uid(kind, ns, name string) types.UID {
	h := shortHash(kind+"/"+ns+"/"+name, 32)
	return types.UID(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

func meta(kind, ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, UID: uid(kind, ns, name)}
}

func ownerRef(apiVersion, kind string, o metav1.ObjectMeta, controller bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.Name, UID: o.UID}
	if controller {
		r.Controller = new(true)
		r.BlockOwnerDeletion = new(true)
	}
	return r
}

func readyCondition(ready bool) []metav1.Condition {
	st := metav1.ConditionTrue
	if !ready {
		st = metav1.ConditionFalse
	}
	return []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: st, Reason: "Fake", LastTransitionTime: metav1.Unix(0, 0)}}
}

// NodeReady returns the Node Ready condition the builder and the hosts
// write: True with reason KubeletReady, or False with KubeletNotReady.
func NodeReady(ready bool) corev1.NodeCondition {
	if ready {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.Unix(0, 0), LastTransitionTime: metav1.Unix(0, 0)}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "simulator: node is not ready", LastHeartbeatTime: metav1.Unix(0, 0), LastTransitionTime: metav1.Unix(0, 0)}
}

// Objects returns every object of the cluster, in creation order (owners
// before what they own), with deterministic names and UIDs, including
// status. Infrastructure machines are *unstructured.Unstructured.
func (c *Cluster) Objects() ([]client.Object, error) {
	if c == nil || c.infra.Kind == "" {
		return nil, errNilCluster
	}
	if c.err != nil {
		return nil, c.err
	}
	for _, p := range c.pods {
		found := false
		for _, n := range c.Nodes() {
			found = found || n.Name == p.node
		}
		if !found {
			return nil, fmt.Errorf("simulator: %w: Pod %q: node %q is not in the cluster", ErrInvalidCluster, p.name, p.node)
		}
	}
	ns := c.namespace
	var objs []client.Object
	if ns != metav1.NamespaceDefault {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: uid("Namespace", "", ns)}})
	}
	clusterLabels := map[string]string{clusterv1.ClusterNameLabel: c.name}
	cluster := &clusterv1.Cluster{ObjectMeta: meta("Cluster", ns, c.name, nil)}
	cluster.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: c.infraGroup(), Kind: strings.TrimSuffix(c.infra.Kind, "Machine") + "Cluster", Name: c.name}
	if c.cp != nil {
		cluster.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: c.cpName()}
	}
	cluster.Status.Phase = string(clusterv1.ClusterPhaseProvisioned)
	objs = append(objs, cluster)
	clusterOwner := ownerRef(clusterv1.GroupVersion.String(), "Cluster", cluster.ObjectMeta, false)

	if c.cp != nil {
		p := c.cp
		kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: meta("KubeadmControlPlane", ns, c.cpName(), clusterLabels)}
		kcp.OwnerReferences = []metav1.OwnerReference{clusterOwner}
		kcp.Spec.Replicas = new(int32(p.replicas))
		kcp.Spec.Version = p.version
		kcp.Spec.MachineTemplate.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: c.infraGroup(), Kind: c.infra.Kind + "Template", Name: c.cpName()}
		kcp.Status = controlplanev1.KubeadmControlPlaneStatus{
			Selector: clusterv1.ClusterNameLabel + "=" + c.name + "," + clusterv1.MachineControlPlaneLabel,
			Replicas: new(int32(p.replicas)), ReadyReplicas: new(c.readyCount(p)), AvailableReplicas: new(c.readyCount(p)),
			UpToDateReplicas: new(int32(p.replicas)),
			Versions:         []clusterv1.StatusVersion{{Version: p.version, Replicas: int32(p.replicas)}},
			Initialization:   controlplanev1.KubeadmControlPlaneInitializationStatus{ControlPlaneInitialized: new(true)},
		}
		objs = append(objs, kcp)
		owner := ownerRef(controlplanev1.GroupVersion.String(), "KubeadmControlPlane", kcp.ObjectMeta, true)
		labels := map[string]string{clusterv1.ClusterNameLabel: c.name, clusterv1.MachineControlPlaneLabel: ""}
		objs = append(objs, c.machines(p, c.cpName(), labels, owner)...)
	}
	for _, p := range c.mds {
		name := c.mdName(p)
		sel := map[string]string{clusterv1.ClusterNameLabel: c.name, clusterv1.MachineDeploymentNameLabel: name}
		tmpl := clusterv1.MachineTemplateSpec{
			ObjectMeta: clusterv1.ObjectMeta{Labels: sel},
			Spec: clusterv1.MachineSpec{
				ClusterName: c.name, Version: p.version,
				Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: name}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: c.infraGroup(), Kind: c.infra.Kind + "Template", Name: name},
			},
		}
		md := &clusterv1.MachineDeployment{ObjectMeta: meta("MachineDeployment", ns, name, clusterLabels)}
		md.OwnerReferences = []metav1.OwnerReference{clusterOwner}
		md.Spec = clusterv1.MachineDeploymentSpec{ClusterName: c.name, Replicas: new(int32(p.replicas)), Selector: metav1.LabelSelector{MatchLabels: sel}, Template: tmpl}
		if p.surge != nil || p.unavailable != nil {
			md.Spec.Rollout.Strategy = clusterv1.MachineDeploymentRolloutStrategy{Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: p.surge, MaxUnavailable: p.unavailable}}
		}
		md.Status = clusterv1.MachineDeploymentStatus{Selector: labelString(sel), Replicas: new(int32(p.replicas)),
			ReadyReplicas: new(c.readyCount(p)), AvailableReplicas: new(c.readyCount(p)), UpToDateReplicas: new(int32(p.replicas)),
			Phase: string(clusterv1.MachineDeploymentPhaseRunning)}
		objs = append(objs, md)

		msName := name + "-0"
		msSel := map[string]string{clusterv1.ClusterNameLabel: c.name, clusterv1.MachineDeploymentNameLabel: name, clusterv1.MachineSetNameLabel: msName}
		ms := &clusterv1.MachineSet{ObjectMeta: meta("MachineSet", ns, msName, msSel)}
		ms.OwnerReferences = []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.String(), "MachineDeployment", md.ObjectMeta, true)}
		msTmpl := tmpl
		msTmpl.ObjectMeta.Labels = msSel
		ms.Spec = clusterv1.MachineSetSpec{ClusterName: c.name, Replicas: new(int32(p.replicas)), Selector: metav1.LabelSelector{MatchLabels: msSel}, Template: msTmpl}
		ms.Status = clusterv1.MachineSetStatus{Selector: labelString(msSel), Replicas: new(int32(p.replicas)),
			ReadyReplicas: new(c.readyCount(p)), AvailableReplicas: new(c.readyCount(p)), UpToDateReplicas: new(int32(p.replicas))}
		objs = append(objs, ms)
		objs = append(objs, c.machines(p, name, msSel, ownerRef(clusterv1.GroupVersion.String(), "MachineSet", ms.ObjectMeta, true))...)
	}
	for _, n := range c.Nodes() {
		objs = append(objs, c.node(n))
	}
	for _, p := range c.pods {
		pod := &corev1.Pod{ObjectMeta: meta("Pod", ns, p.name, p.labels)}
		pod.Spec = corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(0, 0)}}}
		objs = append(objs, pod)
	}
	for _, p := range c.pdbs {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: meta("PodDisruptionBudget", ns, p.name, nil)}
		mu := p.maxUnavailable
		pdb.Spec = policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: p.selector}, MaxUnavailable: &mu}
		// The status the disruption controller would compute: every pod
		// the builder makes is Ready. Without it a real API server refuses
		// every eviction (no controller runs in envtest).
		expected := int32(0)
		for _, pod := range c.pods {
			if labels.SelectorFromSet(p.selector).Matches(labels.Set(pod.labels)) {
				expected++
			}
		}
		unavailable, err := intstr.GetScaledValueFromIntOrPercent(&mu, int(expected), true)
		if err != nil {
			return nil, fmt.Errorf("simulator: %w: PodDisruptionBudget %q: maxUnavailable: %v", ErrInvalidCluster, p.name, err)
		}
		desired := max(expected-int32(unavailable), 0)
		pdb.Generation = 1
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: expected, CurrentHealthy: expected,
			DesiredHealthy: desired, DisruptionsAllowed: max(expected-desired, 0)}
		objs = append(objs, pdb)
	}
	return objs, nil
}

func labelString(m map[string]string) string {
	return metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: m})
}

func (c *Cluster) readyCount(p *pool) int32 {
	n := int32(0)
	for i := 0; i < p.replicas; i++ {
		if !p.notReady[i] {
			n++
		}
	}
	return n
}

func (c *Cluster) infraGroup() string {
	gv, err := schema.ParseGroupVersion(c.infra.APIVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

func (c *Cluster) machines(p *pool, prefix string, labels map[string]string, owner metav1.OwnerReference) []client.Object {
	ns := c.namespace
	var objs []client.Object
	for i := 0; i < p.replicas; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		pid := c.infra.ProviderID(name)
		kc := &bootstrapv1.KubeadmConfig{ObjectMeta: meta("KubeadmConfig", ns, name, labels)}
		kc.OwnerReferences = []metav1.OwnerReference{owner}
		if p.name == "" {
			kc.Spec.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "profiling", Value: new("false")}}
		}
		kc.Status.DataSecretName = name + "-bootstrap"
		kc.Status.Initialization.DataSecretCreated = new(true)

		infra := &unstructured.Unstructured{}
		infra.SetAPIVersion(c.infra.APIVersion)
		infra.SetKind(c.infra.Kind)
		infra.SetName(name)
		infra.SetNamespace(ns)
		infra.SetLabels(labels)
		infra.SetUID(uid(c.infra.Kind, ns, name))
		infra.SetOwnerReferences([]metav1.OwnerReference{owner})
		_ = unstructured.SetNestedField(infra.Object, p.image, c.infra.ImageField...)
		_ = unstructured.SetNestedField(infra.Object, pid, "spec", "providerID")

		m := &clusterv1.Machine{ObjectMeta: meta("Machine", ns, name, labels)}
		m.OwnerReferences = []metav1.OwnerReference{owner}
		m.Spec = clusterv1.MachineSpec{
			ClusterName: c.name, Version: p.version, ProviderID: pid,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}, DataSecretName: new(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: c.infraGroup(), Kind: c.infra.Kind, Name: name},
		}
		m.Status = clusterv1.MachineStatus{
			NodeRef:    clusterv1.MachineNodeReference{Name: name},
			NodeInfo:   &corev1.NodeSystemInfo{KubeletVersion: p.version, ContainerRuntimeVersion: "containerd://" + DefaultContainerdVersion, OperatingSystem: "linux", Architecture: "amd64"},
			Phase:      string(clusterv1.MachinePhaseRunning),
			Conditions: readyCondition(!p.notReady[i]),
			Initialization: clusterv1.MachineInitializationStatus{
				BootstrapDataSecretCreated: new(true), InfrastructureProvisioned: new(true),
			},
		}
		objs = append(objs, kc, infra, m)
	}
	return objs
}

func (c *Cluster) node(n NodeInfo) *corev1.Node {
	labels := map[string]string{corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	if n.Role == strategy.RoleControlPlane {
		labels["node-role.kubernetes.io/control-plane"] = ""
	}
	node := &corev1.Node{ObjectMeta: meta("Node", "", n.Name, labels)}
	node.Annotations = map[string]string{
		clusterv1.ClusterNameAnnotation: c.name, clusterv1.ClusterNamespaceAnnotation: c.namespace, clusterv1.MachineAnnotation: n.Name,
	}
	node.Spec.ProviderID = n.ProviderID
	if n.Role == strategy.RoleControlPlane {
		node.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{NodeReady(n.Ready)},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: n.Version,
			ContainerRuntimeVersion: "containerd://" + DefaultContainerdVersion, OperatingSystem: "linux", Architecture: "amd64"},
	}
	return node
}

// statusObjects are the types whose status the builder sets and which the
// fake client must treat as a subresource.
func statusObjects() []client.Object {
	return []client.Object{
		&corev1.Node{}, &corev1.Pod{}, &policyv1.PodDisruptionBudget{},
		&clusterv1.Cluster{}, &clusterv1.Machine{}, &clusterv1.MachineSet{}, &clusterv1.MachineDeployment{},
		&controlplanev1.KubeadmControlPlane{}, &bootstrapv1.KubeadmConfig{},
	}
}

// ClientOption configures Client.
type ClientOption func(*clientOptions)

type clientOptions struct {
	funcs   *interceptor.Funcs
	noApply bool
}

// WithoutServerSideApply backs the client with client-go's plain object
// tracker instead of the field-managing one: no managedFields and no
// server-side apply (client.Apply fails), but every update is several
// times cheaper, because the field-managing tracker rebuilds a REST mapper
// for each write. Keep the default when the code under test applies
// server-side. (The Simulator does not use Client: see NewSimulator.)
func WithoutServerSideApply() ClientOption {
	return func(o *clientOptions) { o.noApply = true }
}

// WithInterceptor wraps the client with controller-runtime interceptor
// functions, for example Faults.Interceptor().
func WithInterceptor(f interceptor.Funcs) ClientOption {
	return func(o *clientOptions) { o.funcs = &f }
}

// Client returns a controller-runtime fake client holding the cluster's
// objects, with a scheme from newScheme plus the infrastructure kind
// registered as unstructured, and status subresources for every type that
// has a status. The scheme is built once per infrastructure kind and
// shared by the clients of every cluster using that kind: read it, do not
// add types to it (build your own client for that).
func (c *Cluster) Client(opts ...ClientOption) (client.WithWatch, error) {
	objs, err := c.Objects()
	if err != nil {
		return nil, err
	}
	o := clientOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	s, err := c.scheme()
	if err != nil {
		return nil, err
	}
	b := crfake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(statusObjects()...)
	if o.noApply {
		b = b.WithObjectTracker(clienttesting.NewObjectTracker(s, serializer.NewCodecFactory(s).UniversalDecoder()))
	}
	if o.funcs != nil {
		b = b.WithInterceptorFuncs(*o.funcs)
	}
	return b.Build(), nil
}

// memClient is the Simulator's client: the cluster's objects in an
// in-memory API server (package memclient: the semantics of
// controller-runtime's fake client that the simulation depends on,
// without its JSON round trip per call), timestamps from clk, wrapped
// with funcs when not nil.
func (c *Cluster) memClient(clk clock.PassiveClock, funcs *interceptor.Funcs) (client.WithWatch, error) {
	objs, err := c.Objects()
	if err != nil {
		return nil, err
	}
	s, err := c.scheme()
	if err != nil {
		return nil, err
	}
	mc, err := memclient.New(memclient.Options{Scheme: s, StatusSubresource: statusObjects(), Clock: clk}, objs...)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	if funcs == nil {
		return mc, nil
	}
	return interceptor.NewClient(mc, *funcs), nil
}

// InfrastructureCRD returns a permissive CRD (unknown fields preserved,
// status subresource) for the cluster's infrastructure machine kind, to
// install in a real API server with envtest.WithCRDs before Apply.
func (c *Cluster) InfrastructureCRD() *apiextensionsv1.CustomResourceDefinition {
	gv, _ := schema.ParseGroupVersion(c.infra.APIVersion)
	plural := strings.ToLower(c.infra.Kind) + "s"
	open := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + gv.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gv.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(c.infra.Kind), Kind: c.infra.Kind, ListKind: c.infra.Kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gv.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *open, "status": *open},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

// Apply creates the cluster's objects through c (typically envtest's
// client), owners first, rewriting owner references to the UIDs the server
// assigned, then writes each status through the status subresource. The
// infrastructure kind's CRD must be installed (see InfrastructureCRD).
func (c *Cluster) Apply(ctx context.Context, cl client.Client) error {
	objs, err := c.Objects()
	if err != nil {
		return err
	}
	if cl == nil {
		return fmt.Errorf("simulator: %w: Apply %s: nil client", ErrInvalidCluster, c.name)
	}
	uids := map[types.UID]types.UID{}
	for _, o := range objs {
		want := o.DeepCopyObject().(client.Object)
		refs := o.GetOwnerReferences()
		for i := range refs {
			if u, ok := uids[refs[i].UID]; ok {
				refs[i].UID = u
			}
		}
		o.SetOwnerReferences(refs)
		old := o.GetUID()
		o.SetUID("")
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("simulator: apply %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
		uids[old] = o.GetUID()
		if !hasStatus(want) {
			continue
		}
		if err := copyStatus(want, o); err != nil {
			return fmt.Errorf("simulator: apply status of %T %s: %w", o, o.GetName(), err)
		}
		if err := cl.Status().Update(ctx, o); err != nil {
			return fmt.Errorf("simulator: apply status of %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

func hasStatus(o client.Object) bool {
	switch o.(type) {
	case *corev1.Namespace, *unstructured.Unstructured:
		return false
	}
	return true
}

// copyStatus sets dst's status to src's through unstructured conversion, so
// one function serves every type.
func copyStatus(src, dst client.Object) error {
	s, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
	if err != nil {
		return err
	}
	d, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dst)
	if err != nil {
		return err
	}
	st, ok := s["status"]
	if !ok {
		return nil
	}
	d["status"] = st
	return runtime.DefaultUnstructuredConverter.FromUnstructured(d, dst)
}
