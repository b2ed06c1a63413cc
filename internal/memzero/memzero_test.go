package memzero

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestBytes: every length from 0 to 100 (the 32- and 8-byte strides and
// the tail), all zero and with one non-zero byte at each position.
func TestBytes(t *testing.T) {
	for n := range 101 {
		b := make([]byte, n+1) // one byte past the span, never read as part of it
		b[n] = 1
		p := unsafe.Pointer(unsafe.SliceData(b))
		require.True(t, Bytes(p, uintptr(n)), "%d zero bytes", n)
		for i := range n {
			b[i] = 0x80
			require.False(t, Bytes(p, uintptr(n)), "length %d, byte %d set", n, i)
			b[i] = 0
		}
	}
}

// TestLong: Long answers as Bytes for every length from 0 to 300 and
// around the 4 KiB chunks of zeros it compares with, all zero and with one
// non-zero byte at each position.
func TestLong(t *testing.T) {
	lengths := []int{4095, 4096, 4097, 4128, 4129, 8192, 8224, 8225, 12000}
	for n := range 301 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		b := make([]byte, n+1) // one byte past the span, never read as part of it
		b[n] = 1
		p := unsafe.Pointer(unsafe.SliceData(b))
		require.True(t, Long(p, uintptr(n)), "%d zero bytes", n)
		for i := range n {
			b[i] = 0x80
			require.False(t, Long(p, uintptr(n)), "length %d, byte %d set", n, i)
			b[i] = 0
		}
	}
}
