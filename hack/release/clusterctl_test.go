package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestClusterctlRepository writes two versions' clusterctl repository
// files from the repository's kustomize base: the components carry
// clusterctl's variables and only objects clusterctl can install as one
// provider, and each version's metadata lists the release series of the
// versions before it (clusterctl upgrade refuses a repository whose
// latest metadata does not). examples/inplace-extension's
// TestClusterctlRuntimeExtension installs them with clusterctl itself.
func TestClusterctlRepository(t *testing.T) {
	out := t.TempDir()
	for _, v := range []string{"v0.1.0", "v0.2.0-rc.1"} {
		var stderr bytes.Buffer
		if rc := run([]string{"clusterctl", "-repo", "../..", "-version", v, "-out", out}, &stderr); rc != 0 {
			t.Fatalf("release clusterctl %s: exit %d\n%s", v, rc, stderr.String())
		}
	}
	dir := filepath.Join(out, "runtime-extension-upgradekit", "v0.2.0-rc.1")
	meta, err := os.ReadFile(filepath.Join(dir, "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Kind          string
		ReleaseSeries []struct {
			Major, Minor int
			Contract     string
		} `json:"releaseSeries"`
	}
	if err := yaml.Unmarshal(meta, &m); err != nil {
		t.Fatal(err)
	}
	got := map[[2]int]string{}
	for _, s := range m.ReleaseSeries {
		got[[2]int{s.Major, s.Minor}] = s.Contract
	}
	if m.Kind != "Metadata" || got[[2]int{0, 1}] != "v1beta2" || got[[2]int{0, 2}] != "v1beta2" {
		t.Fatalf("metadata.yaml lacks the 0.1 and 0.2 series (contract v1beta2):\n%s", meta)
	}

	comp, err := os.ReadFile(filepath.Join(dir, "runtime-extension-components.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// clusterctl's variable syntax (drone/envsubst).
	vars := map[string]bool{}
	for _, g := range regexp.MustCompile(`\$\{([A-Z0-9_]+)`).FindAllStringSubmatch(string(comp), -1) {
		vars[g[1]] = true
	}
	for _, v := range []string{varExtensionImage, varUpgraderImage, varUpgraderImages, varNamespace} {
		if !vars[v] {
			t.Errorf("no ${%s} in the components", v)
		}
	}
	if strings.Contains(string(comp), "sha256:0000000000000000000000000000000000000000000000000000000000000000") {
		t.Error("the components keep a placeholder digest instead of a variable")
	}
	// One namespace: clusterctl moves every namespaced object of a
	// provider into the provider's.
	for _, doc := range strings.Split(string(comp), "\n---\n") {
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if obj.Metadata.Namespace != "" && obj.Metadata.Namespace != "upgradekit-system" {
			t.Errorf("%s %s in namespace %s", obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace)
		}
		if obj.Kind == "ClusterRole" && !strings.HasPrefix(obj.Metadata.Name, "${"+varNamespace+":=upgradekit-system}-") {
			t.Errorf("ClusterRole %s is not named after the provider's namespace: clusterctl delete would leave it", obj.Metadata.Name)
		}
	}
}

func TestClusterctlUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"clusterctl", "-h"}, 0},
		{[]string{"clusterctl", "-out", "x"}, 2},
		{[]string{"clusterctl", "-version", "1.0", "-out", "x"}, 2},
		{[]string{"clusterctl", "-version", "v1.0.0"}, 2},
		{[]string{"clusterctl", "-version", "v1.0.0", "-out", "x", "extra"}, 2},
		{[]string{"clusterctl", "-nope"}, 2},
	} {
		if got := run(tc.args, &bytes.Buffer{}); got != tc.want {
			t.Errorf("release %s: exit %d, want %d", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}
