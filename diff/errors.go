package diff

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is. Every error the package returns
// wraps one of them in an *Error that names the object and path.
var (
	// ErrNilObject: an object is nil (or an empty RawExtension) on one side only.
	ErrNilObject = errors.New("nil object")
	// ErrKindMismatch: the two sides are different kinds (a Machine against a
	// MachineSet, an AWSMachine against a DockerMachine, two Go types).
	ErrKindMismatch = errors.New("kind mismatch")
	// ErrWrongKind: the object is not of a kind the verb accepts.
	ErrWrongKind = errors.New("wrong kind")
	// ErrUnsupportedValue: a value that has no JSON form (channel, func,
	// complex number, NaN or infinite float, a Go struct inside unstructured
	// content).
	ErrUnsupportedValue = errors.New("unsupported value")
	// ErrTooDeep: nesting beyond the depth limit (cyclic values end here).
	ErrTooDeep = errors.New("value nested too deeply")
	// ErrInvalidJSON: raw JSON input that does not parse to an object.
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrInvalidOption: an option that cannot be compiled (bad path pattern,
	// contradictory rules).
	ErrInvalidOption = errors.New("invalid option")
	// ErrNoDocument: a patch was asked for an object the change set has no
	// documents for.
	ErrNoDocument = errors.New("no document for object")
)

// Error is the error type returned by this package: what went wrong (Err,
// one of the sentinels), on which object and side, at which path.
type Error struct {
	// Object is the object being compared.
	Object Object
	// Side is "current", "desired" or "" when both are concerned.
	Side string
	// Path is the readable path of the offending value ("" for the root).
	Path string
	// Err is the sentinel (or an underlying error wrapping one).
	Err error
	// Detail is a human explanation.
	Detail string
}

// Error names the object and the field path, then the cause.
func (e *Error) Error() string {
	msg := e.Object.String()
	if e.Side != "" {
		msg += " (" + e.Side + ")"
	}
	if e.Path != "" {
		msg += " at " + cutPath(e.Path)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Detail != "" {
		msg += ": " + cutPath(e.Detail)
	}
	if msg == "" {
		return "diff: error"
	}
	return msg
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func newErr(obj Object, side, path string, err error, format string, args ...any) *Error {
	return &Error{Object: obj, Side: side, Path: path, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// maxPath is how much of a path an error message shows: a cyclic or very
// deep value is refused at a path of a thousand segments.
const maxPath = 256

// cutPath keeps the start and the end of a long path (or detail).
func cutPath(p string) string {
	if len(p) <= maxPath {
		return p
	}
	return p[:maxPath/2] + fmt.Sprintf(" ...(%d bytes)... ", len(p)) + p[len(p)-maxPath/2:]
}
