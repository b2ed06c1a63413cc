package amiselect

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestConvertV1Beta1(t *testing.T) {
	tests := []struct {
		family string
		terms  []Term
		want   V1
		notes  int
	}{
		{family: "AL2023", want: V1{Terms: []Term{{Alias: "al2023@latest"}}}, notes: 1},
		{family: "AL2", want: V1{Terms: []Term{{Alias: "al2@latest"}}}, notes: 1},
		{family: "Bottlerocket", want: V1{Terms: []Term{{Alias: "bottlerocket@latest"}}}, notes: 1},
		{family: "Windows2019", want: V1{Terms: []Term{{Alias: "windows2019@latest"}}}, notes: 1},
		{family: "Windows2022", want: V1{Terms: []Term{{Alias: "windows2022@latest"}}}, notes: 1},
		{family: "AL2023", terms: []Term{{Name: "my-al2023-*"}}, want: V1{Family: FamilyAL2023, Terms: []Term{{Name: "my-al2023-*"}}}},
		{family: "Custom", terms: []Term{{ID: "ami-123"}}, want: V1{Family: FamilyCustom, Terms: []Term{{ID: "ami-123"}}}},
		{family: "Ubuntu", terms: []Term{{Name: "ubuntu-eks/*", Owner: "099720109477"}}, want: V1{Family: FamilyAL2, Terms: []Term{{Name: "ubuntu-eks/*", Owner: "099720109477"}}}, notes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			got, err := ConvertV1Beta1(tt.family, tt.terms)
			require.NoError(t, err)
			require.Len(t, got.Notes, tt.notes)
			got.Notes = nil
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
			require.NoError(t, Validate(got.Terms, WithFamily(got.Family)))
		})
	}
}

func TestConvertV1Beta1Errors(t *testing.T) {
	tests := []struct {
		name     string
		family   string
		terms    []Term
		wantKind error
		wantText string
	}{
		{"ubuntu without terms", "Ubuntu", nil, ErrNotConvertible, "ubuntu-eks/k8s_1.31/images/*"},
		{"custom without terms", "Custom", nil, ErrNotConvertible, "needs amiSelectorTerms"},
		{"no family", "", nil, ErrNotConvertible, "need an amiFamily"},
		{"unknown family", "CoreOS", nil, ErrNotConvertible, "must be one of"},
		{"lower-case family", "al2023", nil, ErrNotConvertible, `did you mean "AL2023"`},
		{"v1 alias in a v1beta1 term", "AL2023", []Term{{Alias: "al2023@latest"}}, ErrNotConvertible, "already a v1 term"},
		{"invalid carried term", "AL2023", []Term{{ID: "ami-1", Name: "x"}}, ErrInvalidTerm, "mutually exclusive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ConvertV1Beta1(tt.family, tt.terms)
			require.ErrorIs(t, err, tt.wantKind)
			require.Contains(t, err.Error(), tt.wantText)
			var e *Error
			require.True(t, errors.As(err, &e))
		})
	}
}
