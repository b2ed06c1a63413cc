package karpenter

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Annotations Karpenter's v1 conversion wrote to keep what v1 has no field
// for, and ConvertV1beta1 writes too.
const (
	// AnnotationKubeletCompatibility holds a v1beta1 NodePool's or
	// NodeClaim's spec.kubelet (JSON): v1 moved kubelet settings to the
	// EC2NodeClass.
	AnnotationKubeletCompatibility = "compatibility.karpenter.sh/v1beta1-kubelet-conversion"
	// AnnotationNodeClassReferenceCompatibility holds a v1beta1
	// nodeClassRef (JSON) as it was before conversion.
	AnnotationNodeClassReferenceCompatibility = "compatibility.karpenter.sh/v1beta1-nodeclass-reference"
)

// ConvertV1beta1 converts, in place, a NodePool, NodeClaim or EC2NodeClass
// decoded from its v1beta1 JSON/YAML form to the v1 form, as Karpenter's
// v1 conversion webhooks did, for the fields drift depends on:
//
//   - apiVersion becomes <group>/v1;
//   - nodeClassRef {apiVersion, kind, name} becomes {group, kind, name}
//     (the old reference kept in AnnotationNodeClassReferenceCompatibility);
//   - a NodePool's spec.disruption.expireAfter moves to
//     spec.template.spec.expireAfter, and consolidationPolicy
//     WhenUnderutilized becomes WhenEmptyOrUnderutilized;
//   - spec.kubelet (NodePool template or NodeClaim) is removed and kept, as
//     JSON, in AnnotationKubeletCompatibility: v1 moved it to the
//     EC2NodeClass;
//   - an EC2NodeClass's amiFamily and amiSelectorTerms convert with
//     amiselect.ConvertV1Beta1 (a family without terms becomes the alias
//     "<family>@latest").
//
// Status, labels and the other annotations (the hash annotations among
// them, with their v1beta1 hash versions) are kept as they are: that is
// what a migrated object looks like. Errors name the field.
func ConvertV1beta1(obj map[string]any) error {
	if obj == nil {
		return fmt.Errorf("%w: nil object", ErrInvalidArgument)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	if version != "v1beta1" {
		return fmt.Errorf("%w: apiVersion %s is not v1beta1", ErrInvalidArgument, errtext.Quote(apiVersion))
	}
	kind, _ := obj["kind"].(string)
	spec, _ := obj["spec"].(map[string]any)
	switch {
	case group == GroupKarpenter && kind == "NodePool":
		disruption, _ := spec["disruption"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		tspec, _ := tmpl["spec"].(map[string]any)
		if tspec == nil && (disruption["expireAfter"] != nil || tmpl != nil) {
			tspec = map[string]any{}
			if tmpl == nil {
				tmpl = map[string]any{}
				spec["template"] = tmpl
			}
			tmpl["spec"] = tspec
		}
		if ea, ok := disruption["expireAfter"]; ok {
			tspec["expireAfter"] = ea
			delete(disruption, "expireAfter")
		}
		if disruption["consolidationPolicy"] == "WhenUnderutilized" {
			disruption["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
		}
		if err := convertClaimSpec(obj, tspec, "spec.template.spec"); err != nil {
			return err
		}
	case group == GroupKarpenter && kind == "NodeClaim":
		if err := convertClaimSpec(obj, spec, "spec"); err != nil {
			return err
		}
	case group == GroupAWS && kind == "EC2NodeClass":
		if spec != nil {
			if err := convertNodeClassSpec(spec); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: %s %s has no v1 conversion here", ErrInvalidArgument, errtext.Quote(apiVersion), errtext.Quote(kind))
	}
	obj["apiVersion"] = group + "/v1"
	return nil
}

// convertClaimSpec converts a NodeClaim spec (or a NodePool's template
// spec) at path: nodeClassRef and kubelet.
func convertClaimSpec(obj, spec map[string]any, path string) error {
	if spec == nil {
		return nil
	}
	if ref, ok := spec["nodeClassRef"].(map[string]any); ok {
		old, err := json.Marshal(ref)
		if err != nil {
			return fmt.Errorf("%s.nodeClassRef: %s", path, errtext.Clip(err.Error()))
		}
		setAnnotation(obj, AnnotationNodeClassReferenceCompatibility, string(old))
		if av, ok := ref["apiVersion"].(string); ok {
			g, _, _ := strings.Cut(av, "/")
			ref["group"] = g
			delete(ref, "apiVersion")
		}
		if _, ok := ref["group"]; !ok {
			ref["group"] = GroupAWS
		}
		if _, ok := ref["kind"]; !ok {
			ref["kind"] = "EC2NodeClass"
		}
	}
	if kubelet, ok := spec["kubelet"]; ok {
		b, err := json.Marshal(kubelet)
		if err != nil {
			return fmt.Errorf("%s.kubelet: %s", path, errtext.Clip(err.Error()))
		}
		setAnnotation(obj, AnnotationKubeletCompatibility, string(b))
		delete(spec, "kubelet")
	}
	return nil
}

// convertNodeClassSpec converts an EC2NodeClass spec's AMI selection.
func convertNodeClassSpec(spec map[string]any) error {
	family, _ := spec["amiFamily"].(string)
	var terms []amiselect.Term
	if raw, ok := spec["amiSelectorTerms"]; ok && raw != nil {
		b, err := json.Marshal(raw)
		if err != nil {
			return fmt.Errorf("spec.amiSelectorTerms: %s", errtext.Clip(err.Error()))
		}
		if err := json.Unmarshal(b, &terms); err != nil {
			return fmt.Errorf("spec.amiSelectorTerms: %s", errtext.Clip(err.Error()))
		}
	}
	v1, err := amiselect.ConvertV1Beta1(family, terms)
	if err != nil {
		return fmt.Errorf("spec.amiFamily/amiSelectorTerms: %w", err)
	}
	b, err := json.Marshal(v1.Terms)
	if err != nil {
		return fmt.Errorf("spec.amiSelectorTerms: %s", errtext.Clip(err.Error()))
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("spec.amiSelectorTerms: %s", errtext.Clip(err.Error()))
	}
	spec["amiSelectorTerms"] = out
	if v1.Family == "" {
		delete(spec, "amiFamily")
	} else {
		spec["amiFamily"] = string(v1.Family)
	}
	return nil
}

func setAnnotation(obj map[string]any, key, value string) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		obj["metadata"] = md
	}
	ann, ok := md["annotations"].(map[string]any)
	if !ok {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[key] = value
}
