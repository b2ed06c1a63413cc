package capitest_test

import (
	"testing"

	"github.com/upgradekit/upgradekit/fake/capitest"
	"github.com/upgradekit/upgradekit/fake/envtest"
)

// In a test of your own: a real API server, then Cluster API's managers
// (built once per version by hack/capi-managers.sh) against it.
func Example() {
	t := &testing.T{} // your test's t
	env := envtest.StartForTest(t)
	m := capitest.StartForTest(t, env, capitest.WithManagers(capitest.Core))
	_ = m.LogPath(capitest.Core) // where the core manager logs
}
