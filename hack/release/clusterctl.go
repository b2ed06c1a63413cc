package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/mod/semver"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The clusterctl repository of the in-place extension, as a runtime
// extension provider (clusterctl's RuntimeExtensionProvider type): clusterctl
// names the provider's label runtime-extension-<name> and reads
// <label>/<version>/runtime-extension-components.yaml and metadata.yaml
// from a local repository, or the two files from a release.
const (
	providerName   = "upgradekit"
	providerLabel  = "runtime-extension-" + providerName
	componentsFile = "runtime-extension-components.yaml"
	metadataFile   = "metadata.yaml"
	// deployDir is the extension's kustomize base, the components' source.
	deployDir = "examples/inplace-extension/deploy"
	// contract is the Cluster API contract the extension is built for
	// (sigs.k8s.io/cluster-api/api v1beta2 types).
	contract = "v1beta2"
)

// The clusterctl variables of the components. clusterctl substitutes them
// from the environment or its clusterctl.yaml; one without a default must
// be set.
const (
	// varExtensionImage is the extension's image, by digest.
	varExtensionImage = "UPGRADEKIT_EXTENSION_IMAGE"
	// varUpgraderImage is the upgrader image of every update (the
	// container's UPGRADER_IMAGE env, read by -upgrader-image).
	varUpgraderImage = "UPGRADEKIT_UPGRADER_IMAGE"
	// varUpgraderImages is one upgrader image per Kubernetes version
	// (UPGRADER_IMAGES, read by -upgrader-images).
	varUpgraderImages = "UPGRADEKIT_UPGRADER_IMAGES"
	// varNamespace is the namespace the extension runs in.
	varNamespace = "UPGRADEKIT_NAMESPACE"
)

// runClusterctl writes the clusterctl repository files of one version:
//
//	release clusterctl -repo DIR -version vX.Y.Z -out REPODIR
//
// writes REPODIR/runtime-extension-upgradekit/vX.Y.Z/{runtime-extension-components.yaml,metadata.yaml}
// from the kustomize base in DIR. metadata.yaml lists the release series
// of the version, of the repository's release tags and of the versions
// already in REPODIR: clusterctl upgrade refuses a repository whose
// metadata misses the series of an installed or available version.
func runClusterctl(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("release clusterctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", ".", "repository root (its work tree is read)")
	version := fs.String("version", "", "version, vX.Y.Z[-pre]")
	out := fs.String("out", "", "clusterctl repository directory to write")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !semver.IsValid(*version) || semver.Build(*version) != "" || *out == "" || fs.NArg() != 0 {
		fmt.Fprintf(stderr, "release clusterctl: need -version vX.Y.Z[-pre] (got %q) and -out, no arguments\n", *version)
		return 2
	}
	components, dropped, err := clusterctlComponents(filepath.Join(*repo, deployDir))
	if err != nil {
		fmt.Fprintf(stderr, "release clusterctl: %v\n", err)
		return 1
	}
	for _, d := range dropped {
		fmt.Fprintf(stderr, "release clusterctl: left out %s: clusterctl would move it into the provider's namespace (bind it in each cluster namespace yourself)\n", d)
	}
	series, err := releaseSeries(*repo, *out, *version)
	if err != nil {
		fmt.Fprintf(stderr, "release clusterctl: %v\n", err)
		return 1
	}
	dir := filepath.Join(*out, providerLabel, *version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "release clusterctl: %v\n", err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, componentsFile), components, 0o644); err != nil {
		fmt.Fprintf(stderr, "release clusterctl: %v\n", err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, metadataFile), metadata(series), 0o644); err != nil {
		fmt.Fprintf(stderr, "release clusterctl: %v\n", err)
		return 1
	}
	return 0
}

// clusterctlComponents builds the kustomize base in dir with kustomize's
// own library and turns it into clusterctl components: the images and the
// namespace become clusterctl variables, set on fields addressed by name
// (the container "extension", its env UPGRADER_IMAGE and UPGRADER_IMAGES,
// the ExtensionConfig's service), and the ClusterRoles are named
// <namespace>-<name>, which clusterctl delete needs. Namespaced objects outside the base's
// own namespace (the RoleBindings in cluster namespaces) are left out and
// returned by kind/namespace/name: clusterctl puts every namespaced object
// of a provider into the provider's namespace.
func clusterctlComponents(dir string) ([]byte, []string, error) {
	mem := filesys.MakeFsInMemory()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		if err := mem.WriteFile("/base/"+e.Name(), b); err != nil {
			return nil, nil, err
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/base")
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var objs []map[string]any
	ns := ""
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, m)
		if r.GetKind() == "Namespace" {
			if ns != "" {
				return nil, nil, fmt.Errorf("%s: two Namespaces (%s, %s); a clusterctl provider has one", dir, ns, r.GetName())
			}
			ns = r.GetName()
		}
	}
	if ns == "" {
		return nil, nil, fmt.Errorf("%s: no Namespace object: clusterctl takes the provider's default namespace from it", dir)
	}
	nsVar := "${" + varNamespace + ":=" + ns + "}"
	// clusterctl delete removes a provider's cluster-scoped objects only
	// if their name starts with "<provider namespace>-"
	// (cluster/components.go Delete): the ClusterRoles get that prefix,
	// and the bindings kept follow them.
	renamed := map[string]string{}
	for _, m := range objs {
		if m["kind"] == "ClusterRole" {
			meta, _ := m["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			renamed[name] = nsVar + "-" + name
			meta["name"] = renamed[name]
		}
	}
	var kept []map[string]any
	var dropped []string
	found := map[string]bool{}
	for _, m := range objs {
		kind, _ := m["kind"].(string)
		meta, _ := m["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		objNS, _ := meta["namespace"].(string)
		if objNS != "" && objNS != ns {
			dropped = append(dropped, kind+"/"+objNS+"/"+name)
			continue
		}
		switch kind {
		case "RoleBinding", "ClusterRoleBinding":
			if ref, ok := dig(m, "roleRef"); ok && ref["kind"] == "ClusterRole" {
				if n, ok := renamed[ref["name"].(string)]; ok {
					ref["name"] = n
				}
			}
		case "Namespace":
			meta["name"] = nsVar
		case "Deployment":
			if err := setDeployment(m, found); err != nil {
				return nil, nil, fmt.Errorf("the Deployment %s: %w", name, err)
			}
		case "ExtensionConfig":
			svc, ok := dig(m, "spec", "clientConfig", "service")
			if !ok {
				return nil, nil, fmt.Errorf("the ExtensionConfig %s has no spec.clientConfig.service", name)
			}
			svc["namespace"] = nsVar
			if ann, ok := meta["annotations"].(map[string]any); ok {
				for k, v := range ann {
					if s, ok := v.(string); ok && strings.HasPrefix(s, ns+"/") {
						ann[k] = nsVar + strings.TrimPrefix(s, ns)
					}
				}
			}
			found["ExtensionConfig"] = true
		}
		kept = append(kept, m)
	}
	for _, want := range []string{"container extension", "env UPGRADER_IMAGE", "env UPGRADER_IMAGES", "ExtensionConfig"} {
		if !found[want] {
			return nil, nil, fmt.Errorf("%s: no %s to set a clusterctl variable on", dir, want)
		}
	}
	var buf bytes.Buffer
	buf.WriteString("# upgradekit's in-place update extension for Cluster API, a clusterctl\n" +
		"# runtime extension provider, generated from " + deployDir + " by hack/release.\n" +
		"# Variables: " + varExtensionImage + " (required), " + varUpgraderImage + " or\n" +
		"# " + varUpgraderImages + " (version=image,...), " + varNamespace + " (default " + ns + ").\n")
	for _, m := range kept {
		b, err := yaml.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	// The variables go in unquoted, so that an empty value is YAML's "".
	out := buf.String()
	// The longer name first: one is a prefix of the other.
	for _, v := range []string{varUpgraderImages, varUpgraderImage} {
		out = strings.ReplaceAll(out, placeholder(v), "${"+v+`:=""}`)
	}
	return []byte(out), dropped, nil
}

func placeholder(v string) string { return "upgradekit-clusterctl-variable-" + v }

// setDeployment sets the extension container's image and the upgrader
// image env vars to clusterctl variables, by container and env name.
func setDeployment(m map[string]any, found map[string]bool) error {
	spec, ok := dig(m, "spec", "template", "spec")
	if !ok {
		return errors.New("no spec.template.spec")
	}
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		c, ok := c.(map[string]any)
		if !ok || c["name"] != "extension" {
			continue
		}
		c["image"] = "${" + varExtensionImage + "}"
		found["container extension"] = true
		env, _ := c["env"].([]any)
		for _, e := range env {
			e, ok := e.(map[string]any)
			if !ok {
				continue
			}
			switch e["name"] {
			case "UPGRADER_IMAGE":
				e["value"] = placeholder(varUpgraderImage)
				found["env UPGRADER_IMAGE"] = true
			case "UPGRADER_IMAGES":
				e["value"] = placeholder(varUpgraderImages)
				found["env UPGRADER_IMAGES"] = true
			}
		}
	}
	return nil
}

func dig(m map[string]any, path ...string) (map[string]any, bool) {
	for _, p := range path {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

// series is a major.minor release series.
type series struct{ major, minor int }

var releaseTag = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// releaseSeries returns the series of version, of the root module's
// release tags in repo and of the versions already in the clusterctl
// repository out, newest first.
func releaseSeries(repo, out, version string) ([]series, error) {
	versions := []string{version}
	tags, err := exec.Command("git", "-C", repo, "tag", "--list", "v*").Output()
	if err != nil {
		return nil, fmt.Errorf("git tag: %w", err)
	}
	versions = append(versions, strings.Fields(string(tags))...)
	if entries, err := os.ReadDir(filepath.Join(out, providerLabel)); err == nil {
		for _, e := range entries {
			versions = append(versions, e.Name())
		}
	}
	seen := map[series]bool{}
	var all []series
	for _, v := range versions {
		g := releaseTag.FindStringSubmatch(v)
		if g == nil {
			continue
		}
		var s series
		if _, err := fmt.Sscanf(g[1]+" "+g[2], "%d %d", &s.major, &s.minor); err != nil {
			return nil, err
		}
		if !seen[s] {
			seen[s] = true
			all = append(all, s)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].major != all[j].major {
			return all[i].major > all[j].major
		}
		return all[i].minor > all[j].minor
	})
	return all, nil
}

// metadata is clusterctl's metadata.yaml for the series.
func metadata(all []series) []byte {
	var b strings.Builder
	b.WriteString("# clusterctl metadata of upgradekit's in-place update extension (hack/release).\n")
	b.WriteString("apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n")
	for _, s := range all {
		fmt.Fprintf(&b, "- major: %d\n  minor: %d\n  contract: %s\n", s.major, s.minor, contract)
	}
	return []byte(b.String())
}
