// Package memzero tells whether a span of a Go value's memory is all zero
// bytes. It serves the typed walks of diff and drift,
// which read fields at offsets their cached type plans hold; it is not for
// values whose zero is not all zero bytes (floats' -0, strings with a
// non-nil data pointer): those callers check such fields by kind.
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
	if len(b) >= 64 {
		// Nested zero structs (a KubeadmConfig's unset sections) run to
		// hundreds of bytes: compared with zeros by the runtime's vector
		// code, several times faster than words.
		for len(b) > len(zeros) {
			if !bytes.Equal(b[:len(zeros)], zeros[:]) {
				return false
			}
			b = b[len(zeros):]
		}
		return bytes.Equal(b, zeros[:len(b)])
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

// zeros is what Bytes compares long spans with.
var zeros [4096]byte
