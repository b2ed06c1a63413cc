package kubeadm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// Step names of the control plane configuration plan
// (NewControlPlaneConfigPlan), in order.
const (
	// StepControlPlaneConfig backs up the static pod manifests (kept) and
	// runs `kubeadm upgrade node phase control-plane
	// --certificate-renewal=false`, which renders the manifests of the API
	// server, controller-manager, scheduler and local etcd from
	// kube-system/kubeadm-config at the node's current version and waits
	// for the kubelet to restart each changed static pod. Its rollback puts
	// the backed-up manifests back (the kubelet restarts the pods from
	// them).
	StepControlPlaneConfig = "control-plane-config"
	// StepControlPlaneConfigVerify checks every ManifestExpectation in the
	// manifests on disk and that each expected component's mirror pod is
	// Ready. Version plans whose `kubeadm upgrade` already rendered the
	// manifests can carry it alone.
	StepControlPlaneConfigVerify = "control-plane-config-verify"
)

// Defaults of ControlPlaneConfig.
const (
	// DefaultManifestDir is where kubeadm writes the static pod manifests.
	DefaultManifestDir = "/etc/kubernetes/manifests"
	// DefaultAdminKubeconfig is the kubeconfig the verification reads the
	// mirror pods with.
	DefaultAdminKubeconfig = "/etc/kubernetes/admin.conf"
)

// controlPlaneComponents are the static pods kubeadm renders.
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}

// ManifestExpectation is what the verification requires of one static
// pod's manifest after kubeadm rendered it.
type ManifestExpectation struct {
	// Component is kube-apiserver, kube-controller-manager, kube-scheduler
	// or etcd; its manifest is <ManifestDir>/<Component>.yaml and its
	// mirror pod <Component>-<node> in kube-system.
	Component string
	// Args must each appear as a command argument "--name=value" of the
	// manifest, compared as fixed strings (a value kubeadm has to quote in
	// YAML is not found, and the verification fails rather than guess).
	Args []KubeletArg
	// ImageTag, if set, must end the manifest's image (":"+ImageTag).
	ImageTag string
}

// ControlPlaneConfig configures NewControlPlaneConfigPlan.
type ControlPlaneConfig struct {
	// PlanName defaults to "cp-config-" + a short hash of the node and the
	// expectations.
	PlanName string
	// Node is the Kubernetes node name.
	Node string
	// BinDir is where kubeadm and kubectl are; default DefaultBinDir.
	BinDir string
	// BackupDir defaults to DefaultBackupRoot/<plan name>; not "/".
	BackupDir string
	// ManifestDir defaults to DefaultManifestDir.
	ManifestDir string
	// KubeconfigPath defaults to DefaultAdminKubeconfig.
	KubeconfigPath string
	// Expect is what the verification requires; at least one.
	Expect []ManifestExpectation
}

func (c *ControlPlaneConfig) defaults() {
	if c.BinDir == "" {
		c.BinDir = DefaultBinDir
	}
	if c.ManifestDir == "" {
		c.ManifestDir = DefaultManifestDir
	}
	if c.KubeconfigPath == "" {
		c.KubeconfigPath = DefaultAdminKubeconfig
	}
	if c.PlanName == "" {
		sum := sha256.New()
		fmt.Fprintf(sum, "%s\x00", c.Node)
		for _, e := range c.Expect {
			fmt.Fprintf(sum, "%s\x00%s\x00%v\x00", e.Component, e.ImageTag, e.Args)
		}
		c.PlanName = "cp-config-" + hex.EncodeToString(sum.Sum(nil))[:12]
	}
	if c.BackupDir == "" {
		c.BackupDir = path.Join(DefaultBackupRoot, c.PlanName)
	}
}

func (c ControlPlaneConfig) validate() error {
	if msgs := validation.IsDNS1123Subdomain(c.Node); len(msgs) > 0 {
		return configError("node", "%q: %s", c.Node, strings.Join(msgs, "; "))
	}
	for field, p := range map[string]string{"binDir": c.BinDir, "backupDir": c.BackupDir, "manifestDir": c.ManifestDir, "kubeconfigPath": c.KubeconfigPath} {
		if err := absPath(field, p); err != nil {
			return err
		}
	}
	if path.Clean(c.BackupDir) == "/" {
		return configError("backupDir", "must not be the root directory")
	}
	if len(c.Expect) == 0 {
		return configError("expect", "nothing to verify")
	}
	seen := map[string]bool{}
	for i, e := range c.Expect {
		field := fmt.Sprintf("expect[%d]", i)
		if !slices.Contains(controlPlaneComponents, e.Component) {
			return configError(field+".component", "%q (want one of %s)", e.Component, strings.Join(controlPlaneComponents, ", "))
		}
		if seen[e.Component] {
			return configError(field+".component", "%q twice", e.Component)
		}
		seen[e.Component] = true
		if strings.ContainsAny(e.ImageTag, "\x00\n\r/ ") {
			return configError(field+".imageTag", "%q is not an image tag", e.ImageTag)
		}
		for j, a := range e.Args {
			if err := checkKubeletArgName(a.Name); err != nil {
				return configError(fmt.Sprintf("%s.args[%d].name", field, j), "%v", err)
			}
			if strings.ContainsAny(a.Value, "\x00\n\r") {
				return configError(fmt.Sprintf("%s.args[%d].value", field, j), "a line break or NUL cannot be matched in a manifest line")
			}
		}
	}
	return nil
}

// Scripts of the control plane configuration plan; every path, name and
// value is an argument.
const (
	// $1 manifest dir, $2 backup dir.
	scriptCopyManifests = `set -eu
mkdir -p "$2"
cp -a -- "$1"/. "$2"/`
	// $1 manifest dir, $2 kubectl, $3 kubeconfig, $4 node, then per
	// component: name, image tag ("" for none), N, N --name=value.
	scriptVerifyManifests = `set -eu
fail() { echo "control-plane-config: $*" >&2; exit 1; }
dir=$1 kubectl=$2 kc=$3 node=$4
shift 4
while [ $# -gt 0 ]; do
  c=$1 tag=$2 n=$3
  shift 3
  m=$dir/$c.yaml
  [ -f "$m" ] || fail "$m is missing"
  while [ "$n" -gt 0 ]; do
    sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$m" | grep -qxF -- "- $1" || fail "$m has no argument $1"
    shift
    n=$((n-1))
  done
  if [ -n "$tag" ]; then
    img=$(sed -n 's/^[[:space:]]*image:[[:space:]]*//p' "$m" | head -n 1)
    case "$img" in *":$tag") ;; *) fail "$m runs image $img, want tag $tag" ;; esac
  fi
  ready=$("$kubectl" --kubeconfig "$kc" -n kube-system get pod "$c-$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') || fail "reading pod kube-system/$c-$node"
  [ "$ready" = True ] || fail "pod kube-system/$c-$node is not Ready ($ready)"
done
echo "control plane configuration verified on $node"`
)

// NewControlPlaneConfigPlan returns the plan that applies a changed
// control plane configuration to a control plane node at its current
// Kubernetes version: the static pod manifests rendered again from
// kube-system/kubeadm-config (StepControlPlaneConfig), then verified
// (StepControlPlaneConfigVerify). kubeadm-config must already hold the
// desired configuration (Cluster API's KubeadmControlPlane writes it
// before it updates machines); the verification is what catches it if it
// did not. Errors wrap ErrInvalidConfig and name the field.
func NewControlPlaneConfigPlan(cfg ControlPlaneConfig) (nodeexec.Plan, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	verify := []string{cfg.ManifestDir, path.Join(cfg.BinDir, "kubectl"), cfg.KubeconfigPath, cfg.Node}
	for _, e := range cfg.Expect {
		verify = append(verify, e.Component, e.ImageTag, fmt.Sprint(len(e.Args)))
		for _, a := range e.Args {
			verify = append(verify, a.String())
		}
	}
	backup := path.Join(cfg.BackupDir, "manifests")
	plan := nodeexec.Plan{
		Name: cfg.PlanName,
		Node: cfg.Node,
		Steps: []nodeexec.Step{{
			Name:       StepControlPlaneConfig,
			Argv:       []string{path.Join(cfg.BinDir, "kubeadm"), "upgrade", "node", "phase", "control-plane", "--certificate-renewal=false"},
			Backup:     nodeexec.ShellArgv(scriptCopyManifests, cfg.ManifestDir, backup),
			Rollback:   nodeexec.ShellArgv(scriptCopyManifests, backup, cfg.ManifestDir),
			Timeout:    10 * time.Minute,
			Retry:      nodeexec.RetryPolicy{Attempts: 2, Backoff: 30 * time.Second},
			Idempotent: true, // rendering the same configuration again changes nothing
		}, {
			Name:          StepControlPlaneConfigVerify,
			Argv:          nodeexec.ShellArgv(scriptVerifyManifests, verify...),
			Timeout:       time.Minute,
			Retry:         nodeexec.RetryPolicy{Attempts: 12, Backoff: 5 * time.Second, MaxBackoff: 10 * time.Second},
			Idempotent:    true,
			NothingToUndo: true,
		}},
	}
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}
