// Package memzero tells whether a span of a Go value's memory is all zero
// bytes: Bytes a word at a time, Long for long spans that are mostly zero.
// It serves the typed walks of diff and drift, which read fields at
// offsets their cached type plans hold; it is not for values whose zero is
// not all zero bytes (floats' -0, strings with a non-nil data pointer):
// those callers check such fields by kind (diff's zero masks).
package memzero

import (
	"bytes"
	"encoding/binary"
	"unsafe"
)

// Bytes reports whether the n bytes at p are all zero. p must point into a
// live Go value of at least n bytes.
func Bytes(p unsafe.Pointer, n uintptr) bool {
	b := unsafe.Slice((*byte)(p), n)
	// Four words at a time: nested zero structs (a KubeadmConfig's unset
	// sections) run to hundreds of bytes.
	for len(b) >= 32 {
		if binary.NativeEndian.Uint64(b)|binary.NativeEndian.Uint64(b[8:])|
			binary.NativeEndian.Uint64(b[16:])|binary.NativeEndian.Uint64(b[24:]) != 0 {
			return false
		}
		b = b[32:]
	}
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Long is Bytes for spans that are long (hundreds of bytes) and mostly
// zero, such as a large struct's unset sections: after the first words,
// the rest is compared with a zero page by the runtime's vector code,
// several times faster than words. For short or mostly non-zero spans,
// where the call costs more than it saves, use Bytes.
func Long(p unsafe.Pointer, n uintptr) bool {
	if n < 256 {
		return Bytes(p, n)
	}
	b := unsafe.Slice((*byte)(p), n)
	// A span that is not zero mostly says so in its first words.
	if binary.NativeEndian.Uint64(b)|binary.NativeEndian.Uint64(b[8:])|
		binary.NativeEndian.Uint64(b[16:])|binary.NativeEndian.Uint64(b[24:]) != 0 {
		return false
	}
	for b = b[32:]; len(b) > len(zeros); b = b[len(zeros):] {
		if !bytes.Equal(b[:len(zeros)], zeros[:]) {
			return false
		}
	}
	return bytes.Equal(b, zeros[:len(b)])
}

// zeros is what Long compares spans with.
var zeros [4096]byte
