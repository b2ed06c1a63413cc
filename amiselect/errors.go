package amiselect

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Sentinel error kinds. Every error this package returns for bad input wraps
// exactly one of them, so callers can branch with errors.Is and read the
// details with errors.As on *Error or *NoImagesError.
var (
	// ErrInvalidTerm marks a selector term that breaks Karpenter's term rules.
	ErrInvalidTerm = errors.New("invalid AMI selector term")
	// ErrInvalidAlias marks an alias that is not "family@version" in
	// Karpenter's accepted form.
	ErrInvalidAlias = errors.New("invalid AMI alias")
	// ErrInvalidFamily marks an unknown AMI family, or an amiFamily that
	// disagrees with the alias.
	ErrInvalidFamily = errors.New("invalid AMI family")
	// ErrInvalidKubernetesVersion marks a Kubernetes version that is not
	// "1.N" (a leading "v" and a patch number are tolerated).
	ErrInvalidKubernetesVersion = errors.New("invalid Kubernetes version")
	// ErrUnsupported marks a family that exists but is refused for the
	// requested Kubernetes version (AL2 on >= 1.33, Windows2025 on < 1.35).
	ErrUnsupported = errors.New("AMI family not supported for this Kubernetes version")
	// ErrNoImages marks a resolution that selected no image at all.
	ErrNoImages = errors.New("no images")
	// ErrParameterNotFound is what an ImageSource returns (wrapped or not)
	// when an SSM parameter does not exist. Resolve skips such parameters
	// and records why; any other GetParameter error aborts the resolution.
	ErrParameterNotFound = errors.New("SSM parameter not found")
	// ErrInvalidCatalog marks catalog JSON or catalog images that cannot be
	// loaded.
	ErrInvalidCatalog = errors.New("invalid image catalog")
	// ErrInvalidQuery marks a Query an ImageSource cannot evaluate, such as
	// an unknown filter name.
	ErrInvalidQuery = errors.New("invalid image query")
	// ErrInvalidSource marks a missing (nil) ImageSource, or a source
	// that panicked while other callers were waiting for its answer.
	ErrInvalidSource = errors.New("invalid image source")
	// ErrNotConvertible marks a v1beta1 node class that has no v1 equivalent.
	ErrNotConvertible = errors.New("cannot convert v1beta1 AMI selection")
)

// Error is the typed error for bad input. Path names the offending field in
// the Karpenter spelling ("amiSelectorTerms[2].id", "amiFamily",
// "Images[3].CreationDate"), Index is the selector term index or -1, Field
// is the field name within the term (or the whole Path when there is no
// term), Value is the offending value and Reason says what is wrong and, where
// there is one, what to do instead. Kind is one of the sentinel errors above
// and is what errors.Is matches.
type Error struct {
	// Kind is the sentinel error this error matches with errors.Is.
	Kind error
	// Path names the offending field ("amiSelectorTerms[2].id", "src").
	Path string
	// Index is the selector term index, or -1.
	Index int
	// Field is the field within the term, or the whole Path.
	Field string
	// Value is the offending value, if any.
	Value string
	// Reason says what is wrong and what to do instead.
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	}
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	if e.Value != "" {
		b.WriteString(" ")
		b.WriteString(errtext.Quote(e.Value))
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if b.Len() == 0 {
		return "amiselect: error"
	}
	if b.Len() > 16*errtext.MaxQuoted {
		return fmt.Sprintf("%s... (%d bytes)", b.String()[:16*errtext.MaxQuoted], b.Len())
	}
	return b.String()
}

// Unwrap returns the sentinel kind so errors.Is works.
func (e *Error) Unwrap() error { return e.Kind }

func termError(kind error, index int, field, value, reason string) *Error {
	return &Error{
		Kind:   kind,
		Path:   fmt.Sprintf("amiSelectorTerms[%d].%s", index, field),
		Index:  index,
		Field:  field,
		Value:  value,
		Reason: reason,
	}
}

func fieldError(kind error, path, value, reason string) *Error {
	return &Error{Kind: kind, Path: path, Index: -1, Field: path, Value: value, Reason: reason}
}

// NoImagesError is returned by Resolve when no image was selected. Unmatched
// lists, for every term, why it contributed nothing (matched no image, its SSM
// parameter was missing, every match was too young, not in the pinned
// resolution, ...). It matches ErrNoImages with errors.Is.
type NoImagesError struct {
	// Unmatched says, per term, why it contributed nothing.
	Unmatched []Skip
}

// Error implements error.
func (e *NoImagesError) Error() string {
	var b strings.Builder
	b.WriteString(ErrNoImages.Error())
	b.WriteString(": no selector term matched an eligible image")
	for i, s := range e.Unmatched {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// Unwrap returns ErrNoImages.
func (e *NoImagesError) Unwrap() error { return ErrNoImages }

// nilSourceError is the error for a nil ImageSource given to (or held by)
// caller.
// isNilSource reports whether src is nil or a typed nil pointer (a nil
// *Catalog in an ImageSource).
func isNilSource(src ImageSource) bool {
	if src == nil {
		return true
	}
	v := reflect.ValueOf(src)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func nilSourceError(caller string) *Error {
	return &Error{Kind: ErrInvalidSource, Path: "src", Index: -1, Field: "src",
		Reason: caller + " needs a non-nil ImageSource"}
}
