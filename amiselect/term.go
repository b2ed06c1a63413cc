package amiselect

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Term is one Karpenter amiSelectorTerm. Terms are ORed; the fields set in one
// term are ANDed. The JSON spelling is Karpenter's, so terms can be read
// straight out of an EC2NodeClass.
type Term struct {
	// Alias selects an EKS-optimized AMI, "family@version" (al2023@latest,
	// bottlerocket@v1.20.3). It must be the only field and the only term.
	Alias string `json:"alias,omitempty"`
	// ID selects one image by id (ami-...). It must be the only field of its
	// term.
	ID string `json:"id,omitempty"`
	// Name matches the image name, with "*" and "?" wildcards. When set and
	// Owner is empty, owners default to "self" and "amazon".
	Name string `json:"name,omitempty"`
	// Owner restricts the owner: an account id, "self", "amazon" or
	// "aws-marketplace".
	Owner string `json:"owner,omitempty"`
	// Tags must all be present on the image; the value "*" only requires the
	// key to exist.
	Tags map[string]string `json:"tags,omitempty"`
	// SSMParameter names an SSM parameter (name or ARN) whose value is the
	// image id.
	SSMParameter string `json:"ssmParameter,omitempty"`
}

// String names the term by the fields it sets, values quoted:
// `name "amazon-eks-node-*", owner "amazon"`, `tags "team=a,tier=b"`.
func (t Term) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+" "+errtext.Quote(v))
		}
	}
	add("alias", t.Alias)
	add("id", t.ID)
	add("name", t.Name)
	add("owner", t.Owner)
	add("ssmParameter", t.SSMParameter)
	if len(t.Tags) > 0 {
		keys := make([]string, 0, len(t.Tags))
		for k := range t.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tags := make([]string, len(keys))
		for i, k := range keys {
			tags[i] = k + "=" + t.Tags[k]
		}
		add("tags", strings.Join(tags, ","))
	}
	return strings.Join(parts, ", ")
}

// Family is a Karpenter AMI family (the amiFamily field).
type Family string

// The AMI families Karpenter v1 knows.
const (
	FamilyAL2          Family = "AL2"
	FamilyAL2023       Family = "AL2023"
	FamilyBottlerocket Family = "Bottlerocket"
	FamilyWindows2019  Family = "Windows2019"
	FamilyWindows2022  Family = "Windows2022"
	FamilyWindows2025  Family = "Windows2025"
	FamilyCustom       Family = "Custom"
)

var families = []Family{FamilyAL2, FamilyAL2023, FamilyBottlerocket, FamilyWindows2019, FamilyWindows2022, FamilyWindows2025, FamilyCustom}

// Karpenter's limits on amiSelectorTerms.
const (
	MaxTerms       = 30
	MaxTags        = 20
	MaxAliasLength = 30
)

// validID reports whether id is an AMI id, ^ami-[0-9a-z]+$ (checked
// without the regexp engine: it runs for every id term of every
// resolution and every image of a catalog).
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, "ami-")
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// ParseFamily checks that s is a Karpenter v1 amiFamily value (case
// sensitive, as the CRD enum is).
func ParseFamily(s string) (Family, error) {
	for _, f := range families {
		if string(f) == s {
			return f, nil
		}
	}
	reason := "must be one of AL2, AL2023, Bottlerocket, Custom, Windows2019, Windows2022, Windows2025"
	for _, f := range families {
		if strings.EqualFold(string(f), s) {
			reason = fmt.Sprintf("families are case sensitive: did you mean %q?", f)
		}
	}
	if strings.EqualFold(s, "Ubuntu") {
		reason = "Ubuntu was removed in Karpenter v1: select Ubuntu images with name/owner terms and use amiFamily AL2 or Custom"
	}
	return "", fieldError(ErrInvalidFamily, "amiFamily", s, reason)
}

// Validate checks terms against Karpenter v1's rules and returns every
// violation (joined with errors.Join; each is an *Error naming the term index
// and field). With WithFamily it also checks that the amiFamily agrees with an
// alias (or is Custom). Other options are ignored.
//
// Two combinations Karpenter accepts but then silently drops a field of are
// refused here: ssmParameter together with id, name, owner, tags or alias
// (Karpenter would use only one of them).
func Validate(terms []Term, opts ...Option) error {
	o := newOptions(opts)
	var errs []error
	if len(terms) == 0 {
		errs = append(errs, fieldError(ErrInvalidTerm, "amiSelectorTerms", "", "at least one term is required"))
	}
	if len(terms) > MaxTerms {
		errs = append(errs, fieldError(ErrInvalidTerm, "amiSelectorTerms", "", fmt.Sprintf("%d terms, at most %d are allowed", len(terms), MaxTerms)))
	}
	aliasAt := -1
	for i, t := range terms {
		errs = append(errs, validateTerm(i, t)...)
		if t.Alias != "" && aliasAt < 0 {
			aliasAt = i
		}
	}
	if aliasAt >= 0 && len(terms) != 1 {
		errs = append(errs, termError(ErrInvalidTerm, aliasAt, "alias", terms[aliasAt].Alias,
			"'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"))
	}
	if o.family != "" {
		f, err := ParseFamily(string(o.family))
		if err != nil {
			errs = append(errs, err)
		} else if aliasAt >= 0 && f != FamilyCustom {
			if a, err := ParseAlias(terms[aliasAt].Alias); err == nil && a.Family != f {
				errs = append(errs, fieldError(ErrInvalidFamily, "amiFamily", string(f),
					fmt.Sprintf("if set, amiFamily must be %q or \"Custom\" when using alias %q", a.Family, terms[aliasAt].Alias)))
			}
		}
	}
	return errors.Join(errtext.Cut(errs)...)
}

func validateTerm(i int, t Term) []error {
	var errs []error
	if t.Tags == nil && t.ID == "" && t.Name == "" && t.Alias == "" && t.SSMParameter == "" {
		errs = append(errs, &Error{Kind: ErrInvalidTerm, Path: fmt.Sprintf("amiSelectorTerms[%d]", i), Index: i,
			Reason: "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"})
	}
	if t.ID != "" {
		if others := setFields(t, "id"); len(others) > 0 {
			errs = append(errs, termError(ErrInvalidTerm, i, "id", t.ID,
				"'id' is mutually exclusive, cannot be set with "+strings.Join(others, ", ")))
		}
		if !validID(t.ID) {
			errs = append(errs, termError(ErrInvalidTerm, i, "id", t.ID, "must match ^ami-[0-9a-z]+$"))
		}
	}
	if t.Alias != "" {
		if others := setFields(t, "alias"); len(others) > 0 {
			errs = append(errs, termError(ErrInvalidTerm, i, "alias", t.Alias,
				"'alias' is mutually exclusive, cannot be set with "+strings.Join(others, ", ")))
		}
		if _, err := ParseAlias(t.Alias); err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Path, e.Index, e.Field = fmt.Sprintf("amiSelectorTerms[%d].alias", i), i, "alias"
			}
			errs = append(errs, err)
		}
	}
	if t.SSMParameter != "" && t.ID == "" && t.Alias == "" {
		if others := setFields(t, "ssmParameter"); len(others) > 0 {
			errs = append(errs, termError(ErrInvalidTerm, i, "ssmParameter", t.SSMParameter,
				"'ssmParameter' cannot be combined with "+strings.Join(others, ", ")+" (Karpenter would ignore them)"))
		}
	}
	if t.Tags != nil {
		if len(t.Tags) == 0 {
			errs = append(errs, termError(ErrInvalidTerm, i, "tags", "", "tags is set but empty"))
		}
		if len(t.Tags) > MaxTags {
			errs = append(errs, termError(ErrInvalidTerm, i, "tags", "", fmt.Sprintf("%d tags, at most %d are allowed", len(t.Tags), MaxTags)))
		}
		keys := make([]string, 0, len(t.Tags))
		for k := range t.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "" || t.Tags[k] == "" {
				errs = append(errs, termError(ErrInvalidTerm, i, "tags", k, "empty tag keys or values aren't supported"))
			}
		}
	}
	return errs
}

// setFields lists the fields of t that are set, except the one named.
func setFields(t Term, except string) []string {
	var out []string
	add := func(name string, set bool) {
		if set && name != except {
			out = append(out, name)
		}
	}
	add("alias", t.Alias != "")
	add("id", t.ID != "")
	add("name", t.Name != "")
	add("owner", t.Owner != "")
	add("tags", t.Tags != nil)
	add("ssmParameter", t.SSMParameter != "")
	return out
}
