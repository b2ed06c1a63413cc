package cliconvention

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestEveryExampleFollowsTheConvention builds each example and runs it as
// a user would, asserting exit codes and what is printed.
func TestEveryExampleFollowsTheConvention(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example binary")
	}
	bin, root := buildAll(t)
	ami := filepath.Join(root, "examples", "ami-resolve", "testdata")
	de := filepath.Join(root, "examples", "drift-explain", "testdata")
	kd := filepath.Join(root, "karpenter", "testdata", "dump")

	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		exit     int
		printed  string // in stdout or stderr
		once     string // printed exactly once
		notShown string
	}{
		// -h exits 0 everywhere.
		{"ami-resolve", []string{"-h"}, nil, 0, "usage: ami-resolve", "", ""},
		{"drift-explain", []string{"-h"}, nil, 0, "usage: drift-explain", "", ""},
		{"inplace-extension", []string{"-h"}, nil, 0, "--kubeconfig", "", ""},
		{"simulate", []string{"-h"}, nil, 0, "--flaky", "", ""},
		{"preview", []string{"-h"}, nil, 0, "usage: kubectl upgradekit preview", "", ""},
		{"preview", []string{"--help"}, nil, 0, "-o, --output string", "", ""},
		{"preview", []string{"preview", "-h"}, nil, 0, "kubectl upgradekit preview", "", ""},
		{"upgrader", []string{"-h"}, nil, 0, "usage", "", ""},

		// An unknown flag: exit 2, one line and the hint, not the help.
		{"ami-resolve", []string{"--no-such-flag"}, nil, 2, "ami-resolve: unknown flag: --no-such-flag\nSee 'ami-resolve --help' for usage.\n", "unknown flag", "Flags:"},
		{"drift-explain", []string{"-no-such-flag"}, nil, 2, "drift-explain: unknown flag: --no-such-flag\nSee 'drift-explain --help' for usage.\n", "unknown flag", "Flags:"},
		{"inplace-extension", []string{"--no-such-flag"}, nil, 2, "inplace-extension: unknown flag: --no-such-flag\nSee 'inplace-extension --help' for usage.\n", "unknown flag", "Flags:"},
		{"simulate", []string{"--no-such-flag"}, nil, 2, "simulate: unknown flag: --no-such-flag\nSee 'simulate --help' for usage.\n", "unknown flag", "Flags:"},
		{"preview", []string{"preview", "--no-such-flag"}, nil, 2, "kubectl upgradekit preview: unknown flag: --no-such-flag\nSee 'kubectl upgradekit preview --help' for usage.\n", "unknown flag", "Flags:"},
		{"upgrader", []string{"run", "--no-such-flag"}, nil, 2, "upgrader run: unknown flag: --no-such-flag\nSee 'upgrader run --help' for usage.\n", "unknown flag", "Flags:"},
		{"upgrader", []string{"nosuchcommand"}, nil, 2, "See 'upgrader --help' for usage.", "unknown command", "usage:"},

		// Other usage errors: exit 2; names a flag refers to are checked.
		{"ami-resolve", []string{"only-one-arg"}, nil, 2, "want 2 arguments", "", ""},
		{"ami-resolve", []string{"-kubernetes-version", "latest", ami + "/terms.yaml", ami + "/catalog.json"}, nil, 2, "--kubernetes-version", "", ""},
		{"drift-explain", []string{"-stamp", "-proposed", "x", "a", "b"}, nil, 2, "cannot be combined", "", ""},
		{"inplace-extension", []string{"-no-update-machine", "-in-place", "KubernetesVerison"}, nil, 2, `unknown category "KubernetesVerison"`, "", ""},
		{"inplace-extension", []string{"-upgrader-image", "x", "-maintenance-window", "0 2 * * *", "-maintenance-timezone", "Europe/Berln"}, nil, 2, "time zone", "", ""},
		{"simulate", []string{"-fail", "nosuch/kubelet=1"}, nil, 2, `no node "nosuch"`, "", ""},
		{"simulate", []string{"-crash", "demo-md-0-0/nosuchstep"}, nil, 2, `no step "nosuchstep"`, "", ""},
		{"simulate", []string{"-new-image", "nosuch"}, nil, 2, `no machine deployment "nosuch"`, "", ""},
		{"simulate", []string{"-on-failure", "retry"}, nil, 2, `--on-failure: unknown "retry" (stall, continue)`, "", ""},
		{"upgrader", []string{"nosuchcommand"}, nil, 2, "unknown command", "", ""},
		{"preview", []string{"-f", "change.yaml"}, nil, 2, "kubectl upgradekit preview: --cluster is required\nSee 'kubectl upgradekit preview --help' for usage.\n", "", "Flags:"},
		{"preview", []string{"-cluster", "demo", "-in-place", "KubernetesVerison"}, nil, 2, `unknown category "KubernetesVerison"`, "", ""},
		{"preview", []string{"-cluster", "demo", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, nil, 2, "no such file", "", ""},

		// Findings have their own codes; errors are 1.
		{"ami-resolve", []string{ami + "/invalid.yaml", ami + "/catalog.json"}, nil, 3, "invalid: amiSelectorTerms", "", ""},
		{"ami-resolve", []string{"-kubernetes-version", "1.31", ami + "/terms.yaml", filepath.Join(t.TempDir(), "missing.json")}, nil, 1, "no such file", "", ""},
		{"drift-explain", []string{de + "/nodepool.yaml", de + "/nodes.yaml"}, nil, 3, "1 of 3 objects drifted", "", ""},
		{"drift-explain", []string{"-karpenter", kd + "/cluster.yaml"}, nil, 3, "8 of 16 NodeClaims drifted", "", ""},
		{"drift-explain", []string{"-karpenter", "-o", "xml", kd + "/cluster.yaml"}, nil, 2, `--output "xml": want table, json, yaml`, "", ""},

		// GNU/kubectl flags: --flag=value, -ovalue, flags after the
		// arguments; -o json|yaml prints a Kubernetes-shaped object.
		{"ami-resolve", []string{ami + "/terms.yaml", ami + "/catalog.json", "--kubernetes-version=1.31", "-oyaml"}, nil, 0, "apiVersion: cli.upgradekit.io/v1alpha1\n", "kind: AMIResolution\n", ""},
		{"ami-resolve", []string{ami + "/terms.yaml", "--output", "json", ami + "/catalog.json"}, nil, 0, `"kind": "AMIResolution"`, "", "null"},
		{"drift-explain", []string{kd + "/cluster.yaml", "--karpenter", "--output=yaml"}, nil, 3, "kind: KarpenterDriftReport\n", "", "null"},
		{"drift-explain", []string{kd + "/cluster.yaml", "--karpenter", "-ojson"}, nil, 3, `"nodeClaims": [`, "", `"NodeClaims"`}, // camelCase keys, as kubectl prints
		{"drift-explain", []string{de + "/nodepool.yaml", de + "/nodes.yaml", "-o", "json"}, nil, 3, `"kind": "DriftReport"`, `"apiVersion": "cli.upgradekit.io/v1alpha1"`, "null"},
		{"drift-explain", []string{"-ojson", de + "/nodepool.yaml", de + "/nodes.yaml"}, nil, 3, `"kind": "DriftReport"`, `"summary": {`, "null"},
		{"drift-explain", []string{de + "/nodepool.yaml", "--output=yaml", de + "/nodes.yaml"}, nil, 3, "kind: DriftReport\n", "  drifted: 1\n", "null"},
		{"drift-explain", []string{"--proposed", de + "/proposed.yaml", de + "/nodepool.yaml", de + "/nodes.yaml", "-oyaml"}, nil, 3, "kind: DriftReport\n", "  drifted: 3\n", "null"},
		{"drift-explain", []string{"--prefix", "example.com", de + "/nodepool.yaml", de + "/nodes.yaml", "--output", "json"}, nil, 0, `"kind": "DriftReport"`, `"drifted": 0`, "null"},
		{"drift-explain", []string{"--stamp", "-o", "json", de + "/nodepool.yaml", de + "/nodes.yaml"}, nil, 2, "drift-explain: --stamp and --output json cannot be combined", "", "apiVersion"},
		{"drift-explain", []string{"-o", "xml", de + "/nodepool.yaml", de + "/nodes.yaml"}, nil, 2, `--output "xml": want table, json, yaml`, "", ""},
		{"upgrader", []string{"status", "--output=yaml", "--journal-dir", t.TempDir()}, nil, 0, "kind: JournalList\n", "items: []\n", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", "", "-fail", "demo-md-0-0/kubelet=9"}, nil, 3, "failed: demo-md-0-0", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", "md-0", "-strategy", "inplace-only"}, nil, 4, "Blocked: 1 machines", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=1", "-new-image", ""}, nil, 0, "Invariants held", "", ""},
		// A failed machine stalls its machine deployment as Cluster API's
		// would; --on-failure continue plays on.
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=3", "-new-image", "", "-fail", "demo-md-0-0/containerd=9"}, nil, 3,
			"Held back: demo-md-0-2 (1 failed machines of the group stay unavailable while Cluster API retries them; the limit (maxSurge+maxUnavailable) is 1)", "", ""},
		{"simulate", []string{"-progress-bar=false", "-control-planes", "1", "-workers", "md-0=3", "-new-image", "", "-fail", "demo-md-0-0/containerd=9", "-on-failure", "continue"}, nil, 3,
			"demo-md-0-2              InPlace verify                 Succeeded", "", "Held back"},
		// No cluster to talk to: one line, no stack trace.
		{"inplace-extension", []string{"-upgrader-image", "x@sha256:" + strings.Repeat("a", 64), "-allow-unverified-bundles"}, []string{"KUBECONFIG=", "HOME=" + t.TempDir()}, 1, "management cluster config", "", "stacktrace"},
		{"inplace-extension", []string{"-upgrader-image", "x:v1", "-allow-unverified-bundles"}, nil, 2, "is not pinned by digest", "", ""},
		{"preview", []string{"-cluster", "demo"}, []string{"KUBECONFIG=", "HOME=" + t.TempDir()}, 1, "management cluster config", "", "stacktrace"},

		// -version (--version too) prints the build's version line and exits 0.
		{"ami-resolve", []string{"--version"}, nil, 0, "ami-resolve github.com/upgradekit/upgradekit", "", ""},
		{"drift-explain", []string{"-version"}, nil, 0, "drift-explain github.com/upgradekit/upgradekit", "", ""},
		{"inplace-extension", []string{"--version"}, nil, 0, "inplace-extension github.com/upgradekit/upgradekit", "", ""},
		{"simulate", []string{"-version"}, nil, 0, "simulate github.com/upgradekit/upgradekit", "", ""},
		{"preview", []string{"--version"}, nil, 0, "kubectl-upgradekit github.com/upgradekit/upgradekit", "", ""},
		{"upgrader", []string{"--version"}, nil, 0, "upgrader github.com/upgradekit/upgradekit", "", ""},
		{"upgrader", []string{"version"}, nil, 0, "upgrader github.com/upgradekit/upgradekit", "", ""},

		// An empty result is not an error (kubectl get's "No resources found").
		{"upgrader", []string{"status", "-journal-dir", t.TempDir()}, nil, 0, "No journals found in", "", ""},
		// With -o json|yaml, an empty list on stdout as kubectl get prints.
		{"upgrader", []string{"status", "-o", "json", "-journal-dir", t.TempDir()}, nil, 0, `"items": []`, "No journals found in", ""},
	} {
		t.Run(tc.name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), filepath.Join(bin, tc.name), tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			all, code := runForExit(t, cmd)
			require.Equal(t, tc.exit, code, all)
			require.Contains(t, all, tc.printed)
			if tc.once != "" {
				require.Equal(t, 1, strings.Count(all, tc.once), "printed once: %s", all)
			}
			if tc.notShown != "" {
				require.NotContains(t, all, tc.notShown)
			}
		})
	}
}

// TestLongFlagsArePrintedWithTwoDashes holds every command to kubectl's
// spelling of its own long flags (issue 31): its --help and its usage
// errors say --flag, never -flag. The flags are the ones the command's
// --help lists; -flag counts where no dash, letter or digit comes just
// before it, or just after the name (nor a name's end: <cluster>-kubeconfig
// names a Secret). Commands still accept -flag (examples/cli); this is
// about what they print.
func TestLongFlagsArePrintedWithTwoDashes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example binary")
	}
	bin, root := buildAll(t)
	tmp := t.TempDir()
	ami := filepath.Join(root, "examples", "ami-resolve", "testdata")
	de := filepath.Join(root, "examples", "drift-explain", "testdata")
	kd := filepath.Join(root, "karpenter", "testdata", "dump")
	digest := "x@sha256:" + strings.Repeat("a", 64)
	noCluster := []string{"KUBECONFIG=", "HOME=" + tmp}
	type run struct {
		args []string
		env  []string
		exit int
	}
	usage := func(args ...string) run { return run{args: args, exit: 2} }
	for _, c := range []struct {
		name string
		help [][]string // the command lines, before --help, whose help lists its flags
		runs []run
	}{
		{"simulate", [][]string{nil}, []run{
			usage("--no-such-flag"), usage("extra"), usage("-o", "xml"),
			usage("--on-failure", "retry"), usage("--updater", "x"), usage("--strategy", "yolo"),
			usage("--fail", "x"), usage("--crash", "x"), usage("--workers", "md-0"),
			usage("--control-planes", "0"), usage("--flaky", "2"), usage("--from", "latest"),
			usage("--fail", "nosuch/kubelet=1"), usage("--crash", "demo-md-0-0/nosuchstep"), usage("--new-image", "nosuch"),
		}},
		{"ami-resolve", [][]string{nil}, []run{
			usage("--no-such-flag"), usage("only-one-arg"), usage("-o", "xml", ami+"/terms.yaml", ami+"/catalog.json"),
			usage("--min-age", "bad", ami+"/terms.yaml", ami+"/catalog.json"),
			usage("--now", "bad", ami+"/terms.yaml", ami+"/catalog.json"),
			usage("--kubernetes-version", "latest", ami+"/terms.yaml", ami+"/catalog.json"),
			usage(ami+"/nodeclass.yaml", ami+"/catalog.json"),
		}},
		{"upgrader", [][]string{nil, {"run"}, {"rollback"}, {"status"}, {"reset"}}, []run{
			usage(), usage("nosuchcommand"), usage("run", "--no-such-flag"), usage("run", "extra"),
			usage("run", "--stop-grace", "-1s"), usage("reset", "--journal-dir", tmp),
			usage("status", "--tail", "-1", "--journal-dir", tmp), usage("status", "--journal", "f", "demo"),
			usage("status", "-o", "xml", "--journal-dir", tmp),
			{args: []string{"run", "--journal-dir", tmp}, env: []string{"UPGRADEKIT_PLAN="}, exit: 1},
		}},
		{"drift-explain", [][]string{nil}, []run{
			usage("--no-such-flag"), usage(), usage("--stamp", "--proposed", "x", "a", "b"), usage("-o", "xml", "a", "b"),
			usage("--live"), usage("--karpenter"), usage("--karpenter", "--live", kd+"/cluster.yaml"),
			usage("--images-at", "now", de+"/nodepool.yaml", de+"/nodes.yaml"),
			usage("--previous", "x", de+"/nodepool.yaml", de+"/nodes.yaml"),
			usage("--karpenter", "--images-at", "x", kd+"/cluster.yaml"),
		}},
		{"preview", [][]string{nil, {"preview"}}, []run{
			usage("preview", "--no-such-flag"), usage("preview", "-f", "change.yaml"), usage("preview", "--cluster", "demo", "extra"),
			usage("preview", "--cluster", "demo", "-o", "xml"), usage("preview", "--cluster", "demo", "--mode", "bogus"),
			usage("preview", "--cluster", "demo", "--timings", "bogus"),
			usage("preview", "--cluster", "demo", "--in-place", "KubernetesVerison"),
			usage("preview", "--cluster", "demo", "--upgrader-image", "x", "--upgrader-images", "v1.36.3=y"),
			{args: []string{"preview", "--cluster", "demo"}, env: noCluster, exit: 1},
		}},
		{"inplace-extension", [][]string{nil}, []run{
			usage("--no-such-flag"), usage(), usage("extra"),
			usage("--no-update-machine", "--in-place", "KubernetesVerison"),
			usage("--no-update-machine", "--kube-api-qps", "-1"),
			usage("--upgrader-image", "x", "--maintenance-window", "0 2 * * *", "--maintenance-timezone", "Europe/Berln"),
			usage("--upgrader-image", "x:v1", "--allow-unverified-bundles"),
			usage("--upgrader-image", digest),
			usage("--upgrader-image", digest, "--upgrader-images", "v1.36.3="+digest, "--allow-unverified-bundles"),
			{args: []string{"--upgrader-image", digest, "--allow-unverified-bundles"}, env: noCluster, exit: 1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// printed is what each command line printed, the paths of
			// this machine taken out (they are not the command's words).
			printed := map[string]string{}
			exec1 := func(r run) {
				cmd := exec.CommandContext(t.Context(), filepath.Join(bin, c.name), r.args...)
				cmd.Env = append(os.Environ(), r.env...)
				out, code := runForExit(t, cmd)
				line := strings.TrimSpace(c.name + " " + strings.Join(r.args, " "))
				require.Equal(t, r.exit, code, "%s: %s", line, out)
				printed[line] = strings.NewReplacer(tmp, "TMP", root, "ROOT").Replace(out)
			}
			flags := map[string]bool{}
			for _, h := range c.help {
				exec1(run{args: append(slices.Clone(h), "--help")})
				for _, m := range helpFlag.FindAllStringSubmatch(printed[strings.Join(append([]string{c.name}, append(h, "--help")...), " ")], -1) {
					flags[m[1]] = true
				}
			}
			require.NotEmpty(t, flags, "%s --help lists its flags", c.name)
			for _, r := range c.runs {
				exec1(r)
			}
			for _, flag := range slices.Sorted(maps.Keys(flags)) {
				oneDash := regexp.MustCompile(`(?m)^.*(?:^|[^-A-Za-z0-9_>}])-` + regexp.QuoteMeta(flag) + `(?:$|[^-A-Za-z0-9]).*$`)
				for _, line := range slices.Sorted(maps.Keys(printed)) {
					if m := oneDash.FindString(printed[line]); m != "" {
						t.Errorf("%s prints -%s, which kubectl spells --%s:\n%s", line, flag, flag, m)
					}
				}
			}
		})
	}
}

// helpFlag is a long flag in the flag list of a --help: "  -o, --output
// string  ...", "      --timeline string  ...".
var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-[A-Za-z0-9], )?--([A-Za-z0-9][A-Za-z0-9-]+)`)

// built is the directory buildAll built the examples into, once per
// test binary.
var built struct {
	once      sync.Once
	bin, root string
	err       error
}

// buildAll builds every example binary into one directory, once, and
// returns it and the repository root.
func buildAll(t *testing.T) (bin, root string) {
	t.Helper()
	built.once.Do(func() {
		if built.root, built.err = filepath.Abs(filepath.Join("..", "..")); built.err != nil {
			return
		}
		if built.bin, built.err = os.MkdirTemp("", "cliconvention"); built.err != nil {
			return
		}
		names := []string{"ami-resolve", "inplace-extension", "preview", "simulate", "upgrader"}
		build := exec.Command("go", append([]string{"build", "-o", built.bin + "/"}, prefixed("./", names)...)...)
		build.Dir = filepath.Join(built.root, "examples")
		if out, err := build.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("%w: %s", err, out)
			return
		}
		// drift-explain is its own module (its -karpenter mode needs the
		// karpenter module, which the core must not depend on).
		build = exec.Command("go", "build", "-o", built.bin+"/", ".")
		build.Dir = filepath.Join(built.root, "examples", "drift-explain")
		build.Env = append(os.Environ(), "GOWORK=off") // not in go.work
		if out, err := build.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin, built.root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.bin != "" {
		_ = os.RemoveAll(built.bin)
	}
	os.Exit(code)
}

// TestREADMETableMatchesTheCommands reads the table of examples/README.md
// and checks each row against the command's --help: the flags it names
// are there, its -o formats are the ones --help offers, and the exit codes
// it gives findings are the ones --help lists (and no others).
func TestREADMETableMatchesTheCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example binary")
	}
	bin, root := buildAll(t)
	readme, err := os.ReadFile(filepath.Join(root, "examples", "README.md"))
	require.NoError(t, err)
	var rows [][]string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `") {
			cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
			require.Len(t, cells, 7, line)
			rows = append(rows, cells)
		}
	}
	require.Len(t, rows, 6, "a row per command")
	help := func(name string, args ...string) string {
		cmd := exec.CommandContext(t.Context(), filepath.Join(bin, name), append(args, "--help")...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s --help exits 0: %s", name, out)
		return string(out)
	}
	tick := regexp.MustCompile("`([^`]+)`")
	for _, row := range rows {
		command := strings.Trim(strings.TrimSpace(row[0]), "`")
		t.Run(command, func(t *testing.T) {
			words := strings.Fields(command)
			name, args := words[len(words)-1], []string(nil)
			if name == "preview" {
				args = []string{"preview"}
			}
			h := help(name, args...)
			for _, m := range tick.FindAllStringSubmatch(row[1], -1) {
				require.Contains(t, h, m[1], "--help names the README's flag")
			}
			if formats, _, _ := strings.Cut(strings.TrimSpace(row[2]), " ("); formats != "" {
				oh := h
				if name == "upgrader" {
					oh = help(name, "status")
				}
				require.Contains(t, oh, "output format: "+formats)
			} else {
				require.NotContains(t, h, "--output")
			}
			var exit string
			for _, l := range strings.Split(h, "\n") {
				if strings.HasPrefix(l, "exit: ") {
					exit = l
				}
			}
			require.NotEmpty(t, exit, "--help says the exit codes")
			for i, codes := range [][]string{{"0"}, {"3"}, {"4"}, {"5", "6"}} {
				for _, code := range codes {
					listed := regexp.MustCompile(`(: |, )` + code + ` `).MatchString(exit)
					require.Equal(t, strings.TrimSpace(row[3+i]) != "", listed, "exit code %s in %q", code, exit)
				}
			}
		})
	}
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// TestPreviewIsAKubectlPlugin installs preview as krew would, from the
// krew manifest and archive hack/krew-manifest.sh builds (the archive
// checked against the manifest's sha256, its files unpacked, the bin
// linked as kubectl-<plugin name> on PATH), and runs it through a real
// kubectl as a user would.
func TestPreviewIsAKubectlPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the preview binary")
	}
	// UPGRADEKIT_KUBECTL (make test builds one: hack/kubectl.sh), else
	// the one on PATH.
	kubectl := os.Getenv("UPGRADEKIT_KUBECTL")
	if kubectl == "" {
		var err error
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			if os.Getenv("UPGRADEKIT_REQUIRE_ENVTEST") == "1" {
				t.Fatalf("no kubectl: set UPGRADEKIT_KUBECTL=$(hack/kubectl.sh)/kubectl or put one on PATH: %v", err)
			}
			t.Skip("no kubectl: UPGRADEKIT_KUBECTL=$(hack/kubectl.sh)/kubectl")
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dist := t.TempDir()
	build := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "krew-manifest.sh"), "v0.0.1", dist, runtime.GOOS+"/"+runtime.GOARCH)
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	var manifest struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(dist, "upgradekit.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &manifest))
	require.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", manifest.APIVersion)
	require.Equal(t, "Plugin", manifest.Kind)
	require.Equal(t, "upgradekit", manifest.Metadata.Name, "kubectl upgradekit")
	require.Equal(t, "v0.0.1", manifest.Spec.Version)
	require.Contains(t, manifest.Spec.Description, "kubectl upgradekit preview --help")
	require.Len(t, manifest.Spec.Platforms, 1)
	platform := manifest.Spec.Platforms[0]
	require.Equal(t, map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}, platform.Selector.MatchLabels)
	archive := filepath.Join(dist, path.Base(platform.URI))
	data, err := os.ReadFile(archive)
	require.NoError(t, err, "the manifest's uri names the archive built")
	require.Equal(t, fmt.Sprintf("%x", sha256.Sum256(data)), platform.SHA256)

	// Unpack the files the manifest names, as krew does.
	install := t.TempDir()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	want := map[string]bool{}
	for _, f := range platform.Files {
		require.Equal(t, ".", f.To)
		want[f.From] = true
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.True(t, want[h.Name], "the archive holds only what the manifest names: %s", h.Name)
		delete(want, h.Name)
		content, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(install, h.Name), content, os.FileMode(h.Mode)&0o755))
	}
	require.Empty(t, want, "every file the manifest names is in the archive")
	plugins := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(install, platform.Bin), filepath.Join(plugins, "kubectl-"+manifest.Metadata.Name)))

	for _, tc := range []struct {
		args    []string
		exit    int
		printed string
	}{
		{[]string{"upgradekit", "preview", "--help"}, 0, "usage: kubectl upgradekit preview --cluster NAME"},
		{[]string{"upgradekit", "preview", "--clustr", "demo"}, 2, "kubectl upgradekit preview: unknown flag: --clustr\nSee 'kubectl upgradekit preview --help' for usage.\n"},
		{[]string{"upgradekit", "--version"}, 0, "kubectl-upgradekit github.com/upgradekit/upgradekit"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), kubectl, tc.args...)
			cmd.Env = append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
			all, code := runForExit(t, cmd)
			require.Equal(t, tc.exit, code, all)
			require.Contains(t, all, tc.printed)
			require.NotContains(t, all, "preview: preview:")
		})
	}
	// kubectl lists it among its plugins.
	list := exec.CommandContext(t.Context(), kubectl, "plugin", "list", "--name-only")
	list.Env = append(os.Environ(), "PATH="+plugins)
	out, _ = list.CombinedOutput()
	require.Contains(t, string(out), "kubectl-upgradekit")
}

// runForExit runs cmd and returns what it printed (stdout, then stderr)
// and its exit code; a failure to run it at all fails t.
func runForExit(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String() + stderr.String(), code
}
