package drift

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// EncodingVersion identifies this package's canonical encoding and hash
// function. It is part of every Hash's Version, so if a future release
// changes the encoding, every stamped object sees a version change (re-stamp,
// never drift) instead of a hash change (mass drift). The golden vectors in
// testdata pin the encoding for this value.
const EncodingVersion = "uk1"

// Hash is a versioned hash of a desired spec.
type Hash struct {
	// Version is the hasher's version: the caller's version, "+", and
	// EncodingVersion (e.g. "v1+uk1"). Hashes are only comparable when
	// their versions are equal.
	Version string
	// Value is the 64-bit hash (xxHash64 of the canonical encoding).
	Value uint64
}

// String returns the value as 16 lower-case hex digits, the form stored in
// the hash annotation.
func (h Hash) String() string {
	var b [16]byte
	var v [8]byte
	for i := range 8 {
		v[i] = byte(h.Value >> (56 - 8*i))
	}
	hex.Encode(b[:], v[:])
	return string(b[:])
}

// IsZero reports whether h is the zero Hash (no version).
func (h Hash) IsZero() bool { return h.Version == "" }

// parseHash parses the annotation form of a hash value (16 hex digits) and
// pairs it with version. Errors wrap ErrInvalidAnnotation.
func parseHash(version, value string) (Hash, error) {
	if err := validateVersion(version); err != nil {
		return Hash{}, fmt.Errorf("%w: version %s: %v", ErrInvalidAnnotation, errtext.Quote(version), err)
	}
	if len(value) != 16 {
		return Hash{}, fmt.Errorf("%w: hash %s is not 16 hex digits", ErrInvalidAnnotation, errtext.Quote(value))
	}
	for i := 0; i < len(value); i++ {
		c := value[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Hash{}, fmt.Errorf("%w: hash %s is not 16 lower-case hex digits", ErrInvalidAnnotation, errtext.Quote(value))
		}
	}
	u, err := strconv.ParseUint(value, 16, 64)
	if err != nil {
		return Hash{}, fmt.Errorf("%w: hash %q: %v", ErrInvalidAnnotation, value, err)
	}
	return Hash{Version: version, Value: u}, nil
}

// validateVersion accepts 1-63 characters of [A-Za-z0-9._+-].
func validateVersion(v string) error {
	if v == "" || len(v) > 63 {
		return fmt.Errorf("must be 1 to 63 characters")
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '+') {
			return fmt.Errorf("character %q not allowed", c)
		}
	}
	return nil
}

// Hasher computes stable, versioned hashes of specs: typed Go values,
// unstructured objects and JSON-decoded maps. A typed struct and its
// unstructured form hash equal, because hashing goes through JSON field
// names. A Hasher is safe for concurrent use. Construct it with NewHasher:
// the zero Hasher (and a nil *Hasher) returns ErrInvalidOption.
type Hasher struct {
	version string
	cfg     config
	pool    sync.Pool
	// last is the plan of the pointer type hashed last: a Hasher mostly
	// hashes one kind of object, and this saves the plan cache's lookup.
	last atomic.Pointer[plan]
}

// maxVersionLen is the longest version NewHasher accepts: the full
// version (version + "+" + EncodingVersion) must fit in 63 characters.
const maxVersionLen = 63 - 1 - len(EncodingVersion)

// NewHasher returns a Hasher. version names the caller's hashing scheme
// (which fields, which options) and must change whenever the options or the
// meaning of the hashed spec change; it is 1 to 59 characters of
// [A-Za-z0-9._-] ('+' is reserved as the separator). The resulting
// Hash.Version is version + "+" + EncodingVersion. Errors wrap
// ErrInvalidOption.
func NewHasher(version string, opts ...Option) (*Hasher, error) {
	if err := validateVersion(version); err != nil {
		return nil, fmt.Errorf("%w: version %s: %v", ErrInvalidOption, errtext.Quote(version), err)
	}
	if strings.Contains(version, "+") {
		return nil, fmt.Errorf("%w: version %q: '+' is reserved as the separator from the encoding version", ErrInvalidOption, version)
	}
	if len(version) > maxVersionLen {
		return nil, fmt.Errorf("%w: version %q is longer than %d characters", ErrInvalidOption, version, maxVersionLen)
	}
	full := version + "+" + EncodingVersion
	h := &Hasher{version: full}
	h.cfg.root = &pathNode{}
	if err := Options(opts).apply(&h.cfg); err != nil {
		return nil, err
	}
	h.cfg.root.finalize()
	if h.cfg.root.empty() {
		h.cfg.root = nil
	}
	h.pool.New = func() any {
		return &encoder{buf: make([]byte, 0, 1024), tmp: make([]byte, 0, 64)}
	}
	return h, nil
}

// Version returns the version every Hash from h carries ("" for a Hasher
// not made by NewHasher).
func (h *Hasher) Version() string {
	if h == nil {
		return ""
	}
	return h.version
}

// errNotConstructed is returned by the methods of a Hasher not made by
// NewHasher.
var errNotConstructed = fmt.Errorf("%w: Hasher not constructed with NewHasher", ErrInvalidOption)

func (h *Hasher) valid() bool { return h != nil && h.version != "" && h.pool.New != nil }

// Hash hashes v. Pass pointers to large structs: a struct passed by value
// is copied once. Errors are *PathError values wrapping ErrUnhashable (the message
// says why) or (a bug) ErrInternal; a
// Hasher not made by NewHasher returns ErrInvalidOption.
func (h *Hasher) Hash(v any) (Hash, error) {
	if !h.valid() {
		return Hash{}, errNotConstructed
	}
	e := h.pool.Get().(*encoder)
	defer h.put(e)
	sum, err := h.run(e, v, false)
	if err != nil {
		return Hash{}, err
	}
	return Hash{Version: h.version, Value: sum}, nil
}

// Fingerprint hashes v and also returns its field fingerprints (see
// Fingerprints), keeping at most maxFields of them (<= 0 means
// 64).
func (h *Hasher) Fingerprint(v any, maxFields int) (Hash, Fingerprints, error) {
	if !h.valid() {
		return Hash{}, Fingerprints{}, errNotConstructed
	}
	e := h.pool.Get().(*encoder)
	defer h.put(e)
	sum, err := h.run(e, v, true)
	if err != nil {
		return Hash{}, Fingerprints{}, err
	}
	return Hash{Version: h.version, Value: sum}, newFingerprints(h.version, e.fps, maxFields), nil
}

func (h *Hasher) put(e *encoder) {
	if cap(e.buf) > 1<<20 || cap(e.sa) > 1<<14 {
		return
	}
	clear(e.sa[:cap(e.sa)])
	e.fps = e.fps[:0]
	h.pool.Put(e)
}

func (h *Hasher) run(e *encoder, v any, record bool) (sum uint64, err error) {
	defer recoverInternal(&err)
	e.reset(&h.cfg)
	if record {
		e.level = 1
	}
	root := h.cfg.root
	set := h.cfg.slicesAsSets || (root != nil && root.set)
	if v != nil {
		rv := reflect.ValueOf(v)
		k := rv.Kind()
		if t := rv.Type(); k == reflect.Pointer && !e.cfg.keepZero && !e.cfg.noMemWalk && t != typPtrUnstructured {
			// The usual case, a pointer to a typed spec: walk it in
			// memory. (anyValue reads a *unstructured.Unstructured's
			// map itself.)
			p := h.last.Load()
			if p == nil || p.typ != t {
				p = planFor(t)
				h.last.Store(p)
			}
			if p.mem == memPtr || p.mem == memPtrScalar {
				if _, err := e.pointeeAt(rv.UnsafePointer(), p, root, set); err != nil {
					return 0, finishError(err)
				}
				return xxhash.Sum64(e.buf), nil
			}
		}
		if k == reflect.Struct || k == reflect.Array {
			// Make the value addressable, so pointer-receiver marshalers
			// see it exactly as they would through a pointer.
			cp := reflect.New(rv.Type()).Elem()
			cp.Set(rv)
			if _, err := e.value(cp, planFor(cp.Type()), root, set); err != nil {
				return 0, finishError(err)
			}
			return xxhash.Sum64(e.buf), nil
		}
	}
	if _, err := e.anyValue(v, root, set); err != nil {
		return 0, finishError(err)
	}
	return xxhash.Sum64(e.buf), nil
}

// recoverInternal turns a panic into an ErrInternal error in *err. Panics
// of user methods are caught where they are called (callMarshalJSON and
// friends), so what reaches here is a bug in this package.
func recoverInternal(err *error) {
	if r := recover(); r != nil {
		*err = &PathError{Err: fmt.Errorf("%w: panic while hashing: %v", ErrInternal, r)}
	}
}
