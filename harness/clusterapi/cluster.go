package clusterapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// ClusterObjects returns a workload cluster for the harness, to create in
// order with an administrator's client of env: the Cluster (a control
// plane endpoint set) and its TestCluster, its CA Secret
// (<name>-ca, which the kubeadm bootstrap provider reads to join
// workers), its kubeconfig Secret (<name>-kubeconfig, reaching env
// itself: env is the management cluster and the workload cluster), and
// one control plane Machine at cpVersion named <name>-cp-0, with its
// bootstrap data Secret and TestMachine. The control plane Machine is not
// managed by a KubeadmControlPlane: once it has a Node, Cluster API marks
// the control plane initialized and the kubeadm bootstrap provider
// generates join data for the cluster's MachineDeployments.
func ClusterObjects(env *apiserver.Env, namespace, name, cpVersion string) ([]client.Object, error) {
	if env == nil {
		return nil, errors.New("capitest: ClusterObjects: nil env")
	}
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("capitest: ClusterObjects: namespace %q and name %q must both be set", namespace, name)
	}
	kubeconfig, err := env.KubeconfigSecret(namespace, name)
	if err != nil {
		return nil, err
	}
	crt, key, err := newCA(name)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: name}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraClusterKind, Name: name}}}
	infraCluster := testCluster(namespace, name)
	ca := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-ca", Labels: labels},
		Type: clusterv1.ClusterSecretType, Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
	cp := name + "-cp-0"
	data := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cp + "-bootstrap", Labels: labels},
		Type: clusterv1.ClusterSecretType, Data: map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")}}
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cp,
		Labels: map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: name, Version: cpVersion,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: &data.Name},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraMachineKind, Name: cp}}}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(InfraMachineGVK)
	infra.SetNamespace(namespace)
	infra.SetName(cp)
	infra.SetLabels(labels)
	infra.Object["spec"] = map[string]any{}
	return []client.Object{infraCluster, cluster, ca, kubeconfig, data, infra, machine}, nil
}

// MachineDeploymentObjects returns a MachineDeployment of replicas
// machines at version in a cluster, with its KubeadmConfigTemplate and
// TestMachineTemplate (both named <name>-0; spec.template.spec.image is
// "test-image-1", a field no updater covers, to change for a rollout).
// Its rollout strategy is RollingUpdate with maxSurge 0 and
// maxUnavailable 1: Cluster API updates one machine at a time and, when
// the change can be made in place, moves machines instead of creating
// one more first.
func MachineDeploymentObjects(namespace, cluster, name string, replicas int32, version string) []client.Object {
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
	tmpl := name + "-0"
	kct := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: tmpl, Labels: labels},
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{}}}}}
	imt := &unstructured.Unstructured{}
	imt.SetGroupVersionKind(InfraTemplateGVK)
	imt.SetNamespace(namespace)
	imt.SetName(tmpl)
	imt.SetLabels(labels)
	imt.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"image": "test-image-1"}}}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: cluster, Replicas: &replicas,
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: cluster, clusterv1.MachineDeploymentNameLabel: name}},
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type:          clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &zero, MaxUnavailable: &one}}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{clusterv1.ClusterNameLabel: cluster, clusterv1.MachineDeploymentNameLabel: name}},
				Spec: clusterv1.MachineSpec{ClusterName: cluster, Version: version,
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: tmpl}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraTemplateKind, Name: tmpl}}}}}
	return []client.Object{kct, imt, md}
}

// KubeadmControlPlaneObjects returns a workload cluster whose control
// plane is a KubeadmControlPlane of replicas machines at version, to
// create in order with an administrator's client of env: its TestCluster,
// the Cluster, its kubeconfig Secret (reaching env; of type Opaque, so
// KubeadmControlPlane treats it as user-provided and neither adopts nor
// rotates it), the external etcd's CA and client certificate Secrets
// (<name>-etcd, <name>-apiserver-etcd-client), the control plane's
// TestMachineTemplate (<name>-cp-0) and the KubeadmControlPlane (<name>-cp),
// rolling out with maxSurge 0: one machine at a time, in place when the
// extension accepts.
//
// The cluster uses external etcd unless StackedEtcd says otherwise. With
// external etcd KubeadmControlPlane checks the API server, controller
// manager and scheduler Pods of each machine, which the harness's kubelets
// report. With stacked etcd it also reads each etcd member's health by
// port-forwarding to its etcd Pod through the API server, which the
// provider serves with WithEtcd (NewForTest's default).
func KubeadmControlPlaneObjects(env *apiserver.Env, namespace, name string, replicas int32, version string, opts ...ControlPlaneOption) ([]client.Object, error) {
	var o controlPlaneOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if env == nil {
		return nil, errors.New("capitest: KubeadmControlPlaneObjects: nil env")
	}
	if namespace == "" || name == "" {
		return nil, fmt.Errorf("capitest: KubeadmControlPlaneObjects: namespace %q and name %q must both be set", namespace, name)
	}
	kubeconfig, err := env.KubeconfigSecret(namespace, name)
	if err != nil {
		return nil, err
	}
	// A user-provided kubeconfig (not of Cluster API's secret type):
	// KubeadmControlPlane neither adopts nor rotates it. Rotation would
	// re-sign it with the cluster CA, which envtest does not trust.
	kubeconfig.Type = corev1.SecretTypeOpaque
	etcdCA, _, err := newCA(name + "-etcd")
	if err != nil {
		return nil, err
	}
	clientCrt, clientKey, err := newCA(name + "-apiserver-etcd-client")
	if err != nil {
		return nil, err
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: name}
	secret := func(suffix string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-" + suffix, Labels: labels},
			Type: clusterv1.ClusterSecretType, Data: data}
	}
	infraCluster := testCluster(namespace, name)
	kcpName, tmplName := name+"-cp", name+"-cp-0"
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraClusterKind, Name: name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: kcpName}}}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(InfraTemplateGVK)
	tmpl.SetNamespace(namespace)
	tmpl.SetName(tmplName)
	tmpl.SetLabels(labels)
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"image": "test-image-1"}}}
	zero := intstr.FromInt32(0)
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: kcpName, Labels: labels},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: &replicas, Version: version,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraTemplateKind, Name: tmplName}}},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{
				Etcd: bootstrapv1.Etcd{External: bootstrapv1.ExternalEtcd{Endpoints: []string{"https://127.0.0.1:2379"},
					CAFile: "/etc/kubernetes/pki/etcd/ca.crt", CertFile: "/etc/kubernetes/pki/apiserver-etcd-client.crt", KeyFile: "/etc/kubernetes/pki/apiserver-etcd-client.key"}}}},
			Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: controlplanev1.KubeadmControlPlaneRolloutStrategy{
				Type: controlplanev1.RollingUpdateStrategyType, RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: &zero}}}}}
	if o.stacked {
		// kubeadm's default: etcd on the control plane machines, its CA
		// generated by KubeadmControlPlane (<name>-etcd, with its key).
		kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.Etcd = bootstrapv1.Etcd{}
		return []client.Object{infraCluster, cluster, kubeconfig, tmpl, kcp}, nil
	}
	return []client.Object{infraCluster, cluster, kubeconfig,
		secret("etcd", map[string][]byte{corev1.TLSCertKey: etcdCA}),
		secret("apiserver-etcd-client", map[string][]byte{corev1.TLSCertKey: clientCrt, corev1.TLSPrivateKeyKey: clientKey}),
		tmpl, kcp}, nil
}

// ControlPlaneOption shapes the control plane of KubeadmControlPlaneObjects.
type ControlPlaneOption func(*controlPlaneOptions)

type controlPlaneOptions struct {
	stacked bool
}

// StackedEtcd runs etcd on the control plane machines, kubeadm's default
// (no clusterConfiguration.etcd.external), instead of the external etcd
// the harness uses otherwise: KubeadmControlPlane generates the etcd CA,
// and the provider runs a real member per control plane machine
// (WithEtcd, which NewForTest sets).
func StackedEtcd() ControlPlaneOption { return func(o *controlPlaneOptions) { o.stacked = true } }

// testCluster is a cluster's TestCluster, its control plane endpoint set
// to where the Cluster's is.
func testCluster(namespace, name string) *unstructured.Unstructured {
	ic := &unstructured.Unstructured{}
	ic.SetGroupVersionKind(InfraClusterGVK)
	ic.SetNamespace(namespace)
	ic.SetName(name)
	ic.SetLabels(map[string]string{clusterv1.ClusterNameLabel: name})
	ic.Object["spec"] = map[string]any{"controlPlaneEndpoint": map[string]any{"host": "127.0.0.1", "port": int64(6443)}}
	return ic
}

// Create creates objs in order through c (an object that exists already
// is left as it is).
func Create(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("capitest: creating %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// newCA returns a self-signed CA certificate and key, PEM encoded.
func newCA(cn string) (crt, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn + "-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, err
	}
	return pemPair(der, k)
}

// pemPair PEM-encodes a certificate and its key.
func pemPair(der []byte, k *ecdsa.PrivateKey) (crt, key []byte, err error) {
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Topology is the shape of a ClusterClassObjects cluster.
type Topology struct {
	// Version is the Cluster's spec.topology.version.
	Version string
	// ControlPlanes and Workers are the KubeadmControlPlane's replicas
	// and those of the one MachineDeployment topology, TopologyWorkers.
	ControlPlanes, Workers int32
	// KubernetesVersions, when set, is the ClusterClass's
	// spec.kubernetesVersions: the versions Cluster API plans chained
	// upgrades through (one minor at a time for the control plane; workers
	// may skip up to three). Unset, Cluster API refuses a topology.version
	// bump of more than one minor.
	KubernetesVersions []string
}

// TopologyWorkers is the name of the MachineDeployment topology of a
// ClusterClassObjects cluster (its MachineDeployment carries it in the
// label clusterv1.ClusterTopologyMachineDeploymentNameLabel) and of its
// worker class.
const TopologyWorkers = "md-0"

// ClusterClassObjects returns a managed topology cluster (Cluster API's
// ClusterTopology feature gate, which the managers must be started with:
// WithFeatureGates(DefaultFeatureGates + ",ClusterTopology=true")) to
// create in order with an administrator's client of env: the
// kubeconfig and external etcd Secrets as KubeadmControlPlaneObjects
// makes them, the ClusterClass <name>-class with its templates
// (TestClusterTemplate, KubeadmControlPlaneTemplate, a TestMachineTemplate
// each for control plane and workers, a KubeadmConfigTemplate for the
// workers; KubeadmControlPlane rolls out with maxSurge 0 and the
// MachineDeployment with maxSurge 0, maxUnavailable 1, both one machine
// at a time), and the Cluster whose spec.topology uses it. Cluster API's
// topology controller creates the TestCluster, the KubeadmControlPlane and
// the MachineDeployment (named by it; find them by their cluster and
// topology labels), and applies a topology.version bump to the control
// plane first, to the workers once it is done.
//
// Create the Cluster once the ClusterClass is reconciled (its
// status.observedGeneration at its generation): Cluster API's webhook
// accepts it before, but its topology controller waits.
func ClusterClassObjects(env *apiserver.Env, namespace, name string, topo Topology) ([]client.Object, error) {
	if topo.Version == "" || topo.ControlPlanes < 1 || topo.Workers < 0 {
		return nil, fmt.Errorf("capitest: ClusterClassObjects: topology %+v needs a version and at least one control plane", topo)
	}
	cp, err := KubeadmControlPlaneObjects(env, namespace, name, topo.ControlPlanes, topo.Version)
	if err != nil {
		return nil, err
	}
	// The Secrets, and the external etcd the KubeadmControlPlane uses.
	var objs []client.Object
	var kcp *controlplanev1.KubeadmControlPlane
	for _, o := range cp {
		switch o := o.(type) {
		case *corev1.Secret:
			objs = append(objs, o)
		case *controlplanev1.KubeadmControlPlane:
			kcp = o
		}
	}
	if kcp == nil {
		return nil, errors.New("capitest: ClusterClassObjects: no KubeadmControlPlane to copy from")
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: name}
	template := func(gvk schema.GroupVersionKind, tname string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(namespace)
		u.SetName(tname)
		u.SetLabels(labels)
		u.Object["spec"] = map[string]any{"template": map[string]any{"spec": spec}}
		return u
	}
	ref := func(gvk schema.GroupVersionKind, tname string) clusterv1.ClusterClassTemplateReference {
		return clusterv1.ClusterClassTemplateReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: tname}
	}
	infraCluster := template(InfraClusterTemplateGVK, name+"-cluster", map[string]any{"controlPlaneEndpoint": map[string]any{"host": "127.0.0.1", "port": int64(6443)}})
	cpMachine := template(InfraTemplateGVK, name+"-cp", map[string]any{"image": "test-image-1"})
	workerMachine := template(InfraTemplateGVK, name+"-worker", map[string]any{"image": "test-image-1"})
	kcpTemplate := &controlplanev1.KubeadmControlPlaneTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-cp", Labels: labels},
		Spec: controlplanev1.KubeadmControlPlaneTemplateSpec{Template: controlplanev1.KubeadmControlPlaneTemplateResource{
			Spec: controlplanev1.KubeadmControlPlaneTemplateResourceSpec{KubeadmConfigSpec: kcp.Spec.KubeadmConfigSpec,
				Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: kcp.Spec.Rollout.Strategy}}}}}
	workerConfig := &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-worker", Labels: labels},
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{}}}}}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	class := &clusterv1.ClusterClass{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-class"},
		Spec: clusterv1.ClusterClassSpec{
			KubernetesVersions: topo.KubernetesVersions,
			Infrastructure:     clusterv1.InfrastructureClass{TemplateRef: ref(InfraClusterTemplateGVK, infraCluster.GetName())},
			ControlPlane: clusterv1.ControlPlaneClass{TemplateRef: ref(controlplanev1.GroupVersion.WithKind("KubeadmControlPlaneTemplate"), kcpTemplate.Name),
				MachineInfrastructure: clusterv1.ControlPlaneClassMachineInfrastructureTemplate{TemplateRef: ref(InfraTemplateGVK, cpMachine.GetName())}},
			Workers: clusterv1.WorkersClass{MachineDeployments: []clusterv1.MachineDeploymentClass{{
				Class:          TopologyWorkers,
				Bootstrap:      clusterv1.MachineDeploymentClassBootstrapTemplate{TemplateRef: ref(bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate"), workerConfig.Name)},
				Infrastructure: clusterv1.MachineDeploymentClassInfrastructureTemplate{TemplateRef: ref(InfraTemplateGVK, workerMachine.GetName())},
				Rollout: clusterv1.MachineDeploymentClassRolloutSpec{Strategy: clusterv1.MachineDeploymentClassRolloutStrategy{
					Type:          clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentClassRolloutStrategyRollingUpdate{MaxSurge: &zero, MaxUnavailable: &one}}},
			}}},
		}}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			Topology: clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: class.Name}, Version: topo.Version,
				ControlPlane: clusterv1.ControlPlaneTopology{Replicas: &topo.ControlPlanes},
				Workers: clusterv1.WorkersTopology{MachineDeployments: []clusterv1.MachineDeploymentTopology{{
					Class: TopologyWorkers, Name: TopologyWorkers, Replicas: &topo.Workers}}}}}}
	return append(objs, infraCluster, cpMachine, workerMachine, kcpTemplate, workerConfig, class, cluster), nil
}
