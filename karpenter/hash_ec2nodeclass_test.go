package karpenter_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/google/go-cmp/cmp"
	"github.com/mitchellh/hashstructure/v2"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/karpenter"
)

// hashReadJSON decodes testdata/hash/<name> into v.
func hashReadJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hash", name))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v))
}

// hashUpstreamNodeClass is the EC2NodeClass of the AWS provider's own hash
// test (pkg/apis/v1/ec2nodeclass_hash_test.go), whose pinned hashes the
// golden table repeats as an independent check.
func hashUpstreamNodeClass() *awsv1.EC2NodeClass {
	return &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{
		Role:                     "role-1",
		Tags:                     map[string]string{"keyTag-1": "valueTag-1", "keyTag-2": "valueTag-2"},
		Context:                  hashPtr("fake-context"),
		DetailedMonitoring:       hashPtr(false),
		AssociatePublicIPAddress: hashPtr(false),
		MetadataOptions: &awsv1.MetadataOptions{
			HTTPEndpoint:            hashPtr("disabled"),
			HTTPProtocolIPv6:        hashPtr("disabled"),
			HTTPPutResponseHopLimit: hashPtr(int64(1)),
			HTTPTokens:              hashPtr("optional"),
		},
		BlockDeviceMappings: []*awsv1.BlockDeviceMapping{
			{
				DeviceName: hashPtr("map-device-1"),
				EBS: &awsv1.BlockDevice{
					DeleteOnTermination: hashPtr(false),
					Encrypted:           hashPtr(false),
					IOPS:                hashPtr(int64(0)),
					KMSKeyID:            hashPtr("fakeKMSKeyID"),
					SnapshotID:          hashPtr("fakeSnapshot"),
					Throughput:          hashPtr(int64(0)),
					VolumeSize:          resource.NewScaledQuantity(2, resource.Giga),
					VolumeType:          hashPtr("standard"),
				},
			},
			{DeviceName: hashPtr("map-device-2")},
		},
		UserData: hashPtr("userdata-test-1"),
	}}
}

// hashRealisticNodeClass is an EC2NodeClass like the ones clusters run.
func hashRealisticNodeClass() *awsv1.EC2NodeClass {
	return &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{
		Role:                       "KarpenterNodeRole-prod",
		AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}},
		SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: map[string]string{"karpenter.sh/discovery": "prod"}}},
		SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: map[string]string{"karpenter.sh/discovery": "prod"}}},
		Tags:                       map[string]string{"team": "platform", "cost-center": "cc-4711", "karpenter.sh/discovery": "prod"},
		MetadataOptions: &awsv1.MetadataOptions{
			HTTPEndpoint: hashPtr("enabled"), HTTPProtocolIPv6: hashPtr("disabled"),
			HTTPPutResponseHopLimit: hashPtr(int64(1)), HTTPTokens: hashPtr("required"),
		},
		BlockDeviceMappings: []*awsv1.BlockDeviceMapping{{
			DeviceName: hashPtr("/dev/xvda"), RootVolume: true,
			EBS: &awsv1.BlockDevice{
				VolumeSize: hashPtr(resource.MustParse("100Gi")), VolumeType: hashPtr("gp3"),
				IOPS: hashPtr(int64(3000)), Throughput: hashPtr(int64(125)), Encrypted: hashPtr(true), DeleteOnTermination: hashPtr(true),
			},
		}},
		Kubelet: &awsv1.KubeletConfiguration{
			MaxPods:        hashPtr(int32(110)),
			SystemReserved: map[string]string{"cpu": "100m", "memory": "100Mi"},
			EvictionHard:   map[string]string{"memory.available": "5%"},
		},
		DetailedMonitoring: hashPtr(true),
	}}
}

func TestEC2NodeClassHashGolden(t *testing.T) {
	ca := hashPtr("test-ca-bundle")
	upstream := func(edit func(*awsv1.EC2NodeClass)) *awsv1.EC2NodeClass {
		nc := hashUpstreamNodeClass()
		if edit != nil {
			edit(nc)
		}
		return nc
	}
	minimal := func(edit func(*awsv1.EC2NodeClassSpec)) *awsv1.EC2NodeClass {
		nc := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{Role: "r"}}
		if edit != nil {
			edit(&nc.Spec)
		}
		return nc
	}
	tests := []struct {
		name   string
		nc     *awsv1.EC2NodeClass
		ca     *string
		want   string
		sameAs string
	}{
		// The provider's own pinned hashes (ec2nodeclass_hash_test.go).
		{name: "upstream base", nc: upstream(nil), ca: ca, want: "2608468723537941485"},
		{name: "upstream UserData", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.UserData = hashPtr("userdata-test-2") }), ca: ca, want: "2153344579995979450"},
		{name: "upstream Tags merged", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.Tags["keyTag-test-3"] = "valueTag-test-3" }), ca: ca, want: "4608386791045313156"},
		{name: "upstream Context", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.Context = hashPtr("context-2") }), ca: ca, want: "11612053647989098410"},
		{name: "upstream DetailedMonitoring", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.DetailedMonitoring = hashPtr(true) }), ca: ca, want: "11845605438531206428"},
		{name: "upstream InstanceStorePolicy", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.InstanceStorePolicy = hashPtr(awsv1.InstanceStorePolicyRAID0)
		}), ca: ca, want: "6430637013089544585"},
		{name: "upstream AssociatePublicIPAddress", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.AssociatePublicIPAddress = hashPtr(true) }), ca: ca, want: "6811176403923819181"},
		{name: "upstream MetadataOptions HTTPEndpoint", nc: upstream(func(nc *awsv1.EC2NodeClass) { nc.Spec.MetadataOptions.HTTPEndpoint = hashPtr("enabled") }), ca: ca, want: "8158886403801636337"},
		{name: "upstream MetadataOptions HTTPPutResponseHopLimit", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.MetadataOptions.HTTPPutResponseHopLimit = hashPtr(int64(10))
		}), ca: ca, want: "8968306366664488826"},
		{name: "upstream ConnectionTracking UDPTimeout", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.ConnectionTracking = &awsv1.ConnectionTracking{UDPTimeout: hashPtr(int32(45))}
		}), ca: ca, want: "5078825826133662844"},
		{name: "upstream CPUOptions NestedVirtualization", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.CPUOptions = &awsv1.CPUOptions{NestedVirtualization: hashPtr("enabled")}
		}), ca: ca, want: "17001101224536964682"},
		{name: "upstream volumeSize 10G", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.BlockDeviceMappings[0].EBS.VolumeSize = resource.NewScaledQuantity(10, resource.Giga)
		}), ca: ca, want: "3564293065344858862"},
		{name: "upstream instanceProfile", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.Role, nc.Spec.InstanceProfile = "", hashPtr("test-instance-profile")
		}), ca: ca, want: "3585768058063247698"},
		{name: "upstream reordered blockDeviceMappings", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			b := nc.Spec.BlockDeviceMappings
			b[0], b[1] = b[1], b[0]
		}), ca: ca, sameAs: "upstream base", want: "2608468723537941485"},
		{name: "upstream selector terms changed", nc: upstream(func(nc *awsv1.EC2NodeClass) {
			nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Tags: map[string]string{"": "ami-test-value"}}}
			nc.Spec.SubnetSelectorTerms = []awsv1.SubnetSelectorTerm{{ID: "subnet-1"}}
			nc.Spec.SecurityGroupSelectorTerms = []awsv1.SecurityGroupSelectorTerm{{Name: "sg"}}
			nc.Spec.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{ID: "cr-1"}}
			nc.Spec.IPPrefixCount = hashPtr(int32(3))
		}), ca: ca, sameAs: "upstream base", want: "2608468723537941485"},

		{name: "nil EC2NodeClass", nc: nil, want: "16280745031732288215"},
		{name: "zero EC2NodeClass", nc: &awsv1.EC2NodeClass{}, sameAs: "nil EC2NodeClass", want: "16280745031732288215"},
		{name: "realistic", nc: hashRealisticNodeClass(), ca: hashPtr("-----BEGIN CERTIFICATE-----\nMIIC...\n-----END CERTIFICATE-----\n"), want: "17558789979510305343"},
		{name: "minimal", nc: minimal(nil), want: "7932837972722532588"},
		{name: "caBundle empty string", nc: minimal(nil), ca: hashPtr(""), sameAs: "minimal", want: "7932837972722532588"},
		{name: "caBundle equal to the family cancels out", nc: minimal(func(s *awsv1.EC2NodeClassSpec) { s.AMIFamily = hashPtr("AL2") }), ca: hashPtr("AL2"),
			want: "5501872226901889517"},
		{name: "family Custom with caBundle Custom", nc: minimal(nil), ca: hashPtr(awsv1.AMIFamilyCustom), sameAs: "caBundle equal to the family cancels out", want: "5501872226901889517"},
		{name: "alias al2023", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}
		}), want: "2898637819372767213"},
		{name: "amiFamily AL2023", nc: minimal(func(s *awsv1.EC2NodeClassSpec) { s.AMIFamily = hashPtr(awsv1.AMIFamilyAL2023) }), sameAs: "alias al2023", want: "2898637819372767213"},
		{name: "alias after a non-alias term", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.AMISelectorTerms = []awsv1.AMISelectorTerm{{ID: "ami-1"}, {Alias: "bottlerocket@v1.30.0"}}
		}), want: "7524190425205766657"},
		{name: "amiFamily wins over alias", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.AMIFamily = hashPtr(awsv1.AMIFamilyCustom)
			s.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}
		}), sameAs: "minimal", want: "7932837972722532588"},
		{name: "tags nil vs empty", nc: minimal(func(s *awsv1.EC2NodeClassSpec) { s.Tags = map[string]string{} }), want: "3573808778190225224"},
		{name: "pointers to zero values", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.AssociatePublicIPAddress, s.DetailedMonitoring = hashPtr(false), hashPtr(false)
			s.UserData, s.InstanceProfile, s.Context = hashPtr(""), hashPtr(""), hashPtr("")
			s.InstanceStorePolicy = hashPtr(awsv1.InstanceStorePolicy(""))
			s.PlacementGroupSelector = &awsv1.PlacementGroupSelector{Name: hashPtr(""), ID: hashPtr("")}
			s.MetadataOptions = &awsv1.MetadataOptions{HTTPPutResponseHopLimit: hashPtr(int64(0))}
			s.ConnectionTracking = &awsv1.ConnectionTracking{TCPEstablishedTimeout: hashPtr(int32(0))}
			s.CPUOptions = &awsv1.CPUOptions{}
		}), want: "17078657486338654370"},
		{name: "kubelet every field", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.Kubelet = &awsv1.KubeletConfiguration{
				ClusterDNS:                  []string{"10.0.0.10", "10.0.0.11"},
				MaxPods:                     hashPtr(int32(58)),
				PodsPerCore:                 hashPtr(int32(0)),
				SystemReserved:              map[string]string{"cpu": "100m"},
				KubeReserved:                map[string]string{},
				EvictionHard:                map[string]string{"memory.available": "5%"},
				EvictionSoft:                map[string]string{"memory.available": "10%", "nodefs.available": "15%"},
				EvictionSoftGracePeriod:     map[string]metav1.Duration{"memory.available": {Duration: 90e9}, "nodefs.available": {}},
				EvictionMaxPodGracePeriod:   hashPtr(int32(60)),
				ImageGCHighThresholdPercent: hashPtr(int32(85)),
				ImageGCLowThresholdPercent:  hashPtr(int32(80)),
				CPUCFSQuota:                 hashPtr(false),
			}
		}), want: "183179866459440388"},
		{name: "kubelet clusterDNS duplicates cancel", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.Kubelet = &awsv1.KubeletConfiguration{ClusterDNS: []string{"10.0.0.10", "10.0.0.10"}}
		}), want: "10088292534075538579"},
		{name: "kubelet clusterDNS empty", nc: minimal(func(s *awsv1.EC2NodeClassSpec) { s.Kubelet = &awsv1.KubeletConfiguration{ClusterDNS: []string{}} }),
			sameAs: "kubelet clusterDNS duplicates cancel", want: "10088292534075538579"},
		{name: "kubelet empty", nc: minimal(func(s *awsv1.EC2NodeClassSpec) { s.Kubelet = &awsv1.KubeletConfiguration{} }), want: "11785482705552929984"},
		{name: "nil list elements", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{nil, {DeviceName: hashPtr("/dev/xvda")}}
			s.NetworkInterfaces = []*awsv1.NetworkInterface{nil}
		}), want: "5147209860432331672"},
		{name: "nil list elements as zero structs", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{}, {DeviceName: hashPtr("/dev/xvda")}}
			s.NetworkInterfaces = []*awsv1.NetworkInterface{{}}
		}), sameAs: "nil list elements", want: "5147209860432331672"},
		{name: "network interfaces", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.NetworkInterfaces = []*awsv1.NetworkInterface{
				{NetworkCardIndex: 0, DeviceIndex: 0, InterfaceType: awsv1.InterfaceTypeInterface},
				{NetworkCardIndex: 1, DeviceIndex: 1, InterfaceType: awsv1.InterfaceTypeEFAOnly},
			}
		}), want: "1197166507028207761"},
		{name: "volumeSize parsed 20Gi", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: hashPtr(resource.MustParse("20Gi"))}}}
		}), want: "559929035909988761"},
		{name: "volumeSize 20480Mi (canonical form 20Gi)", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: hashPtr(resource.MustParse("20480Mi"))}}}
		}), sameAs: "volumeSize parsed 20Gi", want: "559929035909988761"},
		{name: "volumeSize built in code", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: resource.NewQuantity(20<<30, resource.BinarySI)}}}
		}), sameAs: "volumeSize parsed 20Gi", want: "559929035909988761"},
		{name: "volumeSize +20Gi keeps its spelling", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: hashPtr(resource.MustParse("+20Gi"))}}}
		}), want: "8204565192659907323"},
		{name: "volumeSize zero quantity", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: &resource.Quantity{}}}}
		}), want: "486053053307656371"},
		{name: "unicode", nc: minimal(func(s *awsv1.EC2NodeClassSpec) {
			s.Tags = map[string]string{"名前": "値", "emoji": "🚀"}
			s.UserData = hashPtr("#!/bin/bash\necho 'ünïcødé'\n")
		}), want: "10708151412750037642"},
	}
	got := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := karpenter.EC2NodeClassHash(tt.nc, tt.ca)
			got[tt.name] = h
			ref := tt.nc
			if ref == nil {
				ref = &awsv1.EC2NodeClass{}
			}
			require.Equal(t, ref.Hash(tt.ca), h, "the provider's nc.Hash(caBundle)")
			require.Equal(t, strconv.FormatUint(karpenter.EC2NodeClassHash64(tt.nc, tt.ca), 10), h)
			require.Equal(t, tt.want, h, "pinned hash (the provider's hashing changed?)")
			if tt.sameAs != "" {
				require.Contains(t, got, tt.sameAs)
				require.Equal(t, got[tt.sameAs], h, "hash of %q", tt.sameAs)
			}
		})
	}
}

func TestEC2NodeClassHashFromJSON(t *testing.T) {
	tests := []struct {
		file string
		ca   *string
		want string
	}{
		{file: "ec2nodeclass-al2023.json", want: "6560101229072478400"},
		{file: "ec2nodeclass-al2023.json", ca: hashPtr("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"), want: "9317216247137487147"},
		{file: "ec2nodeclass-bottlerocket.json", want: "3196247067760677436"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var nc awsv1.EC2NodeClass
			hashReadJSON(t, tt.file, &nc)
			got := karpenter.EC2NodeClassHash(&nc, tt.ca)
			require.Equal(t, nc.Hash(tt.ca), got)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestEC2NodeClassHashAMIFamily checks the family resolution against the
// provider's AMIFamily for every alias family it accepts.
func TestEC2NodeClassHashAMIFamily(t *testing.T) {
	aliases := []string{"al2@latest", "al2023@latest", "al2023@v20250117", "bottlerocket@v1.30.0", "windows2019@latest", "windows2022@latest", "windows2025@latest", "al2@"}
	for _, alias := range aliases {
		nc := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{AMISelectorTerms: []awsv1.AMISelectorTerm{{Alias: alias}}}}
		base := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{AMIFamily: hashPtr(nc.AMIFamily())}}
		require.Equal(t, nc.Hash(nil), karpenter.EC2NodeClassHash(nc, nil), alias)
		require.Equal(t, base.Hash(nil), karpenter.EC2NodeClassHash(nc, nil), alias)
	}
}

// TestEC2NodeClassHashMalformedAlias: the provider exits the process
// (log.Fatalf) on these; the hash must not, and hashes the text before "@".
func TestEC2NodeClassHashMalformedAlias(t *testing.T) {
	for alias, family := range map[string]string{
		"al2023":           "al2023",
		"AL2023@latest":    "AL2023",
		"ubuntu@latest":    "ubuntu",
		"al2023@v1@v2":     "al2023",
		"@latest":          "",
		"windows2019@@":    "windows2019",
		"bottlerocket@x@y": "bottlerocket",
	} {
		nc := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{AMISelectorTerms: []awsv1.AMISelectorTerm{{Alias: alias}}}}
		want := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{AMIFamily: hashPtr(family)}}
		require.NotPanics(t, func() { _ = karpenter.EC2NodeClassHash64(nc, nil) })
		require.Equal(t, want.Hash(nil), karpenter.EC2NodeClassHash(nc, nil), alias)
	}
}

// TestEC2NodeClassHashLeavesQuantityCacheAlone: the provider's Hash fills a
// quantity's string cache (a write, racy under concurrent hashing);
// EC2NodeClassHash64 does not write to nc at all.
func TestEC2NodeClassHashLeavesQuantityCacheAlone(t *testing.T) {
	cache := func(q *resource.Quantity) string { return reflect.ValueOf(q).Elem().FieldByName("s").String() }
	q := resource.NewScaledQuantity(2, resource.Giga)
	nc := &awsv1.EC2NodeClass{Spec: awsv1.EC2NodeClassSpec{BlockDeviceMappings: []*awsv1.BlockDeviceMapping{{EBS: &awsv1.BlockDevice{VolumeSize: q}}}}}
	require.Empty(t, cache(q))
	got := karpenter.EC2NodeClassHash(nc, nil)
	require.Empty(t, cache(q), "EC2NodeClassHash wrote the quantity's cache")
	require.Equal(t, nc.Hash(nil), got)
	require.Equal(t, "2G", cache(q), "the provider's Hash fills the cache (if this changes, the comment in quantityString is stale)")
}

func TestEC2NodeClassHashAllocs(t *testing.T) {
	nc := hashRealisticNodeClass()
	var sink uint64
	allocs := testing.AllocsPerRun(200, func() { sink ^= karpenter.EC2NodeClassHash64(nc, nil) })
	require.Zero(t, allocs, "EC2NodeClassHash64 allocates on a class with parsed quantities")
	_ = sink
}

func TestEC2NodeClassHashRandom(t *testing.T) {
	seed := hashSeed(t)
	r := rand.New(rand.NewPCG(seed, 0x6563326e6f6465))
	const n = 3000
	for i := range n {
		nc, ca := hashRandNodeClass(r)
		got := karpenter.EC2NodeClassHash(nc, ca) // first: the provider's Hash fills quantity caches
		if want := nc.Hash(ca); got != want {
			t.Fatalf("EC2NodeClass %d of seed %d: EC2NodeClassHash %s, nc.Hash %s\nspec: %#v", i, seed, got, want, nc.Spec)
		}
	}
}

func TestHashedEC2NodeClassFieldsPinned(t *testing.T) {
	want := []string{
		`EC2NodeClassSpec.SubnetSelectorTerms []v1.SubnetSelectorTerm hash:"ignore"`,
		`EC2NodeClassSpec.SecurityGroupSelectorTerms []v1.SecurityGroupSelectorTerm hash:"ignore"`,
		`EC2NodeClassSpec.CapacityReservationSelectorTerms []v1.CapacityReservationSelectorTerm hash:"ignore"`,
		"EC2NodeClassSpec.PlacementGroupSelector *v1.PlacementGroupSelector",
		"  PlacementGroupSelector.Name *string",
		"  PlacementGroupSelector.ID *string",
		"EC2NodeClassSpec.AssociatePublicIPAddress *bool",
		`EC2NodeClassSpec.IPPrefixCount *int32 hash:"ignore"`,
		`EC2NodeClassSpec.AMISelectorTerms []v1.AMISelectorTerm hash:"ignore"`,
		`EC2NodeClassSpec.AMIFamily *string hash:"ignore"`,
		"EC2NodeClassSpec.UserData *string",
		"EC2NodeClassSpec.Role string",
		"EC2NodeClassSpec.InstanceProfile *string",
		"EC2NodeClassSpec.Tags map[string]string",
		"EC2NodeClassSpec.Kubelet *v1.KubeletConfiguration",
		"  KubeletConfiguration.ClusterDNS []string",
		"  KubeletConfiguration.MaxPods *int32",
		"  KubeletConfiguration.PodsPerCore *int32",
		"  KubeletConfiguration.SystemReserved map[string]string",
		"  KubeletConfiguration.KubeReserved map[string]string",
		"  KubeletConfiguration.EvictionHard map[string]string",
		"  KubeletConfiguration.EvictionSoft map[string]string",
		"  KubeletConfiguration.EvictionSoftGracePeriod map[string]v1.Duration",
		"    Duration.Duration time.Duration",
		"  KubeletConfiguration.EvictionMaxPodGracePeriod *int32",
		"  KubeletConfiguration.ImageGCHighThresholdPercent *int32",
		"  KubeletConfiguration.ImageGCLowThresholdPercent *int32",
		"  KubeletConfiguration.CPUCFSQuota *bool",
		"EC2NodeClassSpec.BlockDeviceMappings []*v1.BlockDeviceMapping",
		"  BlockDeviceMapping.DeviceName *string",
		"  BlockDeviceMapping.EBS *v1.BlockDevice",
		"    BlockDevice.DeleteOnTermination *bool",
		"    BlockDevice.Encrypted *bool",
		"    BlockDevice.IOPS *int64",
		"    BlockDevice.KMSKeyID *string",
		"    BlockDevice.SnapshotID *string",
		"    BlockDevice.Throughput *int64",
		"    BlockDevice.VolumeInitializationRate *int32",
		`    BlockDevice.VolumeSize *resource.Quantity hash:"string"`,
		"    BlockDevice.VolumeType *string",
		"  BlockDeviceMapping.RootVolume bool",
		"EC2NodeClassSpec.InstanceStorePolicy *v1.InstanceStorePolicy",
		"EC2NodeClassSpec.NetworkInterfaces []*v1.NetworkInterface",
		"  NetworkInterface.NetworkCardIndex int32",
		"  NetworkInterface.DeviceIndex int32",
		"  NetworkInterface.InterfaceType v1.InterfaceType",
		"EC2NodeClassSpec.DetailedMonitoring *bool",
		"EC2NodeClassSpec.MetadataOptions *v1.MetadataOptions",
		"  MetadataOptions.HTTPEndpoint *string",
		"  MetadataOptions.HTTPProtocolIPv6 *string",
		"  MetadataOptions.HTTPPutResponseHopLimit *int64",
		"  MetadataOptions.HTTPTokens *string",
		"EC2NodeClassSpec.ConnectionTracking *v1.ConnectionTracking",
		"  ConnectionTracking.TCPEstablishedTimeout *int32",
		"  ConnectionTracking.UDPStreamTimeout *int32",
		"  ConnectionTracking.UDPTimeout *int32",
		"EC2NodeClassSpec.Context *string",
		"EC2NodeClassSpec.CPUOptions *v1.CPUOptions",
		"  CPUOptions.NestedVirtualization *string",
	}
	require.Empty(t, cmp.Diff(want, hashFieldList(reflect.TypeFor[awsv1.EC2NodeClassSpec]())),
		"the fields the AWS provider hashes for an EC2NodeClass changed (-pinned +now): update EC2NodeClassHash64 and this list")
}

// TestEC2NodeClassHashEveryLeaf sets each hashed leaf of a zero spec, one
// at a time and all together, and compares with the provider's Hash.
func TestEC2NodeClassHashEveryLeaf(t *testing.T) {
	setters := hashLeafSetters(reflect.TypeFor[awsv1.EC2NodeClassSpec]())
	require.GreaterOrEqual(t, len(setters), 40)
	all := &awsv1.EC2NodeClass{}
	seen := map[string]string{}
	for path, set := range setters {
		nc := &awsv1.EC2NodeClass{}
		set(reflect.ValueOf(&nc.Spec).Elem())
		set(reflect.ValueOf(&all.Spec).Elem())
		got := karpenter.EC2NodeClassHash(nc, nil)
		require.Equal(t, nc.Hash(nil), got, "leaf %s", path)
		require.NotContains(t, seen, got, "leaf %s hashes like another leaf", path)
		seen[got] = path
	}
	require.Equal(t, all.Hash(nil), karpenter.EC2NodeClassHash(all, nil), "all leaves set")
}

// Random EC2NodeClasses: every spec field varies, hashed or not.

func hashRandStringPtr(r *rand.Rand) *string {
	if r.IntN(3) == 0 {
		return nil
	}
	return hashPtr(hashRandString(r))
}

func hashRandInt32Ptr(r *rand.Rand) *int32 {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return hashPtr(int32(0))
	default:
		return hashPtr(r.Int32() - r.Int32())
	}
}

func hashRandInt64Ptr(r *rand.Rand) *int64 {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return hashPtr(int64(0))
	default:
		return hashPtr(r.Int64() - r.Int64())
	}
}

func hashRandBoolPtr(r *rand.Rand) *bool {
	if r.IntN(3) == 0 {
		return nil
	}
	return hashPtr(r.IntN(2) == 0)
}

func hashRandQuantity(r *rand.Rand) *resource.Quantity {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return &resource.Quantity{}
	case 2:
		return resource.NewQuantity(r.Int64N(1<<45), resource.BinarySI)
	case 3:
		return resource.NewScaledQuantity(r.Int64N(1000), resource.Giga)
	case 4:
		return resource.NewMilliQuantity(r.Int64N(1e6), resource.DecimalSI)
	default:
		s := []string{"20Gi", "+20Gi", "0", "100G", "1.5Ti", "20480Mi", "1e3", "0.5", "100", "8Ei", "12345678901234567890"}[r.IntN(11)]
		return hashPtr(resource.MustParse(s))
	}
}

func hashRandNodeClass(r *rand.Rand) (*awsv1.EC2NodeClass, *string) {
	var s awsv1.EC2NodeClassSpec
	families := []string{awsv1.AMIFamilyAL2, awsv1.AMIFamilyAL2023, awsv1.AMIFamilyBottlerocket, awsv1.AMIFamilyUbuntu,
		awsv1.AMIFamilyWindows2019, awsv1.AMIFamilyWindows2022, awsv1.AMIFamilyWindows2025, awsv1.AMIFamilyCustom}
	aliases := []string{"al2@latest", "al2023@latest", "al2023@v20250117", "bottlerocket@v1.30.0", "windows2019@latest", "windows2022@latest", "windows2025@x"}
	if r.IntN(3) == 0 {
		if r.IntN(4) == 0 {
			s.AMIFamily = hashPtr(hashRandString(r))
		} else {
			s.AMIFamily = hashPtr(families[r.IntN(len(families))])
		}
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		s.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: aliases[r.IntN(len(aliases))]}}
	case 2:
		s.AMISelectorTerms = []awsv1.AMISelectorTerm{{ID: "ami-1"}, {Tags: hashRandMap(r), Name: hashRandString(r), Owner: "amazon"}}
	default:
		s.AMISelectorTerms = []awsv1.AMISelectorTerm{{SSMParameter: hashRandString(r)}, {Alias: aliases[r.IntN(len(aliases))]}}
	}
	if r.IntN(2) == 0 {
		s.SubnetSelectorTerms = []awsv1.SubnetSelectorTerm{{Tags: hashRandMap(r), ID: hashRandString(r)}}
		s.SecurityGroupSelectorTerms = []awsv1.SecurityGroupSelectorTerm{{Name: hashRandString(r)}}
		s.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{OwnerID: hashRandString(r)}}
		s.IPPrefixCount = hashRandInt32Ptr(r)
	}
	if r.IntN(3) == 0 {
		s.PlacementGroupSelector = &awsv1.PlacementGroupSelector{Name: hashRandStringPtr(r), ID: hashRandStringPtr(r)}
	}
	s.AssociatePublicIPAddress = hashRandBoolPtr(r)
	s.UserData = hashRandStringPtr(r)
	if r.IntN(2) == 0 {
		s.Role = hashRandString(r)
	} else {
		s.InstanceProfile = hashRandStringPtr(r)
	}
	s.Tags = hashRandMap(r)
	if r.IntN(3) > 0 {
		k := &awsv1.KubeletConfiguration{
			MaxPods: hashRandInt32Ptr(r), PodsPerCore: hashRandInt32Ptr(r),
			SystemReserved: hashRandMap(r), KubeReserved: hashRandMap(r), EvictionHard: hashRandMap(r), EvictionSoft: hashRandMap(r),
			EvictionMaxPodGracePeriod: hashRandInt32Ptr(r), ImageGCHighThresholdPercent: hashRandInt32Ptr(r), ImageGCLowThresholdPercent: hashRandInt32Ptr(r),
			CPUCFSQuota: hashRandBoolPtr(r),
		}
		switch r.IntN(4) {
		case 0:
		case 1:
			k.ClusterDNS = []string{}
		default:
			for range 1 + r.IntN(4) {
				if len(k.ClusterDNS) > 0 && r.IntN(3) == 0 {
					k.ClusterDNS = append(k.ClusterDNS, k.ClusterDNS[0])
				} else {
					k.ClusterDNS = append(k.ClusterDNS, hashRandString(r))
				}
			}
		}
		if r.IntN(3) > 0 {
			k.EvictionSoftGracePeriod = map[string]metav1.Duration{}
			for range r.IntN(4) {
				k.EvictionSoftGracePeriod[hashRandString(r)] = metav1.Duration{Duration: hashRandDuration(r)}
			}
		}
		s.Kubelet = k
	}
	if r.IntN(4) > 0 {
		s.BlockDeviceMappings = []*awsv1.BlockDeviceMapping{}
		for range r.IntN(5) {
			if len(s.BlockDeviceMappings) > 0 && r.IntN(5) == 0 {
				s.BlockDeviceMappings = append(s.BlockDeviceMappings, s.BlockDeviceMappings[0])
				continue
			}
			if r.IntN(8) == 0 {
				s.BlockDeviceMappings = append(s.BlockDeviceMappings, nil)
				continue
			}
			m := &awsv1.BlockDeviceMapping{DeviceName: hashRandStringPtr(r), RootVolume: r.IntN(2) == 0}
			if r.IntN(4) > 0 {
				m.EBS = &awsv1.BlockDevice{
					DeleteOnTermination: hashRandBoolPtr(r), Encrypted: hashRandBoolPtr(r), IOPS: hashRandInt64Ptr(r),
					KMSKeyID: hashRandStringPtr(r), SnapshotID: hashRandStringPtr(r), Throughput: hashRandInt64Ptr(r),
					VolumeInitializationRate: hashRandInt32Ptr(r), VolumeSize: hashRandQuantity(r), VolumeType: hashRandStringPtr(r),
				}
			}
			s.BlockDeviceMappings = append(s.BlockDeviceMappings, m)
		}
	}
	if r.IntN(3) == 0 {
		s.InstanceStorePolicy = hashPtr(awsv1.InstanceStorePolicy([]string{"", "RAID0", hashRandString(r)}[r.IntN(3)]))
	}
	if r.IntN(3) == 0 {
		s.NetworkInterfaces = []*awsv1.NetworkInterface{}
		for range r.IntN(4) {
			if r.IntN(6) == 0 {
				s.NetworkInterfaces = append(s.NetworkInterfaces, nil)
				continue
			}
			s.NetworkInterfaces = append(s.NetworkInterfaces, &awsv1.NetworkInterface{
				NetworkCardIndex: r.Int32N(4), DeviceIndex: r.Int32N(4),
				InterfaceType: awsv1.InterfaceType([]string{"", "interface", "efa-only"}[r.IntN(3)]),
			})
		}
	}
	s.DetailedMonitoring = hashRandBoolPtr(r)
	if r.IntN(3) == 0 {
		s.MetadataOptions = &awsv1.MetadataOptions{
			HTTPEndpoint: hashRandStringPtr(r), HTTPProtocolIPv6: hashRandStringPtr(r),
			HTTPPutResponseHopLimit: hashRandInt64Ptr(r), HTTPTokens: hashRandStringPtr(r),
		}
	}
	if r.IntN(3) == 0 {
		s.ConnectionTracking = &awsv1.ConnectionTracking{
			TCPEstablishedTimeout: hashRandInt32Ptr(r), UDPStreamTimeout: hashRandInt32Ptr(r), UDPTimeout: hashRandInt32Ptr(r),
		}
	}
	s.Context = hashRandStringPtr(r)
	if r.IntN(3) == 0 {
		s.CPUOptions = &awsv1.CPUOptions{NestedVirtualization: hashRandStringPtr(r)}
	}
	var ca *string
	switch r.IntN(4) {
	case 0:
	case 1:
		ca = hashPtr("")
	default:
		ca = hashPtr(hashRandString(r))
	}
	nc := &awsv1.EC2NodeClass{Spec: s}
	nc.Name = "class"
	return nc, ca
}

// TestEC2NodeClassHashMatchesHashstructure compares with hashstructure
// called directly, as the provider calls it, on the random classes.
func TestEC2NodeClassHashMatchesHashstructure(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 200 {
		nc, ca := hashRandNodeClass(r)
		caStr := ""
		if ca != nil {
			caStr = *ca
		}
		got := karpenter.EC2NodeClassHash64(nc, ca)
		want, err := hashstructure.Hash([]any{nc.Spec, nc.AMIFamily(), caStr}, hashstructure.FormatV2, hashOpts())
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}
