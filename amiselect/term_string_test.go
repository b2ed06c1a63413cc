package amiselect_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/amiselect"
)

func TestTermString(t *testing.T) {
	require.Equal(t, `alias "al2023@latest"`, amiselect.Term{Alias: "al2023@latest"}.String())
	require.Equal(t, `name "eks-*", owner "amazon", tags "team=a,tier=b"`,
		amiselect.Term{Name: "eks-*", Owner: "amazon", Tags: map[string]string{"tier": "b", "team": "a"}}.String())
	require.Equal(t, "", amiselect.Term{}.String())
}
