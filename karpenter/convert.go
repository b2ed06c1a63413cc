package karpenter

import (
	"encoding/json"
	"fmt"
	"strings"

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
//     WhenUnderutilized becomes WhenEmptyOrUnderutilized with
//     consolidateAfter 0s;
//   - spec.kubelet (NodePool template or NodeClaim) is removed and kept, as
//     JSON, in AnnotationKubeletCompatibility: v1 moved it to the
//     EC2NodeClass;
//   - an EC2NodeClass's amiFamily and amiSelectorTerms convert as v1.0
//     did: a family without terms becomes the alias "<family>@latest" (or
//     the version in AnnotationAliasVersionCompatibility), Ubuntu becomes
//     AL2 (AnnotationUbuntuCompatibility), anything unknown Custom.
//
// Status, labels and the other annotations (the hash annotations among
// them, with their v1beta1 hash versions) are kept as they are: that is
// what a migrated object looks like. Errors name the field.
//
// The webhooks converted typed objects and the API server stored their v1
// JSON encoding, which omits empty maps and lists (a template's
// `labels: {}`); ReadDump re-encodes converted objects through the v1
// types for that reason. ConvertV1beta1 alone works on the map and keeps
// them.
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
		_, moves := disruption["expireAfter"]
		if tspec == nil && spec != nil && (moves || tmpl != nil) {
			tspec = map[string]any{}
			if tmpl == nil {
				tmpl = map[string]any{}
				spec["template"] = tmpl
			}
			tmpl["spec"] = tspec
		}
		if ea, ok := disruption["expireAfter"]; ok && tspec != nil {
			tspec["expireAfter"] = ea
			delete(disruption, "expireAfter")
		}
		if disruption["consolidationPolicy"] == "WhenUnderutilized" {
			// v1.0's conversion: v1beta1 had no consolidateAfter for this
			// policy, v1 consolidates at once.
			disruption["consolidationPolicy"] = "WhenEmptyOrUnderutilized"
			disruption["consolidateAfter"] = "0s"
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
			convertNodeClassSpec(obj, spec)
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
			return fmt.Errorf("%w: %s.nodeClassRef: %s", ErrInvalidArgument, path, errtext.Clip(err.Error()))
		}
		setAnnotation(obj, AnnotationNodeClassReferenceCompatibility, string(old))
		if av, ok := ref["apiVersion"].(string); ok {
			g, _, _ := strings.Cut(av, "/")
			ref["group"] = g
		}
		delete(ref, "apiVersion")
		if g, _ := ref["group"].(string); g == "" { // as v1.0's conversion defaults them
			ref["group"] = GroupAWS
		}
		if k, _ := ref["kind"].(string); k == "" {
			ref["kind"] = "EC2NodeClass"
		}
	}
	if kubelet, ok := spec["kubelet"]; ok {
		b, err := json.Marshal(kubelet)
		if err != nil {
			return fmt.Errorf("%w: %s.kubelet: %s", ErrInvalidArgument, path, errtext.Clip(err.Error()))
		}
		setAnnotation(obj, AnnotationKubeletCompatibility, string(b))
		delete(spec, "kubelet")
	}
	return nil
}

// Annotations of Karpenter v1.0's EC2NodeClass conversion.
const (
	// AnnotationAliasVersionCompatibility, on a v1beta1 EC2NodeClass,
	// names the alias version its conversion uses (default "latest").
	AnnotationAliasVersionCompatibility = "compatibility.karpenter.k8s.aws/v1-alias-version"
	// AnnotationUbuntuCompatibility records how an Ubuntu EC2NodeClass was
	// converted: "amiFamily" (now AL2), "blockDeviceMappings" (Ubuntu's
	// root volume added), "incompatible" (no terms: a placeholder image).
	AnnotationUbuntuCompatibility = "compatibility.karpenter.k8s.aws/v1beta1-ubuntu"
)

// convertNodeClassSpec converts an EC2NodeClass spec's AMI selection as
// Karpenter v1.0's conversion did: a known family without terms becomes
// the alias "<family>@<version>" (the v1-alias-version annotation, else
// latest) without amiFamily; with terms both carry over; Ubuntu becomes
// AL2 (with Ubuntu's root volume when no blockDeviceMappings were set, and
// a placeholder image term when there were no terms, which selects
// nothing), recorded in AnnotationUbuntuCompatibility; anything else is
// Custom.
func convertNodeClassSpec(obj, spec map[string]any) {
	family, _ := spec["amiFamily"].(string)
	terms, _ := spec["amiSelectorTerms"].([]any)
	switch family {
	case "AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022":
		if len(terms) == 0 {
			version := "latest"
			if md, ok := obj["metadata"].(map[string]any); ok {
				if ann, ok := md["annotations"].(map[string]any); ok {
					if v, ok := ann[AnnotationAliasVersionCompatibility].(string); ok && v != "" {
						version = v
					}
				}
			}
			delete(spec, "amiFamily")
			spec["amiSelectorTerms"] = []any{map[string]any{"alias": strings.ToLower(family) + "@" + version}}
		}
	case "Ubuntu":
		compat := []string{"amiFamily"}
		spec["amiFamily"] = "AL2"
		if _, ok := spec["blockDeviceMappings"]; !ok {
			compat = append(compat, "blockDeviceMappings")
			spec["blockDeviceMappings"] = []any{map[string]any{
				"deviceName": "/dev/sda1", "rootVolume": true,
				"ebs": map[string]any{"encrypted": true, "volumeType": "gp3", "volumeSize": "20Gi"},
			}}
		}
		if len(terms) == 0 {
			compat = append(compat, "incompatible")
			spec["amiSelectorTerms"] = []any{map[string]any{"id": "ami-placeholder"}}
		}
		setAnnotation(obj, AnnotationUbuntuCompatibility, strings.Join(compat, ","))
	default:
		spec["amiFamily"] = "Custom"
	}
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
