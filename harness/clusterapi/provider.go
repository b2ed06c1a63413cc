package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

type providerOptions struct {
	hostOpts []simulator.HostOption
	images   map[string]simulator.Staging
	registry *simulator.Registry
	interval time.Duration
	log      logr.Logger
	etcd     string
}

// ProviderOption configures StartProvider.
type ProviderOption func(*providerOptions)

// WithHostOptions applies opts to every simulated host the provider boots
// (simulator.WithFaults to inject failures, simulator.WithComponentVersions, ...).
// The provider always adds simulator.WithNodeClient with its own client.
func WithHostOptions(opts ...simulator.HostOption) ProviderOption {
	return func(o *providerOptions) { o.hostOpts = append(o.hostOpts, opts...) }
}

// WithUpgraderImage says what an upgrader image holds in its staging
// directory: a pod's stage container running image copies s onto the
// host (nodepod.WithStageFrom). An image the provider was not told about
// holds nothing, and its stage container fails as `cp` would.
func WithUpgraderImage(image string, s simulator.Staging) ProviderOption {
	return func(o *providerOptions) { o.images[image] = s }
}

// WithRegistry has the kubelets pull every pod's images from r
// (simulator.Registry): a container whose image r does not hold, or whose pull
// r is told to fail, waits with ErrImagePull, then ImagePullBackOff (or
// InvalidImageName), and its pod stays Pending, as a real kubelet reports
// it; the images of WithUpgraderImage are added to r. Without it every
// image pulls. Mirror pods (the hosts' static pods) pull nothing: their
// images are the host's.
func WithRegistry(r *simulator.Registry) ProviderOption {
	return func(o *providerOptions) { o.registry = r }
}

// WithPollInterval sets how often the provider and each kubelet look at
// the API server (default 100ms).
func WithPollInterval(d time.Duration) ProviderOption {
	return func(o *providerOptions) { o.interval = d }
}

// WithEtcd runs a real etcd member (binary: the envtest etcd, as
// filepath.Join(env.AssetsDir, "etcd")) for each control plane machine
// whose KubeadmConfig uses stacked etcd (no
// clusterConfiguration.etcd.external), named after its node: the first of
// a cluster starts a new etcd cluster, the others join it (as learners,
// promoted once in sync, as kubeadm join does), over TLS from the
// cluster's etcd CA; a join that fails is undone and tried again. Each of those
// nodes gets a kubelet HTTPS endpoint that serves the API server's
// pods/portforward to kube-system/etcd-<node>:2379, which is how
// KubeadmControlPlane reads etcd's health, moves its leader and removes a
// deleted machine's member. Without it a stacked etcd control plane has
// no etcd, and KubeadmControlPlane reports it unhealthy. What it does not
// model: an etcd upgrade (the member's binary stays envtest's; the host's
// etcd static pod changes its image only), peer TLS, a member whose host
// stops (it runs until its machine is deleted) and the API servers of
// the nodes (the one envtest API server stands for all, as without it).
func WithEtcd(binary string) ProviderOption {
	return func(o *providerOptions) { o.etcd = binary }
}

// WithProviderLogger logs what the provider and kubelets do (default:
// discard).
func WithProviderLogger(l logr.Logger) ProviderOption {
	return func(o *providerOptions) { o.log = l }
}

// Provider is the harness's infrastructure provider and the kubelets of
// the machines it boots, in the test's process, against one API server
// that is both the management cluster and every workload cluster (a
// Cluster's <cluster>-kubeconfig Secret points back at it).
//
// As an infrastructure provider (InfrastructureCRDs) it provisions a
// TestCluster at once (its spec.controlPlaneEndpoint is the user's) and a
// TestMachine at once, as soon as its Machine (the owner reference Cluster
// API sets) has bootstrap data: it boots a simulated host (simulator.Host) at
// the Machine's spec.version, control plane or worker by the Machine's
// label (the first control plane of a cluster also does what `kubeadm
// init` leaves in the cluster: kube-system/kubeadm-config with the
// ClusterConfiguration of its bootstrap data; control planes register
// their static pods' mirror pods and record their certificates' expiry on
// their KubeadmConfig, see certificatesExpiry), and sets spec.providerID, status.addresses and
// status.initialization.provisioned. A TestMachine that is deleted is
// gone at once (no finalizer): its host is shut down and its Node
// deleted.
//
// As the kubelet of each host it registers the Node (named after the
// Machine, with the providerID, Ready, the host's kubelet version; the
// host keeps both current as its kubelet restarts), and for every pod
// bound to the node: pulls its images first, with WithRegistry (a pull
// that fails leaves the pod Pending, its container waiting with
// ErrImagePull, then ImagePullBackOff, or InvalidImageName, as
// simulator.Registry reports it); runs pre-pull pods (nodepod.BuildPrePull:
// their command exits 0); runs upgrader pods (built by nodeexec/nodepod)
// through simulator.PodRunner on the host (the real nodeexec runner, the
// journal in a directory of the provider's) and writes the status the
// kubelet reports; marks other pods Running and Ready; and finishes the
// deletion of pods being deleted (evictions included), as a kubelet
// confirms a stopped container.
//
// Faithful where the in-place path depends on it: a stopped kubelet (or
// containerd) starts no container and reports nothing; a running step is
// never killed by a kubelet restart; a deleted pod is not run again; a
// deleted machine's Node disappears. What it does not model, besides what
// simulator.PodRunner, simulator.Registry and simulator.Host list: image pulls without
// WithRegistry (every image pulls); what a pre-pull pod's command finds
// in its image (it always exits 0 once pulled); pods other than upgrader pods run no
// containers (they are only reported Running and Ready); a pod deleted
// while its container runs finishes that container first (PodRunner.Run
// is not interruptible); Node heartbeats, leases, NotReady after a
// kubelet stop (no node lifecycle controller runs) and node-pressure
// evictions; one API server serves every cluster, so Node names (the
// Machine names) must be unique across the workload clusters of one
// harness.
type Provider struct {
	c    client.Client
	o    providerOptions
	dir  string
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	fleets  map[types.NamespacedName]*simulator.Fleet // by Cluster
	kubelet map[string]*kubelet                       // by node name
	servers map[string]*kubeletServer                 // by node name, with WithEtcd
	errs    []error

	etcd *etcdClusters // nil without WithEtcd
}

// StartProvider starts the provider against c (an administrator's client
// of the API server, where InfrastructureCRDs must be installed). Stop it
// with Stop.
func StartProvider(c client.Client, opts ...ProviderOption) (*Provider, error) {
	o := providerOptions{images: map[string]simulator.Staging{}, interval: 100 * time.Millisecond, log: logr.Discard()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if c == nil {
		return nil, errors.New("capitest: StartProvider: nil client")
	}
	if o.interval <= 0 {
		return nil, fmt.Errorf("capitest: StartProvider: poll interval %s is not positive", o.interval)
	}
	if o.registry != nil {
		o.registry.Add(slices.Collect(maps.Keys(o.images))...)
	}
	dir, err := os.MkdirTemp("", "upgradekit-capitest-provider-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{c: c, o: o, dir: dir, stop: cancel, done: make(chan struct{}),
		fleets: map[types.NamespacedName]*simulator.Fleet{}, kubelet: map[string]*kubelet{}, servers: map[string]*kubeletServer{}}
	if o.etcd != "" {
		if _, err := os.Stat(o.etcd); err != nil {
			cancel()
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("capitest: StartProvider: WithEtcd: %w", err)
		}
		p.etcd = &etcdClusters{bin: o.etcd, dir: filepath.Join(dir, "etcd"), clusters: map[types.NamespacedName]*etcdCluster{}}
	}
	go p.loop(ctx)
	return p, nil
}

// Host returns the simulated host of a node (the Machine's name), or nil
// if the provider has not booted it or it was deleted.
func (p *Provider) Host(node string) *simulator.Host {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.kubelet[node]; k != nil {
		return k.host
	}
	return nil
}

// Nodes returns the names of the nodes running now, sorted.
func (p *Provider) Nodes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.kubelet))
}

// HoldPods makes a node's kubelet start no container until ReleasePods,
// as a kubelet slow to pull an image would: the node's pods stay Pending
// (deletions still finish). It reports whether the node is running. A
// test uses it to act while a pod is known to be in flight.
func (p *Provider) HoldPods(node string) bool { return p.hold(node, true) }

// ReleasePods undoes HoldPods. It reports whether the node is running.
func (p *Provider) ReleasePods(node string) bool { return p.hold(node, false) }

func (p *Provider) hold(node string, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.kubelet[node]
	if k != nil {
		k.held.Store(on)
	}
	return k != nil
}

// Errors returns what went wrong in the provider or a kubelet so far (an
// API request that failed, a pod the kubelet could not run): a test can
// require it empty. Conflicts and objects deleted meanwhile are retried,
// not reported.
func (p *Provider) Errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

func (p *Provider) report(err error) {
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) || errors.Is(err, context.Canceled) {
		return
	}
	p.o.log.Error(err, "capitest provider")
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) < 100 {
		p.errs = append(p.errs, err)
	}
}

// Stop stops the provider and every kubelet and removes their files. The
// Nodes stay in the API server. Safe to call more than once.
func (p *Provider) Stop() error {
	p.stop()
	<-p.done
	p.mu.Lock()
	servers := p.servers
	p.servers = map[string]*kubeletServer{}
	p.mu.Unlock()
	for _, ks := range servers {
		ks.stop()
	}
	var errs []error
	if p.etcd != nil {
		errs = append(errs, p.etcd.stop())
	}
	return errors.Join(append(errs, os.RemoveAll(p.dir))...)
}

func (p *Provider) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.o.interval)
	defer t.Stop()
	for {
		p.reconcile(ctx)
		select {
		case <-ctx.Done():
			p.mu.Lock()
			ks := slices.Collect(maps.Values(p.kubelet))
			p.mu.Unlock()
			for _, k := range ks {
				k.stopAndWait()
			}
			return
		case <-t.C:
		}
	}
}

// reconcile provisions TestClusters and TestMachines and retires the
// hosts of machines gone.
func (p *Provider) reconcile(ctx context.Context) {
	var clusters unstructured.UnstructuredList
	clusters.SetGroupVersionKind(InfraClusterGVK.GroupVersion().WithKind(InfraClusterKind + "List"))
	if err := p.c.List(ctx, &clusters); err != nil {
		p.report(fmt.Errorf("listing %s: %w", InfraClusterKind, err))
		return
	}
	for i := range clusters.Items {
		ic := &clusters.Items[i]
		if ok, _, _ := unstructured.NestedBool(ic.Object, "status", "initialization", "provisioned"); ok || ic.GetDeletionTimestamp() != nil {
			continue
		}
		patch := client.MergeFrom(ic.DeepCopy())
		if err := unstructured.SetNestedField(ic.Object, map[string]any{"initialization": map[string]any{"provisioned": true}}, "status"); err != nil {
			p.report(err)
			continue
		}
		if err := p.c.Status().Patch(ctx, ic, patch); err != nil {
			p.report(fmt.Errorf("provisioning %s %s/%s: %w", InfraClusterKind, ic.GetNamespace(), ic.GetName(), err))
		}
	}
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(InfraMachineGVK.GroupVersion().WithKind(InfraMachineKind + "List"))
	if err := p.c.List(ctx, &list); err != nil {
		p.report(fmt.Errorf("listing %s: %w", InfraMachineKind, err))
		return
	}
	alive := map[string]bool{}
	for i := range list.Items {
		im := &list.Items[i]
		if im.GetDeletionTimestamp() != nil {
			continue
		}
		m, err := p.owner(ctx, im)
		if err != nil {
			p.report(err)
			continue
		}
		if m == nil || m.Spec.Bootstrap.DataSecretName == nil {
			alive[im.GetName()] = p.Host(im.GetName()) != nil
			continue // waits for its Machine and bootstrap data, as providers do
		}
		alive[m.Name] = true
		if err := p.provision(ctx, im, m); err != nil {
			p.report(fmt.Errorf("provisioning %s %s/%s: %w", InfraMachineKind, im.GetNamespace(), im.GetName(), err))
		}
	}
	p.mu.Lock()
	var gone []*kubelet
	for name, k := range p.kubelet {
		if !alive[name] {
			gone = append(gone, k)
			delete(p.kubelet, name)
		}
	}
	p.mu.Unlock()
	for _, k := range gone {
		k.stopAndWait()
		p.mu.Lock()
		ks := p.servers[k.node]
		delete(p.servers, k.node)
		p.mu.Unlock()
		if ks != nil {
			ks.stop()
		}
		if p.etcd != nil {
			p.etcd.leave(k.node)
		}
		k.fleet.Remove(k.node)
		err := p.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node}})
		if err != nil && !apierrors.IsNotFound(err) {
			p.report(fmt.Errorf("deleting the Node of removed machine %s: %w", k.node, err))
		}
	}
}

// owner returns the Machine owning an infrastructure machine, or nil
// while Cluster API has not set the reference yet.
func (p *Provider) owner(ctx context.Context, im *unstructured.Unstructured) (*clusterv1.Machine, error) {
	for _, ref := range im.GetOwnerReferences() {
		if ref.Kind != "Machine" || ref.APIVersion != clusterv1.GroupVersion.String() {
			continue
		}
		m := &clusterv1.Machine{}
		if err := p.c.Get(ctx, client.ObjectKey{Namespace: im.GetNamespace(), Name: ref.Name}, m); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("the Machine owning %s %s/%s: %w", InfraMachineKind, im.GetNamespace(), im.GetName(), err)
		}
		return m, nil
	}
	return nil, nil
}

func (p *Provider) provision(ctx context.Context, im *unstructured.Unstructured, m *clusterv1.Machine) error {
	if m.Name != im.GetName() {
		return fmt.Errorf("machine %s owns it: the provider names the node after the machine and needs both names equal", m.Name)
	}
	if err := p.boot(ctx, m); err != nil {
		return err
	}
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		if err := p.certificatesExpiry(ctx, m); err != nil {
			return fmt.Errorf("certificates expiry of %s: %w", m.Name, err)
		}
	}
	providerID := ProviderIDPrefix + m.Namespace + "/" + m.Name
	if got, _, _ := unstructured.NestedString(im.Object, "spec", "providerID"); got != providerID {
		patch := client.MergeFrom(im.DeepCopy())
		if err := unstructured.SetNestedField(im.Object, providerID, "spec", "providerID"); err != nil {
			return err
		}
		if err := p.c.Patch(ctx, im, patch); err != nil {
			return err
		}
	}
	if ok, _, _ := unstructured.NestedBool(im.Object, "status", "initialization", "provisioned"); !ok {
		patch := client.MergeFrom(im.DeepCopy())
		status := map[string]any{
			"initialization": map[string]any{"provisioned": true},
			"addresses": []any{
				map[string]any{"type": string(clusterv1.MachineInternalIP), "address": "127.0.0.1"},
				map[string]any{"type": string(clusterv1.MachineHostName), "address": m.Name},
			},
		}
		if err := unstructured.SetNestedField(im.Object, status, "status"); err != nil {
			return err
		}
		if err := p.c.Status().Patch(ctx, im, patch); err != nil {
			return err
		}
	}
	return nil
}

// boot starts the machine's host and kubelet once.
func (p *Provider) boot(ctx context.Context, m *clusterv1.Machine) error {
	if p.Host(m.Name) != nil {
		return nil
	}
	role := strategy.RoleWorker
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		role = strategy.RoleControlPlane
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
	p.mu.Lock()
	fleet := p.fleets[key]
	if fleet == nil {
		fleet = simulator.NewEmptyFleet(append([]simulator.HostOption{simulator.WithNodeClient(p.c)}, p.o.hostOpts...)...)
		p.fleets[key] = fleet
	}
	p.mu.Unlock()
	host := fleet.Host(m.Name)
	if host == nil {
		var err error
		if host, err = fleet.Add(m.Name, role, m.Spec.Version); err != nil {
			return err
		}
	}
	kubeletPort := 0
	if role == strategy.RoleControlPlane && p.etcd != nil {
		stacked, err := p.stackedEtcd(ctx, m)
		if err != nil {
			return err
		}
		if stacked {
			if kubeletPort, err = p.serveEtcd(ctx, key, m.Name); err != nil {
				return fmt.Errorf("stacked etcd on %s: %w", m.Name, err)
			}
		}
	}
	if role == strategy.RoleControlPlane {
		if err := p.kubeadmInit(ctx, m); err != nil {
			return fmt.Errorf("kubeadm init on %s: %w", m.Name, err)
		}
	}
	if err := p.register(ctx, m, host, role, kubeletPort); err != nil {
		return fmt.Errorf("registering Node %s: %w", m.Name, err)
	}
	if role == strategy.RoleControlPlane {
		if err := host.SyncMirrorPods(ctx); err != nil {
			return fmt.Errorf("mirror pods of %s: %w", m.Name, err)
		}
	}
	journal := filepath.Join(p.dir, m.Name)
	if err := os.MkdirAll(journal, 0o700); err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{p: p, node: m.Name, host: host, fleet: fleet, journal: journal, runners: map[types.UID]*simulator.PodRunner{},
		cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.kubelet[m.Name] = k
	p.mu.Unlock()
	go k.loop(kctx)
	p.o.log.Info("booted", "node", m.Name, "role", role, "version", m.Spec.Version)
	return nil
}

// kubeadmInit does what `kubeadm init` leaves in the cluster that Cluster
// API reads: kube-system/kubeadm-config with the ClusterConfiguration from
// the machine's bootstrap data (the /run/kubeadm/kubeadm.yaml the kubeadm
// bootstrap provider writes for an init). Bootstrap data without an init
// configuration (a join, or data that is not the kubeadm bootstrap
// provider's) and a cluster that has kubeadm-config already are left
// alone.
func (p *Provider) kubeadmInit(ctx context.Context, m *clusterv1.Machine) error {
	key := client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}
	if err := p.c.Get(ctx, key, &corev1.ConfigMap{}); err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	var data corev1.Secret
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: *m.Spec.Bootstrap.DataSecretName}, &data); err != nil {
		return err
	}
	var cloudInit struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(data.Data["value"], &cloudInit); err != nil {
		return nil // not cloud-init: nothing kubeadm would init from
	}
	for _, f := range cloudInit.WriteFiles {
		if f.Path != "/run/kubeadm/kubeadm.yaml" {
			continue
		}
		var cluster string
		init := false
		for _, doc := range strings.Split(f.Content, "\n---") {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return fmt.Errorf("%s: %w", f.Path, err)
			}
			switch meta.Kind {
			case "ClusterConfiguration":
				cluster = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) + "\n"
			case "InitConfiguration":
				init = true
			}
		}
		if !init || cluster == "" {
			return nil
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data: map[string]string{"ClusterConfiguration": cluster}}
		if err := p.c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		p.o.log.Info("kubeadm init", "node", m.Name)
	}
	return nil
}

// certificatesExpiry does what KubeadmControlPlane does for a control
// plane machine whose KubeadmConfig lacks Cluster API's certificate expiry
// annotation: it records when the node's certificates expire, in that
// annotation. KubeadmControlPlane reads the API server's serving
// certificate through a port-forward to its Pod, which needs a kubelet
// serving the API server's portforward subresource to the API server's
// Pod; the harness's kubelets serve it only to etcd Pods (WithEtcd), so
// the harness writes one year from now: kubeadm's validity for
// certificates it has just issued (at boot) or renewed (`kubeadm upgrade`,
// after which the extension removes the annotation). It does not model
// certificates that age: an annotation removed long after the last
// renewal would read one year from then, not from the renewal.
func (p *Provider) certificatesExpiry(ctx context.Context, m *clusterv1.Machine) error {
	ref := m.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfig" || ref.Name == "" {
		return nil
	}
	var cfg bootstrapv1.KubeadmConfig
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, &cfg); err != nil {
		return err
	}
	if _, ok := cfg.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation]; ok {
		return nil
	}
	patch := client.MergeFrom(cfg.DeepCopy())
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation] = time.Now().AddDate(1, 0, 0).UTC().Format(time.RFC3339)
	return p.c.Patch(ctx, &cfg, patch)
}

// stackedEtcd reports whether m's KubeadmConfig runs etcd on the node
// (no clusterConfiguration.etcd.external endpoints).
func (p *Provider) stackedEtcd(ctx context.Context, m *clusterv1.Machine) (bool, error) {
	ref := m.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfig" || ref.Name == "" {
		return false, nil
	}
	var cfg bootstrapv1.KubeadmConfig
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, &cfg); err != nil {
		return false, err
	}
	return len(cfg.Spec.ClusterConfiguration.Etcd.External.Endpoints) == 0, nil
}

// serveEtcd starts node's etcd member in cluster and its kubelet endpoint
// (once), and returns the endpoint's port.
func (p *Provider) serveEtcd(ctx context.Context, cluster types.NamespacedName, node string) (int, error) {
	if err := p.etcd.join(ctx, p.c, cluster, node); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ks := p.servers[node]; ks != nil {
		return ks.port, nil
	}
	ks, err := startKubeletServer(node, func() *etcdMember { return p.etcd.member(cluster, node) })
	if err != nil {
		return 0, err
	}
	p.servers[node] = ks
	return ks.port, nil
}

// register creates the Node the kubelet registers at its first start;
// kubeletPort, when not 0, is its HTTPS endpoint's (WithEtcd).
func (p *Provider) register(ctx context.Context, m *clusterv1.Machine, h *simulator.Host, role strategy.Role, kubeletPort int) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: map[string]string{
		corev1.LabelHostname: m.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}},
		Spec: corev1.NodeSpec{ProviderID: ProviderIDPrefix + m.Namespace + "/" + m.Name}}
	if role == strategy.RoleControlPlane { // what kubeadm init/join marks a control plane with
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
		n.Labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
		n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	}
	if err := p.c.Create(ctx, n); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := p.c.Get(ctx, client.ObjectKey{Name: m.Name}, n); err != nil {
			return err
		}
	}
	n.Status.Conditions = []corev1.NodeCondition{simulator.NodeReady(h.Ready())}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: "KubeletHas" + "No" + string(t),
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
	}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: h.RunningVersion(simulator.ComponentKubelet), OperatingSystem: "linux", Architecture: "amd64",
		ContainerRuntimeVersion: "containerd://" + h.RunningVersion(simulator.ComponentContainerd)}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: m.Name}}
	if kubeletPort != 0 {
		// The API server reaches a kubelet at its Node's address by type
		// (Hostname first), and the node's name resolves to nothing here.
		n.Status.Addresses = n.Status.Addresses[:1]
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kubeletPort) //nolint:gosec // a TCP port
	}
	return p.c.Status().Update(ctx, n)
}

// kubelet plays one node's kubelet.
type kubelet struct {
	p       *Provider
	node    string
	host    *simulator.Host
	fleet   *simulator.Fleet
	journal string
	runners map[types.UID]*simulator.PodRunner
	held    atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func (k *kubelet) stopAndWait() {
	k.cancel()
	<-k.done
}

func (k *kubelet) loop(ctx context.Context) {
	defer close(k.done)
	t := time.NewTicker(k.p.o.interval)
	defer t.Stop()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubelet) sync(ctx context.Context) {
	// Only this node's pods, as a kubelet watches them (a field selector
	// the API server evaluates): a hundred kubelets listing every pod of
	// the cluster would load the API server far beyond what the
	// extension does.
	var pods corev1.PodList
	if err := k.p.c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": k.node}); err != nil {
		k.p.report(fmt.Errorf("kubelet %s: listing pods: %w", k.node, err))
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != k.node || ctx.Err() != nil {
			continue
		}
		if pod.DeletionTimestamp != nil {
			// The containers stopped (a running step has finished: Run
			// is synchronous); the kubelet confirms the deletion.
			delete(k.runners, pod.UID)
			err := k.p.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				k.p.report(fmt.Errorf("kubelet %s: deleting pod %s/%s: %w", k.node, pod.Namespace, pod.Name, err))
			}
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if k.host.UnitState("kubelet") != simulator.UnitActive || k.held.Load() {
			continue // a stopped kubelet starts and reports nothing
		}
		if !k.pulled(ctx, pod) {
			continue
		}
		if _, upgrader := pod.Annotations[nodepod.AnnotationSteps]; upgrader {
			k.runUpgrader(ctx, pod)
			continue
		}
		if nodepod.PrePullSelector().Matches(labels.Set(pod.Labels)) {
			// The pre-pull pod's command (the runner's version, or
			// nsenter --version) exits 0 at once.
			k.writeStatus(ctx, pod, succeededStatus(pod))
			continue
		}
		if pod.Status.Phase == "" || pod.Status.Phase == corev1.PodPending {
			k.writeStatus(ctx, pod, runningStatus(pod))
		}
	}
}

// pulled pulls the images of a pod none of whose containers started yet
// (WithRegistry), and tells whether they all are; if not, it writes the
// Pending status a kubelet reports for the failed pull.
func (k *kubelet) pulled(ctx context.Context, pod *corev1.Pod) bool {
	reg := k.p.o.registry
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; reg == nil || mirror || k.runners[pod.UID] != nil ||
		(pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending) {
		return true
	}
	st, ok := reg.PullPod(pod)
	if !ok {
		k.writeStatus(ctx, pod, st)
	}
	return ok
}

func (k *kubelet) runUpgrader(ctx context.Context, pod *corev1.Pod) {
	r := k.runners[pod.UID]
	if r == nil {
		opts := []simulator.PodOption{simulator.WithPodJournalDir(k.journal)}
		for _, c := range pod.Spec.InitContainers {
			if s, ok := k.p.o.images[c.Image]; ok && c.Name == nodepod.StageContainer {
				opts = append(opts, simulator.WithPodImageStaging(s))
			}
		}
		var err error
		if r, err = simulator.NewPodRunner(k.host, pod, opts...); err != nil {
			k.p.report(fmt.Errorf("kubelet %s: pod %s/%s: %w", k.node, pod.Namespace, pod.Name, err))
			return
		}
		k.runners[pod.UID] = r
	}
	res, err := r.Run(ctx)
	if err != nil {
		k.p.report(fmt.Errorf("kubelet %s: running pod %s/%s: %w", k.node, pod.Namespace, pod.Name, err))
		return
	}
	for _, run := range res.Runs {
		if run.ExitCode != 0 {
			k.p.o.log.Info("container failed", "node", k.node, "pod", pod.Namespace+"/"+pod.Name, "container", run.Name, "exitCode", run.ExitCode, "output", run.Output)
		}
	}
	k.writeStatus(ctx, pod, r.Pod().Status)
}

func (k *kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) {
	if equality.Semantic.DeepEqual(pod.Status, st) {
		return
	}
	pod.Status = st
	if err := k.p.c.Status().Update(ctx, pod); err != nil {
		k.p.report(fmt.Errorf("kubelet %s: status of pod %s/%s: %w", k.node, pod.Namespace, pod.Name, err))
	}
}

// succeededStatus is what a kubelet reports for a pod whose containers
// all ran and exited 0.
func succeededStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &now, HostIP: "127.0.0.1", PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
		}}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}})
	}
	return st
}

// runningStatus is what a kubelet reports for a pod whose containers all
// started and are ready.
func runningStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, HostIP: "127.0.0.1", PodIP: "10.0.0.1",
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	return st
}
