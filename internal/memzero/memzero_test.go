package memzero

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestBytes: every length from 0 to 130 (the word loop, the vector
// compare from 64 bytes, the tail) and lengths around the 4 KiB chunks of
// zeros, all zero and with one non-zero byte at each position.
func TestBytes(t *testing.T) {
	lengths := []int{4095, 4096, 4097, 8192, 8193, 12000}
	for n := range 131 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
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
