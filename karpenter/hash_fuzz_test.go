package karpenter_test

import (
	"encoding/json"
	"strings"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/mitchellh/hashstructure/v2"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/karpenter"
)

// FuzzTemplateHash decodes the input as a NodePool template (JSON, as the
// API server serves it); when it decodes, TemplateHash must equal
// hashstructure's hash under Karpenter's options, and ChangedTemplateFields
// against the zero template must be empty exactly when the hash is the
// zero template's. Nothing may panic.
func FuzzTemplateHash(f *testing.F) {
	realistic, err := json.Marshal(hashRealisticTemplate())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(realistic),
		`{}`,
		`{"metadata":{"labels":{}}}`,
		`{"metadata":{"labels":{"team":"a"},"annotations":{"ü":"🚀"}}}`,
		`{"spec":{"requirements":[]}}`,
		`{"spec":{"expireAfter":"Never"}}`,
		`{"spec":{"expireAfter":"0s","terminationGracePeriod":"0s"}}`,
		`{"spec":{"nodeClassRef":{}}}`,
		`{"spec":{"taints":[{"key":"a","effect":"NoSchedule"},{"key":"a","effect":"NoSchedule"}],"startupTaints":[]}}`,
		`{"spec":{"taints":[{"key":"a","timeAdded":"2024-01-02T03:04:05Z"},{"timeAdded":"0001-01-01T00:00:00Z"}]}}`,
		`{"spec":{"taints":[{"key":"a","timeAdded":"2024-01-02T03:04:05-00:01"}]}}`,
	} {
		f.Add([]byte(seed))
	}
	zero := karpenter.TemplateHash(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		var tmpl karpv1.NodeClaimTemplate
		if json.Unmarshal(data, &tmpl) != nil {
			return
		}
		got := karpenter.TemplateHash(&tmpl)
		changes := karpenter.ChangedTemplateFields(nil, &tmpl)
		if (len(changes) == 0) != (got == zero) {
			t.Fatalf("hash %d (zero template %d) but changes %v", got, zero, changes)
		}
		want, err := hashstructure.Hash(tmpl, hashstructure.FormatV2, hashOpts())
		if err != nil {
			return // a time MarshalBinary cannot encode: Karpenter panics
		}
		if got != want {
			t.Fatalf("TemplateHash %d, hashstructure %d, template %#v", got, want, tmpl)
		}
	})
}

// FuzzEC2NodeClassHash decodes the input as an EC2NodeClass; when it
// decodes, EC2NodeClassHash must equal the provider's Hash (skipped for
// malformed aliases, on which the provider exits the process).
func FuzzEC2NodeClassHash(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"spec":{"role":"r","amiSelectorTerms":[{"alias":"al2023@latest"}],"tags":{}}}`,
		`{"spec":{"amiFamily":"AL2","kubelet":{"clusterDNS":["a","a"],"evictionSoftGracePeriod":{"m":"0s"}}}}`,
		`{"spec":{"blockDeviceMappings":[null,{"ebs":{"volumeSize":"+20Gi"}},{"ebs":{"volumeSize":"20480Mi"}}]}}`,
		`{"spec":{"networkInterfaces":[null,{"networkCardIndex":1}],"metadataOptions":{},"cpuOptions":{}}}`,
	} {
		f.Add([]byte(seed), "ca")
	}
	f.Fuzz(func(t *testing.T, data []byte, ca string) {
		var nc awsv1.EC2NodeClass
		if json.Unmarshal(data, &nc) != nil {
			return
		}
		got := karpenter.EC2NodeClassHash(&nc, &ca)
		if nc.Spec.AMIFamily == nil && !hashAliasWellFormed(nc.Spec.AMISelectorTerms) {
			return
		}
		if want := nc.Hash(&ca); got != want {
			t.Fatalf("EC2NodeClassHash %s, nc.Hash %s, spec %#v", got, want, nc.Spec)
		}
	})
}

// hashAliasWellFormed reports whether the provider's AMIFamily can parse
// the first alias of terms without exiting (or there is none).
func hashAliasWellFormed(terms []awsv1.AMISelectorTerm) bool {
	for _, term := range terms {
		if term.Alias == "" {
			continue
		}
		parts := strings.Split(term.Alias, "@")
		if len(parts) != 2 {
			return false
		}
		for _, family := range []string{awsv1.AMIFamilyAL2, awsv1.AMIFamilyAL2023, awsv1.AMIFamilyBottlerocket,
			awsv1.AMIFamilyWindows2019, awsv1.AMIFamilyWindows2022, awsv1.AMIFamilyWindows2025} {
			if strings.ToLower(family) == parts[0] {
				return true
			}
		}
		return false
	}
	return true
}
