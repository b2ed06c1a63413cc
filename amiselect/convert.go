package amiselect

import (
	"errors"
	"fmt"
	"strings"
)

// V1 is the v1 AMI selection a v1beta1 node class converts to.
type V1 struct {
	// Family is the v1 amiFamily; empty when the alias implies it.
	Family Family `json:"amiFamily,omitempty"`
	// Terms are the v1 amiSelectorTerms.
	Terms []Term `json:"amiSelectorTerms"`
	// Notes say what the conversion changed that the user should know.
	Notes []string `json:"notes,omitempty"`
}

// ConvertV1Beta1 converts a v1beta1 node class's AMI selection (amiFamily
// and optional amiSelectorTerms with id, name, owner, tags) to v1, as
// Karpenter's conversion does: a known family without terms becomes the
// single alias "{family}@latest" with no amiFamily; with terms, the terms and
// the family carry over. Ubuntu with terms carries over as AL2 (same user
// data format) with a note. What has no v1 equivalent (Ubuntu or Custom
// without terms, no family at all, an unknown family) is an *Error matching
// ErrNotConvertible whose Reason says what to write instead. The result is
// checked with Validate.
func ConvertV1Beta1(amiFamily string, terms []Term) (V1, error) {
	for i, t := range terms {
		if t.Alias != "" || t.SSMParameter != "" {
			field, value := "alias", t.Alias
			if t.Alias == "" {
				field, value = "ssmParameter", t.SSMParameter
			}
			return V1{}, termError(ErrNotConvertible, i, field, value, "v1beta1 terms have no "+field+": this is already a v1 term")
		}
	}
	var out V1
	switch {
	case strings.EqualFold(amiFamily, "Ubuntu"):
		if len(terms) == 0 {
			return V1{}, fieldError(ErrNotConvertible, "amiFamily", amiFamily,
				"Karpenter v1 has no Ubuntu family or alias: select the Ubuntu EKS images explicitly, e.g. "+
					`amiSelectorTerms: [{name: "ubuntu-eks/k8s_1.31/images/*", owner: "099720109477"}] with amiFamily: AL2 `+
					"(same user data format; set blockDeviceMappings to /dev/sda1), or pin the image ids your nodes run today with id terms")
		}
		out = V1{Family: FamilyAL2, Terms: terms, Notes: []string{
			"Ubuntu is not a v1 family: converted to amiFamily AL2, which uses the same user data; Ubuntu's root device is /dev/sda1, set blockDeviceMappings accordingly"}}
	case amiFamily == "":
		return V1{}, fieldError(ErrNotConvertible, "amiFamily", "", "v1beta1 node classes need an amiFamily; without one there is nothing to convert")
	default:
		f, err := ParseFamily(amiFamily)
		if err != nil {
			var e *Error
			reason := "unknown family"
			if errors.As(err, &e) {
				reason = e.Reason
			}
			return V1{}, fieldError(ErrNotConvertible, "amiFamily", amiFamily, reason)
		}
		switch {
		case len(terms) > 0:
			out = V1{Family: f, Terms: terms}
		case f == FamilyCustom:
			return V1{}, fieldError(ErrNotConvertible, "amiFamily", amiFamily,
				"a Custom family needs amiSelectorTerms (id, name, tags or ssmParameter) naming the images to use")
		default:
			alias := strings.ToLower(string(f)) + "@" + VersionLatest
			note := fmt.Sprintf("amiFamily %s without terms became alias %s: nodes drift to each new EKS-optimized release", f, alias)
			if !f.windows() {
				note += "; pin a release (" + strings.ToLower(string(f)) + "@<version>) or use id/name terms to control promotion"
			}
			out = V1{Terms: []Term{{Alias: alias}}, Notes: []string{note}}
		}
	}
	if err := Validate(out.Terms, WithFamily(out.Family)); err != nil {
		return V1{}, err
	}
	return out, nil
}
