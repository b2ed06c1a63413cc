package amiselect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	clocktesting "k8s.io/utils/clock/testing"
)

func FuzzParseAlias(f *testing.F) {
	for _, s := range []string{
		"al2023@latest", "al2@v20240807", "bottlerocket@v1.20.3", "bottlerocket@1.20.3", "windows2019@latest",
		"windows2022@latest", "windows2025@latest", "windows2022@v1", "AL2023@latest", "al2023", "@", "a@b@c",
		"al2023@" + strings.Repeat("x", 30), "ubuntu@latest", "al2023@../../etc", "al2023@\x00", "al2023@vvv1",
	} {
		f.Add(s, "1.31")
	}
	f.Add("al2@latest", "1.33")
	f.Add("windows2025@latest", "v1.35.0")
	f.Fuzz(func(t *testing.T, s, k8s string) {
		a, err := ParseAlias(s)
		if err != nil {
			var e *Error
			if !errors.Is(err, ErrInvalidAlias) || !errors.As(err, &e) || e.Value != s {
				t.Fatalf("ParseAlias(%q): untyped error %v", s, err)
			}
			return
		}
		if a.String() != s || len(s) > MaxAliasLength || a.Version == "" || strings.Contains(a.Version, "@") {
			t.Fatalf("ParseAlias(%q) accepted %+v", s, a)
		}
		if a.Family.windows() && a.Version != VersionLatest {
			t.Fatalf("ParseAlias(%q): pinned Windows alias accepted", s)
		}
		params, err := a.Parameters(k8s)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrInvalidKubernetesVersion) {
				t.Fatalf("Parameters(%q, %q): unexpected error %v", s, k8s, err)
			}
			return
		}
		norm, _, _ := ParseKubernetesVersion(k8s)
		if len(params) == 0 {
			t.Fatalf("Parameters(%q, %q): no parameters", s, k8s)
		}
		for _, p := range params {
			if !strings.HasPrefix(p.Path, "/aws/service/") || !strings.HasSuffix(p.Path, "/image_id") || !strings.Contains(p.Path, norm) {
				t.Fatalf("Parameters(%q, %q): bad path %q", s, k8s, p.Path)
			}
			if p.Mutable != (a.Version == VersionLatest) {
				t.Fatalf("Parameters(%q): mutability of %q", s, p.Path)
			}
		}
	})
}

// FuzzTerms feeds arbitrary amiSelectorTerms JSON through Validate and
// Resolve: no panic, only typed errors, and what Validate accepts Resolve
// does not reject as invalid.
func FuzzTerms(f *testing.F) {
	for _, s := range []string{
		`[{"alias":"al2023@latest"}]`,
		`[{"id":"ami-1"},{"ssmParameter":"/my/ami"}]`,
		`[{"name":"app-*","owner":"self"},{"tags":{"team":"*"}}]`,
		`[{"tags":{"a":""}}]`,
		`[{"id":"ami-1","name":"x"}]`,
		`[{}]`,
		`[]`,
		`[{"alias":"windows2022@latest"}]`,
		`[{"alias":"al2@latest"}]`,
		`[{"name":"*","owner":"amazon"}]`,
		`[{"ssmParameter":"/bad"}]`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`[{"alias":"al2023@latest"}]`), "Bottlerocket")
	f.Add([]byte(`[{"id":"ami-1"}]`), "Ubuntu")
	cat, err := LoadCatalog(strings.NewReader(describeImagesJSON))
	if err != nil {
		f.Fatal(err)
	}
	cat.SetParameter("/my/ami", "ami-0a1b2c3d4e5f60718")
	cat.SetParameter("/bad", "nope")
	f.Fuzz(func(t *testing.T, data []byte, family string) {
		var terms []Term
		if err := json.Unmarshal(data, &terms); err != nil {
			return
		}
		verr := Validate(terms, WithFamily(Family(family)))
		checkTyped(t, verr, len(terms))
		res, rerr := Resolve(context.Background(), cat, terms, WithFamily(Family(family)), WithKubernetesVersion("1.30"),
			WithClock(clocktesting.NewFakePassiveClock(day(0))))
		if verr != nil {
			if rerr == nil {
				t.Fatalf("Resolve accepted terms Validate refused: %v", verr)
			}
			return
		}
		switch {
		case rerr == nil:
			if len(res.Images) == 0 {
				t.Fatal("Resolve returned no images and no error")
			}
		case errors.Is(rerr, ErrNoImages), errors.Is(rerr, ErrUnsupported):
		default:
			t.Fatalf("Resolve of valid terms %s: %v", data, rerr)
		}
	})
}

func checkTyped(t *testing.T, err error, n int) {
	t.Helper()
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *Error
		if !errors.As(e, &fe) || fe.Kind == nil {
			t.Fatalf("untyped validation error %v", e)
		}
		if fe.Index >= n {
			t.Fatalf("error index %d out of range %d: %v", fe.Index, n, e)
		}
	}
}

func FuzzLoadCatalog(f *testing.F) {
	f.Add([]byte(describeImagesJSON))
	f.Add([]byte(`{"Images":[{"ImageId":"ami-1","CreationDate":"x"}]}`))
	f.Add([]byte(`{"Images":[{"ImageId":"ami-1","Tags":[{"Key":"k"},{"Key":"k"}]}]}`))
	f.Add([]byte(`{"Images":null,"Parameters":[{"Name":"/p","Value":"ami-1"}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := LoadCatalog(bytes.NewReader(data))
		if err != nil {
			var e *Error
			if !errors.Is(err, ErrInvalidCatalog) || !errors.As(err, &e) {
				t.Fatalf("untyped catalog error %v", err)
			}
			return
		}
		if _, err := c.DescribeImages(context.Background(), Query{Filters: []Filter{{Name: "name", Values: []string{"*a*"}}}}); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzGlobMatch(f *testing.F) {
	f.Add("a*c", "abc")
	f.Add(`a\*`, "a*")
	f.Add("*??", "€")
	f.Add("?", "é")
	f.Fuzz(func(t *testing.T, p, s string) {
		if !utf8.ValidString(p) || !utf8.ValidString(s) || len(p) > 64 || len(s) > 64 {
			return
		}
		if got, want := globMatch(p, s), globToRegexp(p).MatchString(s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, reference %v", p, s, got, want)
		}
	})
}

// FuzzQueryKey checks that the cache key of a query is injective up to
// order: two queries share a key exactly when their sorted owners and
// sorted filters (name and sorted values) are equal. Each input string is
// split on "|" into a list, so the fuzzer explores lists whose elements
// contain the bytes an ambiguous encoding would confuse.
func FuzzQueryKey(f *testing.F) {
	f.Add("a\x00b", "a|b", "name", "name", false, false) // collided under the old \x00-joined key
	f.Add("self|amazon", "amazon|self", "image-id", "image-id", true, true)
	f.Add("\x01name\x02x", "", "name", "name", false, false)
	f.Add("x\x01deprecated", "x", "", "", false, true)
	f.Add("1#1:a", "1:a", "3:a\x02", "a", false, false)
	f.Fuzz(func(t *testing.T, a, b, fa, fb string, da, db bool) {
		build := func(owners, filter string, dep bool) Query {
			q := Query{IncludeDeprecated: dep}
			if owners != "" {
				q.Owners = strings.Split(owners, "|")
			}
			if filter != "" {
				parts := strings.Split(filter, "|")
				q.Filters = []Filter{{Name: parts[0], Values: parts[1:]}}
			}
			return q
		}
		qa, qb := build(a, fa, da), build(b, fb, db)
		canon := func(q Query) string {
			o := append([]string(nil), q.Owners...)
			sort.Strings(o)
			var fs []string
			for _, f := range q.Filters {
				v := append([]string(nil), f.Values...)
				sort.Strings(v)
				fs = append(fs, strconv.Quote(f.Name)+"="+strconv.Quote(strings.Join(quoteAll(v), ",")))
			}
			return strings.Join(quoteAll(o), ",") + ";" + strings.Join(fs, ";") + ";" + strconv.FormatBool(q.IncludeDeprecated)
		}
		sameQuery := canon(qa) == canon(qb)
		sameKey := queryKey(qa) == queryKey(qb)
		if sameQuery != sameKey {
			t.Fatalf("queries %#v and %#v: same query %v, same key %v", qa, qb, sameQuery, sameKey)
		}
	})
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// FuzzValidID checks the hand-written id check against the regular
// expression it replaced.
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"ami-0abc", "ami-", "ami-ABC", "ami-0a_b", "xami-1", "ami-1\n", "ami-é"} {
		f.Add(s)
	}
	re := regexp.MustCompile(`^ami-[0-9a-z]+$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validID(s), re.MatchString(s); got != want {
			t.Fatalf("validID(%q) = %v, ^ami-[0-9a-z]+$ says %v", s, got, want)
		}
	})
}
