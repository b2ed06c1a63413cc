package clusterapi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// EnvKeepLogs, when set to a directory, makes StartForTest keep each
// test's manager logs in <dir>/<test name>/ instead of a temporary
// directory removed when the test ends.
const EnvKeepLogs = "UPGRADEKIT_CAPITEST_LOGS"

// StartForTest starts the managers for t against env and stops them in
// t.Cleanup, logging each manager's log path. The managers come from
// EnvManagers when set; otherwise they are built with
// hack/capi-managers.sh from this module's source tree (cached by version),
// unless apiserver.SkipEnvVar is set (and apiserver.RequireEnvVar not), which
// skips t.
func StartForTest(t testing.TB, env *apiserver.Env, opts ...Option) *Managers {
	t.Helper()
	dir := os.Getenv(EnvManagers)
	if dir == "" {
		if os.Getenv(apiserver.SkipEnvVar) != "" && os.Getenv(apiserver.RequireEnvVar) == "" {
			t.Skipf("%s is set: skipping a test that needs Cluster API's managers (build them with hack/capi-managers.sh and set %s)", apiserver.SkipEnvVar, EnvManagers)
		}
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "capi-managers.sh")
		var stderr bytes.Buffer
		cmd := exec.Command(script)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("building Cluster API's managers with %s: %v\n%s", script, err, stderr.String())
		}
		dir = strings.TrimSpace(string(out))
	}
	if keep := os.Getenv(EnvKeepLogs); keep != "" {
		logDir := filepath.Join(keep, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		opts = append([]Option{WithLogDir(logDir)}, opts...)
	}
	m, err := Start(t.Context(), env, dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for mgr, p := range m.logs {
		t.Logf("%s logs to %s", mgr, p)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for mgr, p := range m.logs {
				t.Logf("%s, last lines of its log:\n%s", mgr, tail(p, 40))
			}
		}
		if err := m.Stop(); err != nil {
			t.Errorf("stopping Cluster API's managers: %v", err)
		}
	})
	return m
}
