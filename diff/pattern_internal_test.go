package diff

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// matchTokens is the reference Pattern.Match is held to: the pointer split
// into unescaped tokens first (parsePointer), then matched token by token.
// Match reads the pointer in place instead, which allocates nothing.
func matchTokens(segs []segment, toks []string) bool {
	if len(segs) == 0 {
		return true
	}
	s := segs[0]
	if s.kind == segDStar {
		for i := 0; i <= len(toks); i++ {
			if matchTokens(segs[1:], toks[i:]) {
				return true
			}
		}
		return false
	}
	if len(toks) == 0 {
		return false
	}
	switch s.kind {
	case segField:
		if s.name != toks[0] {
			return false
		}
	case segElem:
		if _, err := strconv.Atoi(toks[0]); err != nil {
			return false
		}
	}
	return matchTokens(segs[1:], toks[1:])
}

func matchReference(p Pattern, c Change) bool {
	if !p.p.anyObj && p.p.object != c.Object {
		return false
	}
	if p.p.kind != "" && p.p.kind != c.Kind {
		return false
	}
	rel := c.rel()
	if rel == "" {
		rel = c.Path
	}
	return matchTokens(p.p.segs, parsePointer(rel))
}

var matchSeeds = []struct{ pattern, path string }{
	{"machine.spec.version", "/spec/version"},
	{"machine.spec.version", "/spec/versions"},
	{"machine.spec.files[*].content", "/spec/files/2/content"},
	{"machine.spec.files[*]", "/spec/files/-1"},
	{"machine.spec.files[*]", "/spec/files/+7"},
	{"machine.spec.files[*]", "/spec/files/x"},
	{"machine.spec.files[*]", "/spec/files/"},
	{"machine.spec.files[*]", "/spec/files/99999999999999999999"},
	{"machine.spec.files[*]", "/spec/files/999999999999999999"},
	{"machine.spec.*.name", "/spec/a~1b/name"},
	{"machine.spec.**.name", "/spec/a/b/c/name"},
	{"machine.spec.**", "/spec"},
	{"*.**", ""},
	{"*.**", "/"},
	{"machine.spec.a~b", "/spec/a~0b"},
	{"machine.spec", "//"},
	{`machine.metadata.labels["foo/bar"]`, "/metadata/labels/foo~1bar"},
	{`machine.metadata.labels["a~b"]`, "/metadata/labels/a~0b~1"},
	{"machine.spec.x", "spec/x"},
}

// FuzzPatternMatch holds Pattern.Match to the tokenised reference on any
// pattern and pointer: same answer, and no panic.
func FuzzPatternMatch(f *testing.F) {
	for _, s := range matchSeeds {
		f.Add(s.pattern, s.path)
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		c := Change{Object: p.p.object, Path: path}
		require.Equal(t, matchReference(p, c), p.Match(c), "pattern %q, path %q", pattern, path)
	})
}

func TestPatternMatchAgreesWithTokens(t *testing.T) {
	for _, s := range matchSeeds {
		p, err := ParsePattern(s.pattern)
		require.NoError(t, err, s.pattern)
		c := Change{Object: p.p.object, Path: s.path}
		require.Equal(t, matchReference(p, c), p.Match(c), "pattern %q, path %q", s.pattern, s.path)
	}
}

func TestPatternMatchDoesNotAllocate(t *testing.T) {
	p, err := ParsePattern("bootstrap.spec.files[*].content")
	require.NoError(t, err)
	hit := Change{Object: p.p.object, Path: "/spec/files/2/content"}
	miss := Change{Object: p.p.object, Path: "/spec/files/x/content"}
	allocs := testing.AllocsPerRun(100, func() {
		if !p.Match(hit) || p.Match(miss) {
			t.Fatal("wrong answer")
		}
	})
	require.Zero(t, allocs)
}
