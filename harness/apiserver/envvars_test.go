package apiserver_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// TestTheMakefileSetsTheEnvVars: `make unit` sets SkipEnvVar, `make test`
// and CI set RequireEnvVar, by these names. The root module's
// TestREADMEFirstSteps checks the Makefile by the same names, spelled
// out there because the root module does not depend on this one.
func TestTheMakefileSetsTheEnvVars(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	require.Contains(t, string(mk), apiserver.SkipEnvVar+"=1")
	require.Contains(t, string(mk), apiserver.RequireEnvVar+"=1")
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	require.NoError(t, err)
	require.Contains(t, string(ci), "export "+apiserver.RequireEnvVar+"=1")
	root, err := os.ReadFile(filepath.Join("..", "..", "firststeps_test.go"))
	require.NoError(t, err)
	require.Contains(t, string(root), `"`+apiserver.SkipEnvVar+`"`)
	require.Contains(t, string(root), `"`+apiserver.RequireEnvVar+`"`)
}
