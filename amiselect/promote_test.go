package amiselect

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// A release history: v1 is old, v2 two days old, v3 built an hour ago.
func releases(t testing.TB) *Catalog {
	now := day(30)
	return newTestCatalog(t,
		img("ami-v1", "app-v1", now.AddDate(0, 0, -20), tags("app", "web")),
		img("ami-v1a", "app-v1-arm", now.AddDate(0, 0, -20), arm, tags("app", "web")),
		img("ami-v2", "app-v2", now.AddDate(0, 0, -2), tags("app", "web")),
		img("ami-v3", "app-v3", now.Add(-time.Hour), tags("app", "web")),
	)
}

func TestMinAge(t *testing.T) {
	terms := []Term{{Tags: map[string]string{"app": "web"}}}
	res, err := resolveAt(t, releases(t), terms)
	require.NoError(t, err)
	require.Equal(t, []string{"ami-v3", "ami-v1a"}, ids(res))

	res, err = resolveAt(t, releases(t), terms, WithMinAge(24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"ami-v2", "ami-v1a"}, ids(res), "v3 is younger than a day")
	require.Equal(t, []Skip{{Term: 0, Images: []string{"ami-v3"}, Count: 1, Reason: "image created less than 24h0m0s ago (minimum age)"}}, res.Skipped)

	res, err = resolveAt(t, releases(t), terms, WithMinAge(7*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"ami-v1", "ami-v1a"}, ids(res))
}

func TestResolutionJSONRoundTrip(t *testing.T) {
	res, err := resolveAt(t, aliasCatalog(t), []Term{{Alias: "al2023@latest"}})
	require.NoError(t, err)
	data, err := json.Marshal(res)
	require.NoError(t, err)
	var back Resolution
	require.NoError(t, json.Unmarshal(data, &back))
	if d := cmp.Diff(res, &back); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	// The stored record still answers drift questions.
	drifted, _ := back.IsDrifted("ami-std", Requirements{Architecture: ArchAMD64})
	require.False(t, drifted)
	require.Contains(t, string(data), `"resolvedAt":"2025-07-01T12:00:00Z"`)
	require.Contains(t, string(data), `"terms":[{"alias":"al2023@latest"}]`)
}

func TestChanges(t *testing.T) {
	terms := []Term{{Tags: map[string]string{"app": "web"}}}
	old, err := resolveAt(t, releases(t), terms, WithMinAge(7*24*time.Hour))
	require.NoError(t, err)
	next, err := resolveAt(t, releases(t), terms)
	require.NoError(t, err)

	changes := old.Changes(next)
	require.Len(t, changes, 1)
	require.Equal(t, Requirements{Architecture: ArchAMD64}, changes[0].Requirements)
	require.Equal(t, "ami-v1", changes[0].From.ID)
	require.Equal(t, "ami-v3", changes[0].To.ID)
	require.Equal(t, "amd64: ami-v1 -> ami-v3", changes[0].String())
	require.Empty(t, next.Changes(next))

	// A requirement set that appears or disappears.
	armOnly := &Resolution{Images: []Selected{{ID: "ami-v1a", Requirements: Requirements{Architecture: ArchARM64}}}}
	require.Equal(t, []string{"amd64: (none) -> ami-v3"}, changeStrings(armOnly.Changes(next)))
	require.Equal(t, []string{"amd64: ami-v3 -> (none)"}, changeStrings(next.Changes(armOnly)))
	var none *Resolution
	require.Equal(t, []string{"amd64: (none) -> ami-v3", "arm64: (none) -> ami-v1a"}, changeStrings(none.Changes(next)))
}

func changeStrings(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// dev takes every release, staging waits a day, prod runs what staging ran.
func TestPromotionDevStagingProd(t *testing.T) {
	terms := []Term{{Tags: map[string]string{"app": "web"}}}
	dev, err := resolveAt(t, releases(t), terms)
	require.NoError(t, err)
	staging, err := resolveAt(t, releases(t), terms, WithMinAge(24*time.Hour))
	require.NoError(t, err)
	stored, err := json.Marshal(staging)
	require.NoError(t, err)

	var stagingRecord Resolution
	require.NoError(t, json.Unmarshal(stored, &stagingRecord))
	prod, err := resolveAt(t, releases(t), terms, WithPin(&stagingRecord))
	require.NoError(t, err)
	require.Equal(t, []string{"ami-v3", "ami-v1a"}, ids(dev))
	require.Equal(t, []string{"ami-v2", "ami-v1a"}, ids(prod), "prod runs what staging runs, not the newer v3")
	require.Empty(t, staging.Changes(prod))
	require.Equal(t, []Skip{{Term: 0, Images: []string{"ami-v1", "ami-v3"}, Count: 2, Reason: reasonNotPinned}}, prod.Skipped)

	// Pinned to a stage whose images the terms do not select: no images, and the error says why.
	_, err = resolveAt(t, releases(t), []Term{{ID: "ami-v1"}}, WithPin(&stagingRecord))
	require.ErrorIs(t, err, ErrNoImages)
	var ni *NoImagesError
	require.True(t, errors.As(err, &ni))
	require.Equal(t, reasonNotPinned, ni.Unmatched[0].Reason)
}
