package amiselect

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func manyTags(n int) map[string]string {
	m := map[string]string{}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func manyTerms(n int) []Term {
	out := make([]Term, n)
	for i := range out {
		out[i] = Term{Name: fmt.Sprintf("img-%d-*", i)}
	}
	return out
}

// One case per Karpenter validation rule (CEL rules on amiSelectorTerms and
// amiFamily in pkg/apis/v1/ec2nodeclass.go).
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		terms  []Term
		family Family
		// wantIndex/wantField name the first error expected; empty
		// wantField means valid.
		wantKind  error
		wantIndex int
		wantField string
		wantText  string
	}{
		{name: "alias alone", terms: []Term{{Alias: "al2023@latest"}}},
		{name: "id alone", terms: []Term{{ID: "ami-0123abcd"}}},
		{name: "name and owner", terms: []Term{{Name: "my-ami-*", Owner: "123456789012"}}},
		{name: "tags with wildcard value", terms: []Term{{Tags: map[string]string{"team": "*"}}}},
		{name: "ssm parameter alone", terms: []Term{{SSMParameter: "/my/ami"}}},
		{name: "thirty terms", terms: manyTerms(30)},
		{name: "twenty tags", terms: []Term{{Tags: manyTags(20)}}},
		{name: "family agrees with alias", terms: []Term{{Alias: "bottlerocket@latest"}}, family: FamilyBottlerocket},
		{name: "custom family with alias", terms: []Term{{Alias: "al2023@latest"}}, family: FamilyCustom},
		{name: "family without alias", terms: []Term{{ID: "ami-1"}}, family: FamilyAL2023},

		{name: "no terms", terms: nil, wantKind: ErrInvalidTerm, wantIndex: -1, wantField: "amiSelectorTerms", wantText: "at least one"},
		{name: "31 terms", terms: manyTerms(31), wantKind: ErrInvalidTerm, wantIndex: -1, wantField: "amiSelectorTerms", wantText: "at most 30"},
		{name: "empty term", terms: []Term{{ID: "ami-1"}, {}}, wantKind: ErrInvalidTerm, wantIndex: 1, wantText: "expected at least one"},
		{name: "owner only", terms: []Term{{Owner: "self"}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantText: "expected at least one"},
		{name: "id with name", terms: []Term{{ID: "ami-1", Name: "x"}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "id", wantText: "mutually exclusive"},
		{name: "id with owner", terms: []Term{{Name: "a"}, {ID: "ami-1", Owner: "self"}}, wantKind: ErrInvalidTerm, wantIndex: 1, wantField: "id", wantText: "owner"},
		{name: "id with tags", terms: []Term{{ID: "ami-1", Tags: map[string]string{"a": "b"}}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "id"},
		{name: "id with ssm parameter", terms: []Term{{ID: "ami-1", SSMParameter: "/p"}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "id", wantText: "ssmParameter"},
		{name: "bad id", terms: []Term{{ID: "ami-ABC"}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "id", wantText: "ami-[0-9a-z]"},
		{name: "alias with tags", terms: []Term{{Alias: "al2023@latest", Tags: map[string]string{"a": "b"}}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "alias", wantText: "mutually exclusive"},
		{name: "alias with another term", terms: []Term{{ID: "ami-1"}, {Alias: "al2023@latest"}}, wantKind: ErrInvalidTerm, wantIndex: 1, wantField: "alias", wantText: "other amiSelectorTerms"},
		{name: "ssm parameter with name", terms: []Term{{SSMParameter: "/p", Name: "x"}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "ssmParameter", wantText: "name"},
		{name: "21 tags", terms: []Term{{Tags: manyTags(21)}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "tags", wantText: "at most 20"},
		{name: "empty tag value", terms: []Term{{Tags: map[string]string{"a": ""}}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "tags", wantText: "empty tag"},
		{name: "empty tag key", terms: []Term{{Tags: map[string]string{"": "x"}}}, wantKind: ErrInvalidTerm, wantIndex: 0, wantField: "tags", wantText: "empty tag"},
		{name: "bad alias format", terms: []Term{{Alias: "al2023"}}, wantKind: ErrInvalidAlias, wantIndex: 0, wantField: "alias", wantText: "family@version"},
		{name: "alias too long", terms: []Term{{Alias: "al2023@" + strings.Repeat("v", 24)}}, wantKind: ErrInvalidAlias, wantIndex: 0, wantField: "alias", wantText: "at most 30"},
		{name: "windows pinned", terms: []Term{{Alias: "windows2022@v1"}}, wantKind: ErrInvalidAlias, wantIndex: 0, wantField: "alias", wantText: "only specify version 'latest'"},
		{name: "family disagrees with alias", terms: []Term{{Alias: "al2023@latest"}}, family: FamilyBottlerocket, wantKind: ErrInvalidFamily, wantIndex: -1, wantField: "amiFamily", wantText: `"AL2023" or "Custom"`},
		{name: "unknown family", terms: []Term{{ID: "ami-1"}}, family: "Ubuntu", wantKind: ErrInvalidFamily, wantIndex: -1, wantField: "amiFamily", wantText: "Ubuntu was removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.terms, WithFamily(tt.family))
			if tt.wantKind == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, tt.wantKind)
			var e *Error
			require.True(t, errors.As(err, &e), "error %v is not an *Error", err)
			require.Equal(t, tt.wantIndex, e.Index, "index in %v", err)
			if tt.wantField != "" {
				require.Equal(t, tt.wantField, e.Field, "field in %v", err)
			}
			require.Contains(t, err.Error(), tt.wantText)
		})
	}
}

func TestValidateReportsEveryViolation(t *testing.T) {
	err := Validate([]Term{{ID: "ami-1", Name: "x"}, {}, {Tags: map[string]string{"a": ""}}})
	require.Error(t, err)
	var paths []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *Error
		require.True(t, errors.As(e, &fe))
		paths = append(paths, fe.Path)
	}
	require.Equal(t, []string{"amiSelectorTerms[0].id", "amiSelectorTerms[1]", "amiSelectorTerms[2].tags"}, paths)
}

func TestParseFamily(t *testing.T) {
	for _, f := range []string{"AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Windows2025", "Custom"} {
		got, err := ParseFamily(f)
		require.NoError(t, err)
		require.Equal(t, Family(f), got)
	}
	_, err := ParseFamily("al2023")
	require.ErrorIs(t, err, ErrInvalidFamily)
	require.Contains(t, err.Error(), `did you mean "AL2023"`)
	_, err = ParseFamily("Ubuntu")
	require.ErrorIs(t, err, ErrInvalidFamily)
	require.Contains(t, err.Error(), "Ubuntu")
}
