package drift

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Sentinel errors. Every error returned by this package wraps one of these,
// so callers can test with errors.Is; errors about a location in a spec are
// also a *PathError (errors.As) naming that location.
var (
	// ErrUnhashable is returned when a spec has no canonical JSON form:
	// a value of a kind JSON cannot hold (channels, funcs, complex
	// numbers, unsafe pointers, maps whose keys cannot become JSON object
	// keys), a value with no canonical form (NaN or infinite floats, a
	// marshaler that fails or returns invalid JSON), a cycle through
	// pointers, maps, slices or interfaces, or nesting deeper than 1000
	// levels (pointers, maps, slices and interfaces each count one). The
	// error is a *PathError naming where, and its message says which.
	ErrUnhashable = errors.New("drift: spec cannot be hashed")
	// ErrInvalidOption is returned by constructors given a bad option,
	// version, prefix or path.
	ErrInvalidOption = errors.New("drift: invalid option")
	// ErrInvalidAnnotation is returned when a stamped annotation cannot be
	// parsed. Checks treat such objects as unknown, never as drifted.
	ErrInvalidAnnotation = errors.New("drift: invalid annotation")
	// ErrInvalidRequirement is returned for a node selector requirement
	// that cannot be evaluated (unknown operator, non-integer Gt/Lt value).
	ErrInvalidRequirement = errors.New("drift: invalid requirement")
	// ErrInternal is returned when hashing hits a bug in this package (a
	// recovered panic outside any user method). Please report it.
	ErrInternal = errors.New("drift: internal error")
	// ErrImageChooser wraps an error returned by an ImageChooser (which
	// may itself wrap ErrNoImage).
	ErrImageChooser = errors.New("drift: image chooser failed")
	// ErrNoImage is returned by image checks when the ImageChooser has no
	// image for a node's requirements.
	ErrNoImage = errors.New("drift: no image for requirements")
	// ErrNilObject is returned when an object to stamp, check or explain
	// is nil (a nil interface or a typed nil pointer).
	ErrNilObject = errors.New("drift: nil object")
)

// The reasons a spec cannot be hashed: each matches ErrUnhashable with
// errors.Is, and keeps its own message.
var (
	errUnsupportedType  error = &unhashableError{"drift: unsupported type"}
	errUnsupportedValue error = &unhashableError{"drift: unsupported value"}
	errCycle            error = &unhashableError{"drift: cycle in spec"}
	errTooDeep          error = &unhashableError{"drift: spec nests too deeply"}
)

// unhashableError is one reason a spec cannot be hashed.
type unhashableError struct{ msg string }

func (e *unhashableError) Error() string { return e.msg }

// Is makes every reason match ErrUnhashable.
func (e *unhashableError) Is(target error) bool { return target == ErrUnhashable }

// isNilObject reports whether obj is nil or a typed nil pointer.
func isNilObject(obj any) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// maxDepth is the deepest nesting (pointers, maps, slices and interfaces
// each count one level) the hasher descends before giving up with
// errTooDeep. Real Kubernetes specs stay far below it.
const maxDepth = 1000

// cycleCheckDepth is the depth after which the encoder starts remembering
// the containers on its current path, to tell a cycle from merely deep data
// without any cost for ordinary specs.
const cycleCheckDepth = 64

// PathError reports the location inside a spec at which hashing failed.
type PathError struct {
	// Path is the JSON path of the offending value, dot separated, with
	// list indexes in brackets, e.g. "spec.template.spec.taints[2].value".
	Path string
	// Err is the underlying error; it wraps one of the sentinel errors.
	Err error
}

// Error implements error.
func (e *PathError) Error() string {
	msg := "drift: error"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Path == "" {
		return msg + " (at the root)"
	}
	p := e.Path
	if len(p) > 2*errtext.MaxQuoted {
		p = fmt.Sprintf("%s...(%d bytes)...%s", p[:errtext.MaxQuoted], len(p), p[len(p)-errtext.MaxQuoted:])
	}
	return msg + " (at " + p + ")"
}

// Unwrap returns the underlying error.
func (e *PathError) Unwrap() error { return e.Err }

// walkError is the internal form of PathError: segments are collected in
// reverse order while the recursion unwinds, so the hot path never builds
// paths.
type walkError struct {
	rev []string
	err error
}

func (w *walkError) Error() string { return w.err.Error() }

func newWalkError(err error) *walkError { return &walkError{err: err} }

// wrapField adds a field/key segment to err while unwinding.
func wrapField(err error, name string) error {
	var w *walkError
	if errors.As(err, &w) {
		w.rev = append(w.rev, "."+name)
		return w
	}
	return err
}

// wrapIndex adds a list index segment to err while unwinding.
func wrapIndex(err error, i int) error {
	var w *walkError
	if errors.As(err, &w) {
		w.rev = append(w.rev, fmt.Sprintf("[%d]", i))
		return w
	}
	return err
}

// finishError converts a walkError into a *PathError.
func finishError(err error) error {
	var w *walkError
	if !errors.As(err, &w) {
		return err
	}
	var b strings.Builder
	for i := len(w.rev) - 1; i >= 0; i-- {
		b.WriteString(w.rev[i])
	}
	return &PathError{Path: strings.TrimPrefix(b.String(), "."), Err: w.err}
}
