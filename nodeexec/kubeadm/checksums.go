package kubeadm

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// ChecksumsEnv is the environment variable that carries Config.Checksums to
// StepBundle, in FormatChecksums' form (sha256sum's).
const ChecksumsEnv = "UPGRADEKIT_BUNDLE_SHA256SUMS"

// Staged paths, relative to the staging directory, that the plan runs or
// installs: the Checksums of a plan must cover each one it uses (a tree by
// every regular file in it).
const (
	StagedKubeadm    = "kubernetes/kubeadm"
	StagedKubelet    = "kubernetes/kubelet"
	StagedKubectl    = "kubernetes/kubectl"
	StagedEtcdctl    = "etcd/etcdctl"
	StagedContainerd = "containerd"
	StagedCNIPlugins = "cni-plugins"
)

// ParseChecksums reads what sha256sum writes: one "<sha256>  <path>" line
// per file ("<sha256> *<path>" in binary mode), blank lines ignored, a
// leading "./" dropped (as `find . -type f | xargs sha256sum` writes
// them). The result maps each path to its checksum and is checked as
// ValidateChecksums does; errors wrap ErrInvalidConfig and name the line.
func ParseChecksums(text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		field := fmt.Sprintf("checksums line %d", i+1)
		if len(line) < 67 || (line[64:66] != "  " && line[64:66] != " *") {
			return nil, configError(field, "%s is not sha256sum's \"<sha256>  <path>\"", errtext.Quote(line))
		}
		sum, p := line[:64], strings.TrimPrefix(line[66:], "./")
		if _, dup := out[p]; dup {
			return nil, configError(field, "%s is listed twice", errtext.Quote(p))
		}
		out[p] = sum
		if err := validateChecksum(p, sum); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FormatChecksums writes sums as sha256sum does ("<sha256>  <path>" lines),
// sorted by path: the form StepBundle checks with `sha256sum -c` in the
// staging directory.
func FormatChecksums(sums map[string]string) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(sums)) {
		b.WriteString(sums[p])
		b.WriteString("  ")
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return b.String()
}

// ValidateChecksums checks a Checksums map: every key a clean path
// relative to the staging directory (no "..", no leading "/", nothing
// sha256sum would escape: no backslash, newline or carriage return),
// every value 64 lowercase hexadecimal digits. Errors wrap
// ErrInvalidConfig and name the entry ("checksums[kubernetes/kubeadm]").
func ValidateChecksums(sums map[string]string) error {
	for _, p := range slices.Sorted(maps.Keys(sums)) {
		if err := validateChecksum(p, sums[p]); err != nil {
			return err
		}
	}
	return nil
}

func validateChecksum(p, sum string) error {
	field := "checksums[" + p + "]"
	switch {
	case p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p:
		return configError(field, "%s is not a clean path relative to the staging directory", errtext.Quote(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return configError(field, "%s leaves the staging directory", errtext.Quote(p))
	case strings.ContainsAny(p, "\\\n\r\x00"):
		return configError(field, "%s has a backslash, newline or NUL, which sha256sum escapes", errtext.Quote(p))
	}
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return configError(field, "%s is not a SHA-256 (64 lowercase hexadecimal digits)", errtext.Quote(sum))
	}
	return nil
}

// StagedNeed is one staged path a plan's step runs or installs.
type StagedNeed struct {
	// Step is the plan step that needs it (StepBundle for kubeadm, kubelet
	// and kubectl, which every plan installs; StepEtcdSnapshot,
	// StepContainerd, StepCNIPlugins).
	Step string
	// Path is relative to the staging directory: a file (StagedKubeadm,
	// StagedEtcdctl...) or, with Tree, a directory copied onto /
	// (StagedContainerd, StagedCNIPlugins).
	Path string
	// Tree says Path is a directory: at least one file under it must be
	// staged (and every file under it checksummed).
	Tree bool
}

// StagedNeeds lists what the plan of c needs in its staging directory:
// kubeadm, kubelet and kubectl always; etcdctl on the first control plane
// unless SkipEtcdSnapshot; the containerd and CNI trees unless skipped.
// A bundle for every role is one that satisfies RoleFirstControlPlane's.
func StagedNeeds(c Config) []StagedNeed {
	needs := []StagedNeed{{StepBundle, StagedKubeadm, false}, {StepBundle, StagedKubelet, false}, {StepBundle, StagedKubectl, false}}
	if c.Role == RoleFirstControlPlane && !c.SkipEtcdSnapshot {
		needs = append(needs, StagedNeed{StepEtcdSnapshot, StagedEtcdctl, false})
	}
	if !c.SkipContainerd {
		needs = append(needs, StagedNeed{StepContainerd, StagedContainerd, true})
	}
	if !c.SkipCNIPlugins {
		needs = append(needs, StagedNeed{StepCNIPlugins, StagedCNIPlugins, true})
	}
	return needs
}

// MissingFrom reports the needs that sums (a bundle's checksums, paths
// relative to the staging directory) do not cover: a file not listed, or
// a tree with no file listed under it.
func MissingFrom(needs []StagedNeed, sums map[string]string) []StagedNeed {
	var missing []StagedNeed
	for _, n := range needs {
		found := false
		if !n.Tree {
			_, found = sums[n.Path]
		} else {
			for p := range sums {
				if strings.HasPrefix(p, n.Path+"/") {
					found = true
					break
				}
			}
		}
		if !found {
			missing = append(missing, n)
		}
	}
	return missing
}

// checkCoverage: the checksums of a plan cover every staged path it runs
// or installs; a tree needs at least one of its files listed (the bundle
// step refuses a file of a used tree that is not listed).
func (c Config) checkCoverage() error {
	missing := MissingFrom(StagedNeeds(c), c.Checksums)
	if len(missing) == 0 {
		return nil
	}
	if n := missing[0]; n.Tree {
		return configError("checksums", "no checksum under %s/, which the plan installs onto /", n.Path)
	}
	return configError("checksums", "no checksum for %s, which the plan runs", missing[0].Path)
}
