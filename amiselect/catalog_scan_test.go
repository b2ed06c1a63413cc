package amiselect

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// scan answers q by looking at every image of c with the reference glob
// (globToRegexp): the oracle for the Catalog's indexes and for the filters
// they let it skip.
func scan(c *Catalog, q Query) []string {
	now := c.now()
	res := make([][]*regexp.Regexp, len(q.Filters))
	for i, f := range q.Filters {
		for _, v := range f.Values {
			res[i] = append(res[i], globToRegexp(v))
		}
	}
	out := []string{}
	for i := range c.images {
		img := &c.images[i]
		if !q.IncludeDeprecated && img.Deprecated(now) {
			continue
		}
		if len(q.Owners) > 0 && !slices.ContainsFunc(q.Owners, func(o string) bool {
			switch o {
			case "self":
				return c.accountID != "" && img.OwnerID == c.accountID
			case "amazon", "aws-marketplace":
				return img.OwnerAlias == o
			}
			return img.OwnerID == o
		}) {
			continue
		}
		ok := true
		for fi, f := range q.Filters {
			any := func(s string) bool {
				return slices.ContainsFunc(res[fi], func(re *regexp.Regexp) bool { return re.MatchString(s) })
			}
			var m bool
			switch f.Name {
			case "image-id":
				m = any(img.ID)
			case "name":
				m = any(img.Name)
			case "state":
				m = any(img.State)
			case "architecture":
				m = any(img.Architecture)
			case "owner-id":
				m = any(img.OwnerID)
			case "owner-alias":
				m = any(img.OwnerAlias)
			case "tag-key":
				for k := range img.Tags {
					m = m || any(k)
				}
			default:
				v, has := img.Tags[f.Name[len("tag:"):]]
				m = has && any(v)
			}
			if !m {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, img.ID)
		}
	}
	return out
}

// randomQuery draws a query over the bench catalog's vocabulary: literal
// and wildcard names (prefixes, "prefix*" exactly, inner wildcards), tag
// and tag-key filters, ids, owners, state and architecture, one to three
// values each, so every index and every skipped filter is exercised.
func randomQuery(r *rand.Rand) Query {
	pick := func(vs ...string) string { return vs[r.IntN(len(vs))] }
	app := func() string { return fmt.Sprintf("app-%03d", r.IntN(210)) }
	values := func(gen func() string) []string {
		vs := make([]string, 1+r.IntN(3))
		for i := range vs {
			vs[i] = gen()
		}
		return vs
	}
	var q Query
	for range r.IntN(4) {
		switch r.IntN(9) {
		case 0:
			q.Filters = append(q.Filters, Filter{Name: "name", Values: values(func() string {
				return pick(app()+"-*", app()+"-v00*", app()+"-v004?", app(), app()+"-v0012", "app-0*-v0001", "*-v0049", "app-1?0-*", `app\-00*`)
			})})
		case 1:
			q.Filters = append(q.Filters, Filter{Name: "tag:app", Values: values(func() string { return pick(app(), "app-1*", "*") })})
		case 2:
			q.Filters = append(q.Filters, Filter{Name: "tag:env", Values: values(func() string { return pick("dev", "prod", "p*") })})
		case 3:
			q.Filters = append(q.Filters, Filter{Name: "tag-key", Values: values(func() string { return pick("team", "env", "nope", "t*") })})
		case 4:
			q.Filters = append(q.Filters, Filter{Name: "image-id", Values: values(func() string {
				return pick(fmt.Sprintf("ami-%017x", r.IntN(210)*1000+r.IntN(55)), "ami-00000000000000*", "ami-nope")
			})})
		case 5:
			q.Filters = append(q.Filters, Filter{Name: "architecture", Values: values(func() string { return pick(EC2ArchX86, EC2ArchARM64, "*64") })})
		case 6:
			q.Filters = append(q.Filters, Filter{Name: "state", Values: []string{StateAvailable}})
		case 7:
			q.Filters = append(q.Filters, Filter{Name: "owner-alias", Values: values(func() string { return pick("amazon", "*") })})
		case 8:
			q.Filters = append(q.Filters, Filter{Name: "tag:team", Values: values(func() string { return pick("team-0", "team-?", "team-9") })})
		}
	}
	if r.IntN(2) == 0 {
		q.Owners = values(func() string { return pick("self", "amazon", "aws-marketplace", "999988887777", "137112412989") })
	}
	q.IncludeDeprecated = r.IntN(2) == 0
	return q
}

// TestDescribeImagesMatchesScan: the indexed DescribeImages (and the
// resolver's in-place path over the same matches) answers exactly what a
// scan of every image does, in catalog order.
func TestDescribeImagesMatchesScan(t *testing.T) {
	c := benchCatalog(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		q := randomQuery(r)
		got := describeIDs(t, c, q)
		want := scan(c, q)
		require.Empty(t, cmp.Diff(want, got), "query %d: %+v", i, q)
		var visited []string
		require.NoError(t, c.visitImages(context.Background(), q, func(img *Image) { visited = append(visited, img.ID) }))
		require.Empty(t, cmp.Diff(want, append([]string{}, visited...)), "query %d visited: %+v", i, q)
	}
}

// TestResolveSameThroughAnySource: resolving over a Catalog (which the
// resolver reads in place) and over the same catalog behind SourceFuncs
// (copies, as any other source) gives the same result and skips.
func TestResolveSameThroughAnySource(t *testing.T) {
	c := benchCatalog(t)
	copying := SourceFuncs{Describe: c.DescribeImages, Parameter: c.GetParameter}
	opts := []Option{WithClock(clocktesting.NewFakePassiveClock(day(30)))}
	r := rand.New(rand.NewPCG(3, 4))
	termSets := [][]Term{benchTerms()}
	for range 200 {
		var terms []Term
		for range 1 + r.IntN(6) {
			switch r.IntN(3) {
			case 0:
				terms = append(terms, Term{Name: fmt.Sprintf("app-%03d-*", r.IntN(210)), Owner: []string{"", "self", "amazon", "999988887777"}[r.IntN(4)]})
			case 1:
				terms = append(terms, Term{Tags: map[string]string{"app": fmt.Sprintf("app-%03d", r.IntN(210)), "env": []string{"dev", "prod", "*"}[r.IntN(3)]}})
			case 2:
				terms = append(terms, Term{ID: fmt.Sprintf("ami-%017x", r.IntN(210)*1000+r.IntN(55))})
			}
		}
		termSets = append(termSets, terms)
	}
	for i, terms := range termSets {
		want, werr := Resolve(context.Background(), copying, terms, opts...)
		got, gerr := Resolve(context.Background(), c, terms, opts...)
		require.Equal(t, werr == nil, gerr == nil, "terms %d: %v / %v", i, werr, gerr)
		if werr != nil {
			require.Equal(t, werr.Error(), gerr.Error(), "terms %d", i)
			continue
		}
		require.Empty(t, cmp.Diff(want, got), "terms %d: %+v", i, terms)
	}
}
