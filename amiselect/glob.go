package amiselect

import (
	"strings"
	"unicode/utf8"
)

// pattern is a compiled EC2 filter value: "*" matches any run of
// characters, "?" exactly one, and a backslash makes the next character
// literal.
type pattern struct {
	raw     string
	literal bool   // no wildcard or escape: plain equality
	prefix  string // the literal text before the first special character
}

func compilePattern(s string) pattern {
	i := strings.IndexAny(s, `*?\`)
	if i < 0 {
		return pattern{raw: s, literal: true, prefix: s}
	}
	return pattern{raw: s, prefix: s[:i]}
}

func (p *pattern) match(s string) bool {
	if p.literal {
		return p.raw == s
	}
	if !strings.HasPrefix(s, p.prefix) {
		return false
	}
	return globMatch(p.raw, s)
}

// globMatch matches s against an EC2 wildcard pattern in linear-ish time
// (backtracking only to the last "*"), never allocating.
func globMatch(p, s string) bool {
	px, sx := 0, 0
	star, starS := -1, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			switch c := p[px]; c {
			case '*':
				star, starS = px, sx
				px++
				continue
			case '?':
				if sx < len(s) {
					_, w := utf8.DecodeRuneInString(s[sx:])
					sx += w
					px++
					continue
				}
			case '\\':
				lit, n := byte('\\'), 1
				if px+1 < len(p) {
					lit, n = p[px+1], 2
				}
				if sx < len(s) && s[sx] == lit {
					sx++
					px += n
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					sx++
					px++
					continue
				}
			}
		}
		if star >= 0 && starS < len(s) {
			_, w := utf8.DecodeRuneInString(s[starS:])
			starS += w
			px, sx = star+1, starS
			continue
		}
		return false
	}
	return true
}
