package amiselect

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// recordingSource records the queries it is sent and answers none. It
// appends to and edits each query's slices after recording it, as a
// careless source might: no other query may see that.
type recordingSource struct{ queries []Query }

func (s *recordingSource) DescribeImages(_ context.Context, q Query) ([]Image, error) {
	cp := Query{IncludeDeprecated: q.IncludeDeprecated, Owners: append([]string(nil), q.Owners...)}
	for _, f := range q.Filters {
		cp.Filters = append(cp.Filters, Filter{Name: f.Name, Values: append([]string(nil), f.Values...)})
	}
	s.queries = append(s.queries, cp)
	q.Filters = append(q.Filters, Filter{Name: "appended"})
	q.Owners = append(q.Owners, "appended")
	for i := range q.Filters {
		q.Filters[i].Values = append(q.Filters[i].Values, "appended")
	}
	return nil, nil
}

func (s *recordingSource) GetParameter(context.Context, string) (string, error) {
	return "", ErrParameterNotFound
}

// TestTermQueries: each name/owner/tags term becomes one DescribeImages
// query (owners self and amazon for a name without an owner, tags sorted,
// the state filter last), ID terms share one image-id query, and a source
// that appends to a query touches no other.
func TestTermQueries(t *testing.T) {
	src := &recordingSource{}
	terms := []Term{
		{Name: "app-*"},
		{Name: "app-*", Owner: "999988887777"},
		{Owner: "self", Tags: map[string]string{"env": "prod", "team": "*"}},
		{Tags: map[string]string{"b": "2", "a": "1", "c": "*"}},
		{ID: "ami-0123456789abcdef0"},
		{Name: "x", Tags: map[string]string{"k": "v"}},
		{ID: "ami-0fedcba9876543210"},
	}
	_, err := Resolve(context.Background(), src, terms)
	require.Error(t, err, "no image matches")
	state := Filter{Name: "state", Values: []string{StateAvailable}}
	want := []Query{
		{Owners: []string{"self", "amazon"}, Filters: []Filter{{Name: "name", Values: []string{"app-*"}}, state}, IncludeDeprecated: true},
		{Owners: []string{"999988887777"}, Filters: []Filter{{Name: "name", Values: []string{"app-*"}}, state}, IncludeDeprecated: true},
		{Owners: []string{"self"}, Filters: []Filter{{Name: "tag:env", Values: []string{"prod"}}, {Name: "tag-key", Values: []string{"team"}}, state}, IncludeDeprecated: true},
		{Filters: []Filter{{Name: "tag:a", Values: []string{"1"}}, {Name: "tag:b", Values: []string{"2"}}, {Name: "tag-key", Values: []string{"c"}}, state}, IncludeDeprecated: true},
		{Owners: []string{"self", "amazon"}, Filters: []Filter{{Name: "name", Values: []string{"x"}}, {Name: "tag:k", Values: []string{"v"}}, state}, IncludeDeprecated: true},
		{Filters: []Filter{{Name: "image-id", Values: []string{"ami-0123456789abcdef0", "ami-0fedcba9876543210"}}, state}, IncludeDeprecated: true},
	}
	require.Empty(t, cmp.Diff(want, src.queries))
}
