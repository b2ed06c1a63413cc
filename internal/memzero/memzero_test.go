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
