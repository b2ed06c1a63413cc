package capi_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment/mdutil"

	"github.com/upgradekit/upgradekit/diff"
)

// capiKCPMatches is the oracle: CAPI v1.14.2's own KubeadmConfig
// comparison for a control plane machine (filters.go matchesKubeadmConfig),
// assembled from CAPI's exported pieces: ComputeDesiredKubeadmConfig,
// PrepareKubeadmConfigsForDiff and a plain go-cmp comparison, as CAPI's
// compare.Diff is.
func capiKCPMatches(t *testing.T, version string, kcpSpec bootstrapv1.KubeadmConfigSpec, current *bootstrapv1.KubeadmConfig) bool {
	t.Helper()
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "kcp", Namespace: "default"},
		Spec:       controlplanev1.KubeadmControlPlaneSpec{Version: version, KubeadmConfigSpec: kcpSpec},
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"}}
	desiredJoin, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, cluster, true, current.Name, current)
	require.NoError(t, err)
	d, c := kcppkg.PrepareKubeadmConfigsForDiff(desiredJoin, current, true)
	if cmp.Equal(&c.Spec, &d.Spec) {
		return true
	}
	j := current.Spec.JoinConfiguration
	isJoin := j.ControlPlane != nil || len(j.NodeRegistration.KubeletExtraArgs) > 0
	if isJoin {
		return false
	}
	desiredInit, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, cluster, false, current.Name, current)
	require.NoError(t, err)
	d, c = kcppkg.PrepareKubeadmConfigsForDiff(desiredInit, current, false)
	return cmp.Equal(&c.Spec, &d.Spec)
}

func kcpDiff(t *testing.T, version string, kcpSpec bootstrapv1.KubeadmConfigSpec, current *bootstrapv1.KubeadmConfig) diff.ChangeSet {
	t.Helper()
	cs, err := diff.Objects(diff.ObjectBootstrap, current,
		&bootstrapv1.KubeadmConfig{Spec: kcpSpec}, diff.KubeadmControlPlane(version))
	require.NoError(t, err)
	return cs
}

func kcfg(spec bootstrapv1.KubeadmConfigSpec) *bootstrapv1.KubeadmConfig {
	return &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "default"}, Spec: spec}
}

func nodeReg(name string) bootstrapv1.NodeRegistrationOptions {
	return bootstrapv1.NodeRegistrationOptions{Name: name}
}

// TestKubeadmControlPlanePresetMatchesCAPI runs the cases of CAPI's
// filters_test.go (TestMatchesKubeadmConfig and the omittable-field tests),
// written from their descriptions, through our preset and through CAPI's
// own code, and requires both to agree with the expected answer.
func TestKubeadmControlPlanePresetMatchesCAPI(t *testing.T) {
	cases := []struct {
		name    string
		version string
		kcp     bootstrapv1.KubeadmConfigSpec
		current bootstrapv1.KubeadmConfigSpec
		match   bool
		field   string // a Field our diff must report when not matching
	}{
		{
			name:    "same certificatesDir, init machine converted to join",
			kcp:     bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{CertificatesDir: "foo"}},
			current: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{CertificatesDir: "foo"}},
			match:   true,
		},
		{
			name:  "both empty cluster configurations",
			match: true,
		},
		{
			name:    "v1.31 defaults ControlPlaneKubeletLocalMode on the desired side",
			version: "v1.31.0",
			current: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{
				FeatureGates: map[string]bool{"ControlPlaneKubeletLocalMode": true}}},
			match: true,
		},
		{
			name:    "v1.31 feature gate missing on the machine is a change",
			version: "v1.31.0",
			match:   false,
			field:   "bootstrap.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode",
		},
		{
			name:    "v1.36 no longer defaults the feature gate",
			version: "v1.36.0",
			match:   true,
		},
		{
			name: "controlPlaneEndpoint and DNS are ignored",
			kcp: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{
				DNS: bootstrapv1.DNS{ImageTag: "v1.10.1", ImageRepository: "gcr.io/capi-test"}}},
			current: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{
				ControlPlaneEndpoint: "1.2.3.4:6443",
				DNS:                  bootstrapv1.DNS{ImageTag: "v1.9.3"}}},
			match: true,
		},
		{
			name:    "different certificatesDir",
			kcp:     bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{CertificatesDir: "foo"}},
			current: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{CertificatesDir: "bar"}},
			field:   "bootstrap.spec.clusterConfiguration.certificatesDir",
		},
		{
			name: "init configuration converted to join: timeouts, patches, skipPhases, nodeRegistration, endpoint; CPCHC and caCertPath ignored",
			kcp: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{
				Timeouts:         bootstrapv1.Timeouts{ControlPlaneComponentHealthCheckSeconds: ptr.To[int32](5), KubernetesAPICallSeconds: ptr.To[int32](7)},
				Patches:          bootstrapv1.Patches{Directory: "/test/patches"},
				SkipPhases:       []string{"skip-phase"},
				NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "name", KubeletExtraArgs: []bootstrapv1.Arg{{Name: "v", Value: ptr.To("8")}}},
				ControlPlane:     &bootstrapv1.JoinControlPlane{LocalAPIEndpoint: bootstrapv1.APIEndpoint{AdvertiseAddress: "1.2.3.4", BindPort: 6443}},
				CACertPath:       "/tmp/cacert",
			}},
			current: bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{
				Timeouts:         bootstrapv1.Timeouts{ControlPlaneComponentHealthCheckSeconds: ptr.To[int32](1), KubernetesAPICallSeconds: ptr.To[int32](7)},
				Patches:          bootstrapv1.Patches{Directory: "/test/patches"},
				SkipPhases:       []string{"skip-phase"},
				NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "name", KubeletExtraArgs: []bootstrapv1.Arg{{Name: "v", Value: ptr.To("8")}}},
				LocalAPIEndpoint: bootstrapv1.APIEndpoint{AdvertiseAddress: "1.2.3.4", BindPort: 6443},
			}},
			match: true,
		},
		{
			name: "init machine matches the KCP init configuration though join differs",
			kcp: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("name")},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("Different name")},
			},
			current: bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("name")}},
			match:   true,
		},
		{
			name: "init machine with an old name: the init diff is reported",
			kcp: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("A new name")},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("A new name")},
			},
			current: bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("An old name")}},
			field:   "bootstrap.spec.initConfiguration.nodeRegistration.name",
		},
		{
			name:    "join machine with the same name",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("A new name")}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: nodeReg("A new name")}},
			match:   true,
		},
		{
			name: "discovery and the health-check timeout are ignored",
			kcp: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{
				NodeRegistration: nodeReg("A new name"),
				Discovery:        bootstrapv1.Discovery{TLSBootstrapToken: "aaa"},
				Timeouts:         bootstrapv1.Timeouts{ControlPlaneComponentHealthCheckSeconds: ptr.To[int32](1)},
			}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{
				ControlPlane:     &bootstrapv1.JoinControlPlane{},
				NodeRegistration: nodeReg("A new name"),
				Discovery:        bootstrapv1.Discovery{TLSBootstrapToken: "bbb"},
				Timeouts:         bootstrapv1.Timeouts{ControlPlaneComponentHealthCheckSeconds: ptr.To[int32](11)},
			}},
			match: true,
		},
		{
			name:    "KCP without joinConfiguration.controlPlane still matches a join machine",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("n")}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: nodeReg("n")}},
			match:   true,
		},
		{
			name: "v1.11 machine marked join only by kubeletExtraArgs",
			kcp: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "A new name", KubeletExtraArgs: []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}}}},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "A new name", KubeletExtraArgs: []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}}}},
			},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: "A new name", KubeletExtraArgs: []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}}}}},
			match:   true,
		},
		{
			name: "init machine whose init config matches neither",
			kcp: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("Different name")},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("Different name")},
			},
			current: bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg("name")}},
			field:   "bootstrap.spec.initConfiguration.nodeRegistration.name",
		},
		{
			name:    "join machine with a local API endpoint the KCP does not have",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("name")}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("name"), ControlPlane: &bootstrapv1.JoinControlPlane{LocalAPIEndpoint: bootstrapv1.APIEndpoint{AdvertiseAddress: "1.2.3.4", BindPort: 6443}}}},
			field:   "bootstrap.spec.joinConfiguration.controlPlane.localAPIEndpoint.bindPort",
		},
		{
			name:    "join machine with an old name",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg("A new name")}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: nodeReg("An old name")}},
			field:   "bootstrap.spec.joinConfiguration.nodeRegistration.name",
		},
		{
			name:    "KCP without joinConfiguration, join machine with a name",
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: nodeReg("An old name")}},
			field:   "bootstrap.spec.joinConfiguration.nodeRegistration.name",
		},
		{
			name: "empty feature gates, args and files equal absent ones",
			kcp: bootstrapv1.KubeadmConfigSpec{
				ClusterConfiguration: bootstrapv1.ClusterConfiguration{FeatureGates: map[string]bool{}},
				InitConfiguration:    bootstrapv1.InitConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: []bootstrapv1.Arg{}}},
				JoinConfiguration:    bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: []bootstrapv1.Arg{}}},
				Files:                []bootstrapv1.File{},
			},
			match: true,
		},
		{
			name:    "format defaults to cloud-config",
			kcp:     bootstrapv1.KubeadmConfigSpec{Format: bootstrapv1.CloudConfig},
			current: bootstrapv1.KubeadmConfigSpec{},
			match:   true,
		},
		{
			name:  "a new file",
			kcp:   bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/tmp/foo"}}},
			field: "bootstrap.spec.files[path=/tmp/foo]",
		},
		{
			name: "nodeRegistration.taints: [] (no taints) differs from absent (default taint)",
			kcp: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{
				NodeRegistration: bootstrapv1.NodeRegistrationOptions{Taints: &[]corev1.Taint{}}}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}}},
			field:   "bootstrap.spec.joinConfiguration.nodeRegistration.taints",
		},
		{
			name: "kubelet args reordered: CAPI compares lists by index",
			kcp: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				KubeletExtraArgs: []bootstrapv1.Arg{{Name: "a", Value: ptr.To("1")}, {Name: "b", Value: ptr.To("2")}}}}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}, NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				KubeletExtraArgs: []bootstrapv1.Arg{{Name: "b", Value: ptr.To("2")}, {Name: "a", Value: ptr.To("1")}}}}},
			field: "bootstrap.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs",
		},
		{
			name:    "imagePullPolicy defaults to IfNotPresent",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{ImagePullPolicy: corev1.PullIfNotPresent}}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}}},
			match:   true,
		},
		{
			name:    "a real timeout change counts",
			kcp:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{Timeouts: bootstrapv1.Timeouts{KubeletHealthCheckSeconds: ptr.To[int32](40)}}},
			current: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{ControlPlane: &bootstrapv1.JoinControlPlane{}}},
			field:   "bootstrap.spec.joinConfiguration.timeouts.kubeletHealthCheckSeconds",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.version
			if v == "" {
				v = "v1.30.0"
			}
			current := kcfg(tc.current)
			oracle := capiKCPMatches(t, v, tc.kcp, current.DeepCopy())
			require.Equal(t, tc.match, oracle, "the case must describe CAPI's behaviour")
			cs := kcpDiff(t, v, tc.kcp, current)
			require.Equal(t, tc.match, cs.Empty(), "our preset disagrees with CAPI:\n%s", cs)
			if !tc.match {
				var fields []string
				for _, c := range cs.Changes {
					fields = append(fields, c.Field)
				}
				require.Contains(t, fields, tc.field, "changes:\n%s", cs)
			}
			// The current object passed in is never modified.
			require.Equal(t, kcfg(tc.current), current)
		})
	}
}

// TestMachineDeploymentRolloutPresetMatchesCAPI checks the MD preset against
// mdutil.MachineTemplateUpToDate, case by case.
func TestMachineDeploymentRolloutPresetMatchesCAPI(t *testing.T) {
	base := func() *clusterv1.MachineDeployment {
		return &clusterv1.MachineDeployment{
			TypeMeta:   metav1.TypeMeta{Kind: "MachineDeployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "md", Namespace: "default"},
			Spec: clusterv1.MachineDeploymentSpec{Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: "demo", Version: "v1.30.0", FailureDomain: "fd-1",
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: "bt-1"}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachineTemplate", Name: "it-1"},
				},
			}},
		}
	}
	cases := []struct {
		name   string
		mutate func(*clusterv1.MachineSpec, *clusterv1.ObjectMeta)
		rolls  bool
	}{
		{"nothing", func(*clusterv1.MachineSpec, *clusterv1.ObjectMeta) {}, false},
		{"labels", func(_ *clusterv1.MachineSpec, m *clusterv1.ObjectMeta) { m.Labels["a"] = "x" }, false},
		{"annotations", func(_ *clusterv1.MachineSpec, m *clusterv1.ObjectMeta) { m.Annotations = nil }, false},
		{"clusterName", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.ClusterName = "other" }, false},
		{"providerID", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.ProviderID = "p" }, false},
		{"minReadySeconds", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.MinReadySeconds = ptr.To[int32](5) }, false},
		{"readinessGates", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) {
			s.ReadinessGates = []clusterv1.MachineReadinessGate{{ConditionType: "X"}}
		}, false},
		{"deletion timeouts", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) {
			s.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](10)
			s.Deletion.NodeVolumeDetachTimeoutSeconds = ptr.To[int32](10)
			s.Deletion.NodeDeletionTimeoutSeconds = ptr.To[int32](10)
		}, false},
		{"taints", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) {
			s.Taints = []clusterv1.MachineTaint{{Key: "k", Effect: "NoSchedule", Propagation: "Always"}}
		}, false},
		{"version", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.Version = "v1.31.0" }, true},
		{"failureDomain", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.FailureDomain = "fd-2" }, true},
		{"bootstrap template name", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.Bootstrap.ConfigRef.Name = "bt-2" }, true},
		{"bootstrap data secret", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) { s.Bootstrap.DataSecretName = ptr.To("s") }, true},
		{"infrastructure template kind", func(s *clusterv1.MachineSpec, _ *clusterv1.ObjectMeta) {
			s.InfrastructureRef.Kind = "AWSMachineTemplate"
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur, des := base(), base()
			tc.mutate(&des.Spec.Template.Spec, &des.Spec.Template.ObjectMeta)
			upToDate, _ := mdutil.MachineTemplateUpToDate(&cur.Spec.Template, &des.Spec.Template)
			require.Equal(t, tc.rolls, !upToDate, "the case must describe CAPI's behaviour")

			bt := &unstructured.Unstructured{Object: map[string]any{"kind": "KubeadmConfigTemplate",
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"format": "cloud-config"}}}}}
			bt2 := bt.DeepCopy()
			// Template content is not what CAPI rolls on; the preset ignores it.
			bt2.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["format"] = "ignition"
			cs, err := diff.Templates(diff.State{Machine: cur, Bootstrap: bt}, diff.State{Machine: des, Bootstrap: bt2}, diff.MachineDeploymentRollout())
			require.NoError(t, err)
			require.Equal(t, tc.rolls, !cs.Empty(), "%s", cs)

			// Without the preset every one of these is a change.
			full, err := diff.Templates(diff.State{Machine: cur}, diff.State{Machine: des})
			require.NoError(t, err)
			require.Equal(t, tc.name != "nothing", !full.Empty())
		})
	}
}

// TestKubeadmControlPlaneRandomAgreement compares the preset with CAPI's code
// over many generated KubeadmConfig pairs.
func TestKubeadmControlPlaneRandomAgreement(t *testing.T) {
	gen := func(i int) bootstrapv1.KubeadmConfigSpec {
		s := bootstrapv1.KubeadmConfigSpec{}
		if i&1 != 0 {
			s.ClusterConfiguration.CertificatesDir = "dir"
		}
		if i&2 != 0 {
			s.InitConfiguration.NodeRegistration.Name = "n"
		}
		if i&4 != 0 {
			s.JoinConfiguration.NodeRegistration.Name = "n"
		}
		if i&8 != 0 {
			s.JoinConfiguration.ControlPlane = &bootstrapv1.JoinControlPlane{}
		}
		if i&16 != 0 {
			s.Files = []bootstrapv1.File{{Path: "/f", Content: "c"}}
		}
		if i&32 != 0 {
			s.Format = bootstrapv1.CloudConfig
		}
		if i&64 != 0 {
			s.ClusterConfiguration.DNS.ImageTag = "v1"
		}
		if i&128 != 0 {
			s.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "a", Value: ptr.To("1")}}
		}
		if i&256 != 0 {
			s.InitConfiguration.LocalAPIEndpoint.BindPort = 6443
		}
		return s
	}
	n := 0
	for _, v := range []string{"v1.30.0", "v1.32.1"} {
		d, err := diff.New(diff.KubeadmControlPlane(v))
		require.NoError(t, err)
		for i := 0; i < 512; i += 7 {
			for j := 0; j < 512; j += 11 {
				kcpSpec, cur := gen(i), kcfg(gen(j))
				oracle := capiKCPMatches(t, v, kcpSpec, cur.DeepCopy())
				cs, err := d.Objects(diff.ObjectBootstrap, cur, &bootstrapv1.KubeadmConfig{Spec: kcpSpec})
				require.NoError(t, err)
				require.Equal(t, oracle, cs.Empty(), fmt.Sprintf("version %s kcp case %d current case %d:\n%s", v, i, j, cs))
				n++
			}
		}
	}
	t.Logf("%d KubeadmConfig pairs agree with CAPI", n)
}
