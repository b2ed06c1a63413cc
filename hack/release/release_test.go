package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsumerGetsTheRelease releases a clone of the repository at a test
// version into a file-based proxy (hack/release.sh -proxy), every module
// tagged, then, from a new module outside the repository, `go get`s the
// root and the nested amiselect/aws module at that version through it (the
// rest of the dependencies through the usual proxy) and builds and runs a
// program using both: the nested module's require of the root resolves,
// and none of the Cluster API runtime side comes with them. Then it gets
// the strategy/capi, simulator and harness modules and runs the README's
// tour there (examples/tour, copied as a user would).
func TestConsumerGetsTheRelease(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("not in a git repository: %v", err)
	}
	tmp := t.TempDir()
	clone := filepath.Join(tmp, "repo")
	sh(t, "", nil, "git", "clone", "--quiet", strings.TrimSpace(string(top)), clone)
	sh(t, clone, nil, "git", "config", "user.email", "release-test@example.invalid")
	sh(t, clone, nil, "git", "config", "user.name", "release test")
	// A version of its own per run: the module cache keeps what it once
	// downloaded for a version for ever, so a fixed one would have a
	// later run test an earlier run's release.
	version := fmt.Sprintf("v0.1.0-releasetest.%d", time.Now().UnixNano())
	proxy := filepath.Join(tmp, "proxy")
	ccRepo := filepath.Join(tmp, "clusterctl")
	sh(t, clone, nil, "hack/release.sh", "-proxy", proxy, "-clusterctl", ccRepo, version)
	for _, f := range []string{"metadata.yaml", "runtime-extension-components.yaml"} {
		if _, err := os.Stat(filepath.Join(ccRepo, "runtime-extension-upgradekit", version, f)); err != nil {
			t.Fatalf("hack/release.sh -clusterctl: %v", err)
		}
	}

	tags := sh(t, clone, nil, "git", "tag", "--points-at", "HEAD")
	nestedModules := []string{"amiselect/aws", "karpenter", "examples/drift-explain", "examples", "harness", "internal/entrypoints",
		"nodeexec/drain", "nodeexec/nodepod", "simulator", "strategy/capi"}
	wantTags := []string{version}
	for _, m := range nestedModules {
		wantTags = append(wantTags, m+"/"+version)
	}
	for _, want := range wantTags {
		if !strings.Contains(tags, want) {
			t.Fatalf("tag %s missing; HEAD has %q", want, tags)
		}
	}
	nested, err := os.ReadFile(filepath.Join(clone, "amiselect/aws/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(nested), "github.com/upgradekit/upgradekit "+version) {
		t.Fatalf("amiselect/aws/go.mod does not require the root at %s:\n%s", version, nested)
	}

	// A nested module that uses another nested one requires both at the
	// version.
	de, err := os.ReadFile(filepath.Join(clone, "examples/drift-explain/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"github.com/upgradekit/upgradekit " + version, "github.com/upgradekit/upgradekit/karpenter " + version} {
		if !strings.Contains(string(de), want) {
			t.Fatalf("examples/drift-explain/go.mod does not require %s:\n%s", want, de)
		}
	}

	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(consumer, "go.mod"), "module example.com/consumer\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(consumer, "main.go"), `package main

import (
	"fmt"

	"github.com/upgradekit/upgradekit/amiselect/aws"
	"github.com/upgradekit/upgradekit/diff"
)

func main() {
	cs, err := diff.Machines(
		diff.State{Machine: map[string]any{"kind": "Machine", "spec": map[string]any{"version": "v1.30.4"}}},
		diff.State{Machine: map[string]any{"kind": "Machine", "spec": map[string]any{"version": "v1.31.1"}}})
	if err != nil {
		panic(err)
	}
	fmt.Println(cs.Categories(), aws.ErrNoClient != nil)
}
`)
	upstream := strings.TrimSpace(sh(t, "", nil, "go", "env", "GOPROXY"))
	env := []string{"GOPROXY=file://" + proxy + "," + upstream, "GONOSUMDB=github.com/upgradekit", "GOFLAGS=-mod=mod", "GOWORK=off"}
	sh(t, consumer, env, "go", "get", "github.com/upgradekit/upgradekit@"+version, "github.com/upgradekit/upgradekit/amiselect/aws@"+version)
	// Only what the program imports: the core module and its AWS adapter;
	// none of the Cluster API runtime side's modules (ARCHITECTURE.md,
	// "Modules").
	for _, m := range strings.Fields(sh(t, consumer, env, "go", "list", "-m", "-f", "{{.Path}}", "all")) {
		if m == "sigs.k8s.io/controller-runtime" || m == "github.com/upgradekit/upgradekit/strategy/capi" {
			t.Fatalf("a program importing diff and amiselect/aws has %s in its module graph", m)
		}
	}
	if got := strings.TrimSpace(sh(t, consumer, env, "go", "list", "-m", "-f", "{{.Version}}", "github.com/upgradekit/upgradekit")); got != version {
		t.Fatalf("the consumer resolved github.com/upgradekit/upgradekit %s, want %s", got, version)
	}
	if out := sh(t, consumer, env, "go", "run", "."); strings.TrimSpace(out) != "[KubernetesVersion] true" {
		t.Fatalf("consumer printed %q", out)
	}

	// The README's tour, as a user copies it: examples/tour's steps and
	// their examples (whose output the README shows), including the
	// extension embedded in a manager and served against envtest, built
	// and run in the consumer module from the released module alone.
	tourDir := filepath.Join(consumer, "tour")
	if err := os.MkdirAll(tourDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"doc.go", "tour.go", "tour_test.go"} {
		b, err := os.ReadFile(filepath.Join(clone, "examples", "tour", name))
		if err != nil {
			t.Fatal(err)
		}
		src := strings.ReplaceAll(string(b), `"github.com/upgradekit/upgradekit/examples/tour"`, `"example.com/consumer/tour"`)
		writeFile(t, filepath.Join(tourDir, name), src)
	}
	// And the README's other two snippets: a test on the Cluster API
	// harness (harness/clusterapi) and one on envtest, without the checks that
	// compare them with the README, which is not there.
	for _, f := range []struct{ from, dir, cut string }{
		{"harness/clusterapi/readme_test.go", "harness", "// TestREADMEShowsTheHarnessTest"},
		{"harness/apiserver/readme_test.go", "integration", ""},
	} {
		b, err := os.ReadFile(filepath.Join(clone, f.from))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if f.cut != "" {
			i := strings.Index(src, f.cut)
			if i < 0 {
				t.Fatalf("%s has no %q", f.from, f.cut)
			}
			src = src[:i] // goimports below drops the imports only that check used
		}
		if err := os.MkdirAll(filepath.Join(consumer, f.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(consumer, f.dir, filepath.Base(f.from)), src)
	}
	sh(t, consumer, env, "go", "run", "golang.org/x/tools/cmd/goimports@v0.39.0", "-w", "harness")
	// The tour and the harness tests use the Cluster API runtime side, the
	// simulator and the harnesses: each its own module, at the version.
	sh(t, consumer, env, "go", "get", "github.com/upgradekit/upgradekit/strategy/capi@"+version,
		"github.com/upgradekit/upgradekit/simulator@"+version, "github.com/upgradekit/upgradekit/harness@"+version)
	out := sh(t, consumer, env, "go", "test", "-count=1", "-v", "./tour/", "./harness/", "./integration/")
	for _, want := range []string{"--- PASS: ExampleWhatChanged", "--- PASS: ExamplePlanRollout", "--- PASS: ExampleSimulate", "TestAddExtension",
		"TestMyExtensionUnderClusterAPI", "TestMyController"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the tour in the consumer module: no %q in\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "--- ") {
			t.Log("consumer:", line)
		}
	}
}

func sh(t *testing.T, dir string, env []string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
