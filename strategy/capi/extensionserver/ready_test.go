package extensionserver_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// TestStartedChecker: the readiness check fails before Start serves,
// passes once the hooks are served with the certificate of the directory
// (on one address, or on every address), and fails again once Start
// returned.
func TestStartedChecker(t *testing.T) {
	for _, host := range []string{"127.0.0.1", ""} {
		t.Run("host="+host, func(t *testing.T) {
			dir := t.TempDir()
			testcerts.Write(t, dir)
			s, err := extensionserver.New(nil, withMetrics(t, extensionserver.Options{DecideOnly: true,
				Host: host, Port: testcerts.FreePort(t), CertDir: dir}))
			require.NoError(t, err)
			ready := s.StartedChecker()
			check := func() error { return ready(httptest.NewRequest("GET", "/readyz", nil)) }
			require.ErrorContains(t, check(), "the hook server is not serving")

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Start(ctx) }()
			require.Eventually(t, func() bool { return check() == nil }, hangBound, 20*time.Millisecond, "ready while serving")
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(hangBound):
				t.Fatal("Start did not return after its context ended")
			}
			require.ErrorContains(t, check(), "the hook server is not serving", "not ready once stopped")
		})
	}
}
