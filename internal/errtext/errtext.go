// Package errtext keeps error messages short when they quote what a
// caller passed: a megabyte of input must not come back as a megabyte of
// error (logged, put in a Kubernetes condition or an Event, sent back to
// Cluster API). The leaf packages (diff, drift, amiselect) use it too:
// they import nothing of ours but internal packages.
package errtext

import (
	"fmt"
	"strconv"
)

// MaxQuoted is how many bytes of a value Quote keeps.
const MaxQuoted = 128

// Quote is strconv.Quote(s) for s of up to MaxQuoted bytes; a longer s is
// cut there and its length given: "aaaa"... (1048576 bytes).
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:MaxQuoted]), len(s))
}

// MaxErrors is how many errors Join keeps.
const MaxErrors = 10

// Cut keeps the first MaxErrors of errs and, when there were more, adds
// one saying how many were left out; the result is meant for errors.Join.
func Cut(errs []error) []error {
	if len(errs) <= MaxErrors {
		return errs
	}
	out := append([]error(nil), errs[:MaxErrors]...)
	return append(out, fmt.Errorf("... and %d more", len(errs)-MaxErrors))
}

// MaxDetail is how many bytes of a composed detail Clip keeps.
const MaxDetail = 256

// Clip cuts a composed message (one that may quote several values) at
// MaxDetail bytes, saying how long it was.
func Clip(s string) string {
	if len(s) <= MaxDetail {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:MaxDetail], len(s))
}

// MaxMessage is the most an error type's message says (Cap).
const MaxMessage = 2048

// Cap cuts a whole error message at MaxMessage bytes, saying how long it
// was: the last guard of an error type whose fields may hold what a caller
// passed.
func Cap(s string) string {
	if len(s) <= MaxMessage {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:MaxMessage], len(s))
}
