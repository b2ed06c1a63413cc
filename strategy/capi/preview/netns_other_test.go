//go:build !linux

package preview_test

import "testing"

// extensionNetwork needs Linux network namespaces (netns_linux_test.go).
func extensionNetwork(t *testing.T) (string, func(func() error) error) {
	t.Helper()
	t.Skip("needs Linux network namespaces")
	return "", nil
}
