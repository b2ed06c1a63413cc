package karpenter

import (
	"strconv"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// EC2NodeClassHashVersion is the value of the AWS provider's
// v1.EC2NodeClassHashVersion whose EC2NodeClass hash EC2NodeClassHash
// reproduces. The provider stores it in the
// karpenter.k8s.aws/ec2nodeclass-hash-version annotation; hashes are only
// comparable when the versions are equal. A test asserts that it equals the
// constant of the provider release this module builds against.
const EC2NodeClassHashVersion = "v5"

// The EC2NodeClass type and field names (see hash.go).
var (
	tEC2NodeClassSpec            = fnvString("EC2NodeClassSpec")
	tPlacementGroupSelector      = fnvString("PlacementGroupSelector")
	fPlacementGroupSelector      = newFieldName("PlacementGroupSelector")
	fID                          = newFieldName("ID")
	fAssociatePublicIPAddress    = newFieldName("AssociatePublicIPAddress")
	fUserData                    = newFieldName("UserData")
	fRole                        = newFieldName("Role")
	fInstanceProfile             = newFieldName("InstanceProfile")
	fTags                        = newFieldName("Tags")
	fKubelet                     = newFieldName("Kubelet")
	tKubeletConfiguration        = fnvString("KubeletConfiguration")
	fClusterDNS                  = newFieldName("ClusterDNS")
	fMaxPods                     = newFieldName("MaxPods")
	fPodsPerCore                 = newFieldName("PodsPerCore")
	fSystemReserved              = newFieldName("SystemReserved")
	fKubeReserved                = newFieldName("KubeReserved")
	fEvictionHard                = newFieldName("EvictionHard")
	fEvictionSoft                = newFieldName("EvictionSoft")
	fEvictionSoftGracePeriod     = newFieldName("EvictionSoftGracePeriod")
	fEvictionMaxPodGracePeriod   = newFieldName("EvictionMaxPodGracePeriod")
	fImageGCHighThresholdPercent = newFieldName("ImageGCHighThresholdPercent")
	fImageGCLowThresholdPercent  = newFieldName("ImageGCLowThresholdPercent")
	fCPUCFSQuota                 = newFieldName("CPUCFSQuota")
	fBlockDeviceMappings         = newFieldName("BlockDeviceMappings")
	tBlockDeviceMapping          = fnvString("BlockDeviceMapping")
	fDeviceName                  = newFieldName("DeviceName")
	fEBS                         = newFieldName("EBS")
	fRootVolume                  = newFieldName("RootVolume")
	tBlockDevice                 = fnvString("BlockDevice")
	fDeleteOnTermination         = newFieldName("DeleteOnTermination")
	fEncrypted                   = newFieldName("Encrypted")
	fIOPS                        = newFieldName("IOPS")
	fKMSKeyID                    = newFieldName("KMSKeyID")
	fSnapshotID                  = newFieldName("SnapshotID")
	fThroughput                  = newFieldName("Throughput")
	fVolumeInitializationRate    = newFieldName("VolumeInitializationRate")
	fVolumeSize                  = newFieldName("VolumeSize")
	fVolumeType                  = newFieldName("VolumeType")
	fInstanceStorePolicy         = newFieldName("InstanceStorePolicy")
	fNetworkInterfaces           = newFieldName("NetworkInterfaces")
	tNetworkInterface            = fnvString("NetworkInterface")
	fNetworkCardIndex            = newFieldName("NetworkCardIndex")
	fDeviceIndex                 = newFieldName("DeviceIndex")
	fInterfaceType               = newFieldName("InterfaceType")
	fDetailedMonitoring          = newFieldName("DetailedMonitoring")
	tMetadataOptions             = fnvString("MetadataOptions")
	fMetadataOptions             = newFieldName("MetadataOptions")
	fHTTPEndpoint                = newFieldName("HTTPEndpoint")
	fHTTPProtocolIPv6            = newFieldName("HTTPProtocolIPv6")
	fHTTPPutResponseHopLimit     = newFieldName("HTTPPutResponseHopLimit")
	fHTTPTokens                  = newFieldName("HTTPTokens")
	tConnectionTracking          = fnvString("ConnectionTracking")
	fConnectionTracking          = newFieldName("ConnectionTracking")
	fTCPEstablishedTimeout       = newFieldName("TCPEstablishedTimeout")
	fUDPStreamTimeout            = newFieldName("UDPStreamTimeout")
	fUDPTimeout                  = newFieldName("UDPTimeout")
	fContext                     = newFieldName("Context")
	tCPUOptions                  = fnvString("CPUOptions")
	fCPUOptions                  = newFieldName("CPUOptions")
	fNestedVirtualization        = newFieldName("NestedVirtualization")
)

// Optional scalars fold into a struct's hash only when the pointer is set
// (a nil pointer is the field's zero value); a pointer to a zero value is
// hashed.

func foldString(h uint64, name fieldName, p *string) uint64 {
	if p == nil {
		return h
	}
	return field(h, name, fnvString(*p))
}

func foldInt32(h uint64, name fieldName, p *int32) uint64 {
	if p == nil {
		return h
	}
	return field(h, name, hashInt32(*p))
}

func foldInt64(h uint64, name fieldName, p *int64) uint64 {
	if p == nil {
		return h
	}
	return field(h, name, hashUint64(uint64(*p)))
}

func foldBool(h uint64, name fieldName, p *bool) uint64 {
	if p == nil {
		return h
	}
	return field(h, name, hashBool(*p))
}

func foldStringMap(h uint64, name fieldName, m map[string]string) uint64 {
	if m == nil {
		return h
	}
	return field(h, name, hashStringMap(m))
}

// EC2NodeClassHash returns the hash the AWS provider stores in an
// EC2NodeClass's karpenter.k8s.aws/ec2nodeclass-hash annotation:
// nc.Hash(caBundle), the decimal form of EC2NodeClassHash64. A nil nc
// hashes as the zero EC2NodeClass; a nil caBundle as the empty string.
func EC2NodeClassHash(nc *awsv1.EC2NodeClass, caBundle *string) string {
	return strconv.FormatUint(EC2NodeClassHash64(nc, caBundle), 10)
}

// EC2NodeClassHash64 returns the 64-bit hash the AWS provider computes for
// an EC2NodeClass: the set {spec, resolved AMI family, CA bundle} hashed the
// way (*v1.EC2NodeClass).Hash hashes it, without reflection. It allocates
// nothing unless a block device's volumeSize quantity has to be formatted
// (one built in code rather than parsed); it never changes nc, not even the
// string cache of a quantity, which the provider's own Hash fills in.
//
// The AMI family is nc.AMIFamily(): spec.amiFamily, else the family of the
// first amiSelectorTerms alias, else "Custom". Where the provider would end
// the process (log.Fatalf) on a malformed alias, the part of the alias
// before its first "@" is hashed as the family instead.
func EC2NodeClassHash64(nc *awsv1.EC2NodeClass, caBundle *string) uint64 {
	var spec *awsv1.EC2NodeClassSpec
	if nc != nil {
		spec = &nc.Spec
	}
	ca := ""
	if caBundle != nil {
		ca = *caBundle
	}
	// The three elements of a []any, hashed as a set.
	return hashEC2NodeClassSpec(spec) ^ fnvString(amiFamily(spec)) ^ fnvString(ca)
}

// amiFamily is (*v1.EC2NodeClass).AMIFamily without its log.Fatalf.
func amiFamily(s *awsv1.EC2NodeClassSpec) string {
	if s == nil {
		return awsv1.AMIFamilyCustom
	}
	if s.AMIFamily != nil {
		return *s.AMIFamily
	}
	for i := range s.AMISelectorTerms {
		alias := s.AMISelectorTerms[i].Alias
		if alias == "" {
			continue
		}
		family, version, _ := strings.Cut(alias, "@")
		if strings.Contains(alias, "@") && !strings.Contains(version, "@") {
			switch family {
			case "al2":
				return awsv1.AMIFamilyAL2
			case "al2023":
				return awsv1.AMIFamilyAL2023
			case "bottlerocket":
				return awsv1.AMIFamilyBottlerocket
			case "windows2019":
				return awsv1.AMIFamilyWindows2019
			case "windows2022":
				return awsv1.AMIFamilyWindows2022
			case "windows2025":
				return awsv1.AMIFamilyWindows2025
			}
		}
		return family
	}
	return awsv1.AMIFamilyCustom
}

// hashEC2NodeClassSpec is the hash of an EC2NodeClassSpec; nil is the zero
// spec. Fields are folded in declaration order; the selector terms,
// ipPrefixCount and amiFamily are hash:"ignore".
func hashEC2NodeClassSpec(s *awsv1.EC2NodeClassSpec) uint64 {
	h := tEC2NodeClassSpec
	if s == nil {
		return h
	}
	if p := s.PlacementGroupSelector; p != nil {
		g := foldString(tPlacementGroupSelector, fName, p.Name)
		g = foldString(g, fID, p.ID)
		h = field(h, fPlacementGroupSelector, g)
	}
	h = foldBool(h, fAssociatePublicIPAddress, s.AssociatePublicIPAddress)
	h = foldString(h, fUserData, s.UserData)
	if s.Role != "" {
		h = field(h, fRole, fnvString(s.Role))
	}
	h = foldString(h, fInstanceProfile, s.InstanceProfile)
	h = foldStringMap(h, fTags, s.Tags)
	if s.Kubelet != nil {
		h = field(h, fKubelet, hashKubelet(s.Kubelet))
	}
	if s.BlockDeviceMappings != nil {
		var x uint64
		for _, m := range s.BlockDeviceMappings {
			x ^= hashBlockDeviceMapping(m)
		}
		h = field(h, fBlockDeviceMappings, x)
	}
	if s.InstanceStorePolicy != nil {
		h = field(h, fInstanceStorePolicy, fnvString(string(*s.InstanceStorePolicy)))
	}
	if s.NetworkInterfaces != nil {
		var x uint64
		for _, n := range s.NetworkInterfaces {
			x ^= hashNetworkInterface(n)
		}
		h = field(h, fNetworkInterfaces, x)
	}
	h = foldBool(h, fDetailedMonitoring, s.DetailedMonitoring)
	if m := s.MetadataOptions; m != nil {
		o := foldString(tMetadataOptions, fHTTPEndpoint, m.HTTPEndpoint)
		o = foldString(o, fHTTPProtocolIPv6, m.HTTPProtocolIPv6)
		o = foldInt64(o, fHTTPPutResponseHopLimit, m.HTTPPutResponseHopLimit)
		o = foldString(o, fHTTPTokens, m.HTTPTokens)
		h = field(h, fMetadataOptions, o)
	}
	if c := s.ConnectionTracking; c != nil {
		t := foldInt32(tConnectionTracking, fTCPEstablishedTimeout, c.TCPEstablishedTimeout)
		t = foldInt32(t, fUDPStreamTimeout, c.UDPStreamTimeout)
		t = foldInt32(t, fUDPTimeout, c.UDPTimeout)
		h = field(h, fConnectionTracking, t)
	}
	h = foldString(h, fContext, s.Context)
	if c := s.CPUOptions; c != nil {
		h = field(h, fCPUOptions, foldString(tCPUOptions, fNestedVirtualization, c.NestedVirtualization))
	}
	return h
}

// hashKubelet is the hash of a non-nil KubeletConfiguration.
func hashKubelet(k *awsv1.KubeletConfiguration) uint64 {
	h := tKubeletConfiguration
	if k.ClusterDNS != nil {
		var x uint64
		for _, s := range k.ClusterDNS {
			x ^= fnvString(s)
		}
		h = field(h, fClusterDNS, x)
	}
	h = foldInt32(h, fMaxPods, k.MaxPods)
	h = foldInt32(h, fPodsPerCore, k.PodsPerCore)
	h = foldStringMap(h, fSystemReserved, k.SystemReserved)
	h = foldStringMap(h, fKubeReserved, k.KubeReserved)
	h = foldStringMap(h, fEvictionHard, k.EvictionHard)
	h = foldStringMap(h, fEvictionSoft, k.EvictionSoft)
	if k.EvictionSoftGracePeriod != nil {
		var x uint64
		for key, d := range k.EvictionSoftGracePeriod {
			x ^= ordered(fnvString(key), hashMetaDuration(&d))
		}
		h = field(h, fEvictionSoftGracePeriod, hashUint64(x))
	}
	h = foldInt32(h, fEvictionMaxPodGracePeriod, k.EvictionMaxPodGracePeriod)
	h = foldInt32(h, fImageGCHighThresholdPercent, k.ImageGCHighThresholdPercent)
	h = foldInt32(h, fImageGCLowThresholdPercent, k.ImageGCLowThresholdPercent)
	h = foldBool(h, fCPUCFSQuota, k.CPUCFSQuota)
	return h
}

// hashBlockDeviceMapping is the hash of one mapping; a nil element of the
// list hashes as the zero mapping (ZeroNil).
func hashBlockDeviceMapping(m *awsv1.BlockDeviceMapping) uint64 {
	h := tBlockDeviceMapping
	if m == nil {
		return h
	}
	h = foldString(h, fDeviceName, m.DeviceName)
	if b := m.EBS; b != nil {
		e := foldBool(tBlockDevice, fDeleteOnTermination, b.DeleteOnTermination)
		e = foldBool(e, fEncrypted, b.Encrypted)
		e = foldInt64(e, fIOPS, b.IOPS)
		e = foldString(e, fKMSKeyID, b.KMSKeyID)
		e = foldString(e, fSnapshotID, b.SnapshotID)
		e = foldInt64(e, fThroughput, b.Throughput)
		e = foldInt32(e, fVolumeInitializationRate, b.VolumeInitializationRate)
		if b.VolumeSize != nil {
			// hash:"string": hashed as the quantity's String().
			e = field(e, fVolumeSize, fnvString(quantityString(b.VolumeSize)))
		}
		e = foldString(e, fVolumeType, b.VolumeType)
		h = field(h, fEBS, e)
	}
	if m.RootVolume {
		h = field(h, fRootVolume, hashBool(true))
	}
	return h
}

// quantityString is q.String() computed on a copy, so that q's string
// cache is neither written (a data race under concurrent hashing) nor
// needed: the copy carries the cached string when there is one.
func quantityString(q *resource.Quantity) string {
	c := *q
	return c.String()
}

// hashNetworkInterface is the hash of one interface; nil hashes as the zero
// interface (ZeroNil).
func hashNetworkInterface(n *awsv1.NetworkInterface) uint64 {
	h := tNetworkInterface
	if n == nil {
		return h
	}
	if n.NetworkCardIndex != 0 {
		h = field(h, fNetworkCardIndex, hashInt32(n.NetworkCardIndex))
	}
	if n.DeviceIndex != 0 {
		h = field(h, fDeviceIndex, hashInt32(n.DeviceIndex))
	}
	if n.InterfaceType != "" {
		h = field(h, fInterfaceType, fnvString(string(n.InterfaceType)))
	}
	return h
}
