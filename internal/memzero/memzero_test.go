package memzero

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestBytes: Bytes and Long for every length from 0 to 300 (the 32- and
// 8-byte strides, the tail, Long's vector compare from 256 bytes) and
// around the 4 KiB chunks of zeros Long compares with, all zero and with
// one non-zero byte at each position.
func TestBytes(t *testing.T) {
	lengths := []int{4095, 4096, 4097, 4128, 4129, 8192, 8224, 8225, 12000}
	for n := range 301 {
		lengths = append(lengths, n)
	}
	for name, zero := range map[string]func(unsafe.Pointer, uintptr) bool{"Bytes": Bytes, "Long": Long} {
		for _, n := range lengths {
			b := make([]byte, n+1) // one byte past the span, never read as part of it
			b[n] = 1
			p := unsafe.Pointer(unsafe.SliceData(b))
			require.True(t, zero(p, uintptr(n)), "%s: %d zero bytes", name, n)
			for i := range n {
				b[i] = 0x80
				require.False(t, zero(p, uintptr(n)), "%s: length %d, byte %d set", name, n, i)
				b[i] = 0
			}
		}
	}
}
