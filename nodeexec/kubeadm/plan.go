package kubeadm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
)

// Role is the node's part in the upgrade; it picks the kubeadm command.
type Role string

// Roles.
const (
	// RoleFirstControlPlane runs `kubeadm upgrade apply` (after an etcd
	// snapshot). Exactly one control plane node per upgrade has it.
	RoleFirstControlPlane Role = "first-control-plane"
	// RoleControlPlane runs `kubeadm upgrade node` on the other control
	// plane nodes, one at a time, after the first one.
	RoleControlPlane Role = "control-plane"
	// RoleWorker runs `kubeadm upgrade node` on a worker.
	RoleWorker Role = "worker"
)

// ErrInvalidConfig is wrapped by configuration errors other than version
// errors.
var ErrInvalidConfig = errors.New("invalid kubeadm plan configuration")

// Defaults for Config fields left empty.
const (
	DefaultStagingDir = "/var/lib/upgradekit/staging"
	DefaultBackupRoot = "/var/lib/upgradekit/backup"
	// DefaultKeepEtcBackups keeps this plan's copy of /etc/kubernetes and
	// the one before it.
	DefaultKeepEtcBackups = 2
	DefaultBinDir         = "/usr/bin"
	DefaultPKIDir         = "/etc/kubernetes/pki"
)

// DefaultKeepEtcdSnapshots, the default of Config.KeepEtcdSnapshots,
// keeps this plan's etcd snapshot and the one before it.
const DefaultKeepEtcdSnapshots = 2

// Step names, in plan order. Steps that do not apply to a role or version
// are left out.
//
// A step that restarts a component the upgrader pod itself depends on
// (containerd, the kubelet) installs it, restarts it and checks it is
// running in ONE step, and puts the old files back and restarts again
// if the new one does not come up. In the init-container layout of package
// nodepod each step is its own container, and only a running kubelet (with
// a running containerd) starts the next one: a step that ended with the
// kubelet stopped would leave the node NotReady and the pod waiting for
// ever.
const (
	StepEtcdSnapshot = "etcd-snapshot"
	// StepContainerd backs up the host files the staged containerd tree
	// replaces (and containerd's configuration file), installs the tree,
	// migrates the configuration when the installed containerd is 2.x or
	// newer and the file is in an older format (see
	// Config.ContainerdConfig), runs systemctl daemon-reload, restarts
	// containerd and checks it is active; if it is not, it restores the
	// backup (configuration included) and restarts containerd again before
	// failing. Its rollback restores the backup and restarts containerd.
	// No check (the files being in place does not mean they run),
	// idempotent (an interrupted step is run again; a migrated file is
	// not migrated twice), retried, 5 minutes per attempt.
	StepContainerd     = "containerd"
	StepCNIPlugins     = "cni-plugins"
	StepKubeadmBinary  = "kubeadm-binary"
	StepKubeadmConfig  = "kubeadm-config"
	StepKubeadmUpgrade = "kubeadm-upgrade"
	StepKubectlBinary  = "kubectl-binary"
	// StepKubelet backs up the kubelet binary, then replaces it
	// atomically (copy beside it, rename over it: the running kubelet
	// keeps its old inode), runs systemctl daemon-reload, restarts the
	// kubelet and checks it is active; if it is not, it puts the backup
	// back and restarts again before failing. It never stops the kubelet
	// on its own: the restart is the only moment it is down. Its rollback
	// installs the backup the same way and restarts. No check (the binary
	// on disk may not be the one running), idempotent (an interrupted step
	// is run again), retried, 3 minutes per attempt.
	StepKubelet = "kubelet"
	StepVerify  = "verify"
	// StepBundle, the first step, checks the staged bundle before anything
	// on the node changes: every tree or file a later step installs from
	// is there; with Config.Checksums, every staged file matches its
	// SHA-256 (sha256sum -c) and every file of a used binary or tree is
	// listed, before anything staged runs; then kubeadm, kubelet and
	// kubectl in the staging directory run and report the target version.
	// An upgrader image carrying another bundle fails here, on an
	// untouched node, instead of at the verify step after the install.
	// Without Checksums it verifies no content and says so.
	StepBundle = "bundle"
	// StepImages (with Config.ImportImages) imports the image archives
	// the bundle carries under images/ into containerd's k8s.io
	// namespace with ctr, before kubeadm needs them: an air-gapped node
	// cannot pull the target version's control plane and etcd images.
	// Importing is idempotent and harmless to undo-less retries; nothing
	// is rolled back (an unused image changes nothing).
	StepImages = "images"
)

// DefaultContainerdSocket is containerd's CRI socket, where the images
// step imports.
const DefaultContainerdSocket = "/run/containerd/containerd.sock"

// DefaultContainerdConfig is containerd's configuration file.
const DefaultContainerdConfig = "/etc/containerd/config.toml"

// Config describes one node's upgrade.
//
// Everything the plan installs comes from StagingDir on the host, which the
// pod builder fills from the upgrader image before the first step (package
// nodepod, StageFrom). Nothing is downloaded, so the plan works
// air-gapped. Expected layout under StagingDir:
//
//	kubernetes/kubeadm, kubernetes/kubelet, kubernetes/kubectl
//	etcd/etcdctl                  (first control plane only)
//	containerd/<rootfs tree>      copied onto / (e.g. usr/local/bin/containerd)
//	cni-plugins/<rootfs tree>     copied onto / (e.g. opt/cni/bin/loopback)
type Config struct {
	// PlanName defaults to "kubeadm-" + a short hash of node and version.
	PlanName string
	// Node is the Kubernetes node name (also used by the verify step).
	Node string
	// Role picks the kubeadm command (upgrade apply or upgrade node) and
	// whether the etcd snapshot is taken.
	Role Role
	// FromVersion and ToVersion are Kubernetes versions in the canonical
	// form `kubeadm version -o short` prints: "v1.31.4", optionally with
	// a pre-release suffix ("v1.31.4-eks-1-31-5"); no build metadata
	// ("+..."). ToVersion must be exactly what the new binaries report.
	FromVersion, ToVersion string
	// StagingDir, BackupDir, BinDir and PKIDir are absolute host paths;
	// StagingDir and BackupDir must not be "/".
	//
	// StagingDir holds what the plan installs (layout above); default
	// DefaultStagingDir.
	StagingDir string
	// BackupDir defaults to DefaultBackupRoot/<plan name>. Backups are
	// kept after success (unlike EKS Anywhere, which deletes them), except
	// the copies of /etc/kubernetes (see KeepEtcBackups).
	BackupDir string
	// KeepEtcBackups is how many copies of /etc/kubernetes (the cluster's
	// CA keys, admin.conf: as secret as anything on the node) are kept in
	// the etc-kubernetes directories of BackupDir and its siblings: this
	// plan's and the newest earlier ones, the older are removed when this
	// plan makes its copy. The copies are readable by root only. 0 means
	// DefaultKeepEtcBackups.
	KeepEtcBackups int
	// KeepEtcdSnapshots is how many etcd snapshots (every Secret of the
	// cluster) are kept in the etcd-snapshot.db files of BackupDir and its
	// siblings: this plan's and the newest earlier ones; the older are
	// removed once this plan's snapshot is saved. Snapshots are written
	// readable by root only (mode 0600). 0 means DefaultKeepEtcdSnapshots.
	KeepEtcdSnapshots int
	// BinDir is where kubeadm, kubelet and kubectl are installed; default
	// DefaultBinDir.
	BinDir string
	// PKIDir holds the etcd client certificates for the snapshot; default
	// DefaultPKIDir.
	PKIDir string
	// SkipContainerd leaves containerd alone (no install, no restart).
	SkipContainerd bool
	// SkipCNIPlugins leaves the CNI plugin binaries alone.
	SkipCNIPlugins bool
	// SkipEtcdSnapshot skips the snapshot on the first control plane (for
	// external etcd, where the snapshot is someone else's job).
	SkipEtcdSnapshot bool
	// ImportImages adds StepImages: the bundle carries images/*.tar
	// (docker or OCI archives of the images the node needs at ToVersion:
	// kube-apiserver, kube-controller-manager, kube-scheduler, etcd, and
	// pause if it changes), imported with ctr through ContainerdSocket.
	// The node must have ctr on its PATH (containerd's packages ship it).
	//
	// The step imports on its own node only. On the first control plane,
	// `kubeadm upgrade apply`'s CreateJob preflight runs a Job with the
	// target version's pause image on ANY schedulable node (workers too,
	// before they are upgraded); on an air-gapped cluster that image must
	// already be on every node when the target's pause version differs
	// (v1.35's is 3.10.1, v1.36's 3.10.2), or the preflight fails after a
	// minute with the Job's pod in ErrImagePull.
	ImportImages bool
	// ContainerdSocket is containerd's socket for ImportImages; default
	// DefaultContainerdSocket.
	ContainerdSocket string
	// ContainerdConfig is containerd's configuration file; default
	// DefaultContainerdConfig. The containerd step backs it up with the
	// tree. When the staged tree installs a containerd of major version 2
	// or newer (its `containerd --version`, the binary at usr/bin or
	// usr/local/bin of the tree), does not carry this file itself, and the
	// file on the node is older than version 3 of containerd's format
	// (containerd 1.x writes version 2, or no version line for 1), the
	// step rewrites it with the new binary's `containerd config migrate`
	// before the restart. containerd 2.x would migrate it in memory at
	// every start; rewriting it once makes the file say what containerd
	// runs, and the backup is what a rollback to containerd 1.x needs (it
	// cannot read the new format). A tree that carries this file installs
	// it as it is, without migration.
	ContainerdConfig string
	// IgnorePreflightErrors names kubeadm preflight checks `kubeadm
	// upgrade` may fail without stopping (its --ignore-preflight-errors,
	// or the UpgradeConfiguration's apply.ignorePreflightErrors on the
	// first control plane): for example SystemVerification, which kubeadm
	// >= v1.35 fails on a cgroup v1 host even when the kubelet runs with
	// failCgroupV1: false. Each is a check name as kubeadm prints it
	// ("[ERROR SystemVerification]"); "all" is refused, since it would also
	// ignore the checks that protect the upgrade. At most
	// MaxIgnorePreflightErrors. The CoreDNS checks are always ignored (see
	// NewPlan).
	IgnorePreflightErrors []string
	// Checksums are the SHA-256 of every staged file the plan runs or
	// installs, keyed by the path relative to StagingDir as sha256sum
	// writes it ("kubernetes/kubeadm", "containerd/usr/local/bin/containerd";
	// ParseChecksums reads that format). They must come from the
	// operator's configuration, never from the bundle they check. The
	// bundle step verifies them on the host, with `sha256sum -c` in
	// StagingDir, before it runs anything staged, and refuses a file of a
	// used tree (containerd, cni-plugins) that is not listed or is not a
	// regular file. They must cover kubeadm, kubelet and kubectl, etcdctl
	// when the snapshot is taken, and each tree the plan installs
	// (ValidateChecksums, then NewPlan, check them).
	//
	// Without Checksums the plan verifies NOTHING: the staged binaries run
	// as root on the node, and the trees are copied onto /, as the image
	// delivered them; the bundle step says so in its output. Set
	// RequireChecksums to refuse such a plan.
	Checksums map[string]string
	// RequireChecksums makes NewPlan refuse a Config without Checksums.
	RequireChecksums bool
	// RollbackOnFailure is copied into the plan. Note that the
	// kubeadm-upgrade step has no automatic rollback: undoing `kubeadm
	// upgrade apply` means restoring the etcd snapshot, a human decision.
	// A failure after it therefore rolls back the later steps and stops
	// at it in PlanStateNeedsAttention, leaving the earlier ones installed.
	RollbackOnFailure bool
}

func (c *Config) defaults() {
	if c.StagingDir == "" {
		c.StagingDir = DefaultStagingDir
	}
	if c.BinDir == "" {
		c.BinDir = DefaultBinDir
	}
	if c.PKIDir == "" {
		c.PKIDir = DefaultPKIDir
	}
	if c.ContainerdSocket == "" {
		c.ContainerdSocket = DefaultContainerdSocket
	}
	if c.ContainerdConfig == "" {
		c.ContainerdConfig = DefaultContainerdConfig
	}
	if c.PlanName == "" {
		sum := sha256.Sum256([]byte(c.Node + "\x00" + c.ToVersion + "\x00" + string(c.Role)))
		c.PlanName = "kubeadm-" + hex.EncodeToString(sum[:])[:12]
	}
	if c.BackupDir == "" {
		c.BackupDir = path.Join(DefaultBackupRoot, c.PlanName)
	}
	if c.KeepEtcBackups == 0 {
		c.KeepEtcBackups = DefaultKeepEtcBackups
	}
	if c.KeepEtcdSnapshots == 0 {
		c.KeepEtcdSnapshots = DefaultKeepEtcdSnapshots
	}
}

// MaxIgnorePreflightErrors bounds Config.IgnorePreflightErrors.
const MaxIgnorePreflightErrors = 32

// preflightCheckName is what kubeadm names a check: letters, digits, dots,
// dashes and underscores ("FileContent--proc-sys-net-ipv4-ip_forward").
var preflightCheckName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidatePreflightErrors checks names as Config.IgnorePreflightErrors
// takes them; field names the caller's field in the error, which wraps
// ErrInvalidConfig.
func ValidatePreflightErrors(field string, names []string) error {
	if len(names) > MaxIgnorePreflightErrors {
		return configError(field, "%d names: at most %d", len(names), MaxIgnorePreflightErrors)
	}
	for i, n := range names {
		if strings.EqualFold(n, "all") {
			return configError(fmt.Sprintf("%s[%d]", field, i), "%q would ignore every preflight check, including the ones that protect the upgrade: name the checks", n)
		}
		if !preflightCheckName.MatchString(n) {
			return configError(fmt.Sprintf("%s[%d]", field, i), "%q is not a kubeadm preflight check name", n)
		}
	}
	return nil
}

// coreDNSPreflightErrors are the CoreDNS checks `kubeadm upgrade` runs
// even when its CoreDNS addon phase is skipped: they fail when the
// installed CoreDNS is a version that kubeadm release does not know (one
// Cluster API installed, or none: "start version ” not supported").
var coreDNSPreflightErrors = []string{"CoreDNSUnsupportedPlugins", "CoreDNSMigration"}

func configError(field, format string, args ...any) error {
	return fmt.Errorf("kubeadm: %s: %w: %s", errtext.Clip(field), ErrInvalidConfig, errtext.Clip(fmt.Sprintf(format, args...)))
}

func absPath(field, p string) error {
	if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return configError(field, "%q is not an absolute path", p)
	}
	return nil
}

// scriptBackupEtcKubernetes copies $3 (/etc/kubernetes) to $1, readable by
// root only, then removes the etc-kubernetes copies of other plans (the
// sibling directories of $1's parent, plan names only) beyond the newest
// $2 counting this one: they hold the cluster's CA keys and admin
// credentials, and would otherwise pile up for ever.
const scriptBackupEtcKubernetes = `set -eu
umask 077
mkdir -p "$1"
chmod 700 "$1"
cp -a "$3"/. "$1"/
# cp -a gave $1 the mode of $3: private again.
chmod 700 "$1"
plan=$(dirname "$1")
root=$(dirname "$plan")
cur=$(basename "$plan")
n=1
for d in $(ls -1t "$root"); do
  case "$d" in *[!a-z0-9.-]*|"$cur") continue ;; esac
  [ -d "$root/$d/etc-kubernetes" ] || continue
  n=$((n + 1))
  [ "$n" -le "$2" ] || rm -rf -- "$root/$d/etc-kubernetes"
done`

// NewPlan returns the upgrade plan for one node. It refuses downgrades and
// skipped minor versions (*VersionError) and bad configuration
// (ErrInvalidConfig) before producing anything.
//
// Kubernetes version gates:
//   - >= 1.31: the first control plane uses `kubeadm upgrade apply
//     --config <file> --yes` with a kubeadm.k8s.io/v1beta4
//     UpgradeConfiguration written by the kubeadm-config step (1.31 is
//     where v1beta4 is GA; kubeadm stopped accepting a
//     ClusterConfiguration there, kubernetes/kubeadm#3054);
//   - 1.30 and older: `kubeadm upgrade apply <version> --yes` with flags.
//     kubeadm 1.30 ships v1beta4 only as an experimental API, and early
//     1.30 patch releases refuse --yes next to --config ("can not mix
//     '--config' with arguments [... yes]", kubernetes-sigs/kubespray#11350),
//     so the flag form is the one every 1.30 patch accepts;
//   - >= 1.32: the CoreDNS addon phase is skipped (skipPhases
//     addon/coredns) because Cluster API owns CoreDNS; before 1.32, the
//     CoreDNS preflight errors caused by CAPI-managed CoreDNS images are
//     ignored instead.
func NewPlan(cfg Config) (nodeexec.Plan, error) {
	cfg.defaults()
	if err := CheckUpgrade(cfg.FromVersion, cfg.ToVersion); err != nil {
		return nodeexec.Plan{}, err
	}
	switch cfg.Role {
	case RoleFirstControlPlane, RoleControlPlane, RoleWorker:
	default:
		return nodeexec.Plan{}, configError("role", "%q (want %s, %s or %s)", cfg.Role, RoleFirstControlPlane, RoleControlPlane, RoleWorker)
	}
	if msgs := validation.IsDNS1123Subdomain(cfg.Node); len(msgs) > 0 {
		return nodeexec.Plan{}, configError("node", "%q: %s", cfg.Node, strings.Join(msgs, "; "))
	}
	for field, p := range map[string]string{"stagingDir": cfg.StagingDir, "backupDir": cfg.BackupDir, "binDir": cfg.BinDir, "pkiDir": cfg.PKIDir, "containerdSocket": cfg.ContainerdSocket, "containerdConfig": cfg.ContainerdConfig} {
		if err := absPath(field, p); err != nil {
			return nodeexec.Plan{}, err
		}
	}
	if err := ValidatePreflightErrors("ignorePreflightErrors", cfg.IgnorePreflightErrors); err != nil {
		return nodeexec.Plan{}, err
	}
	if cfg.KeepEtcBackups < 1 {
		return nodeexec.Plan{}, configError("keepEtcBackups", "%d: must be at least 1 (0 for the default)", cfg.KeepEtcBackups)
	}
	if cfg.KeepEtcdSnapshots < 1 {
		return nodeexec.Plan{}, configError("keepEtcdSnapshots", "%d: must be at least 1 (0 for the default)", cfg.KeepEtcdSnapshots)
	}
	// Steps copy the staging tree onto / and restore backups onto /; with
	// either directory at / itself they would copy the root onto itself.
	for field, p := range map[string]string{"stagingDir": cfg.StagingDir, "backupDir": cfg.BackupDir} {
		if path.Clean(p) == "/" {
			return nodeexec.Plan{}, configError(field, "%q: must not be the root directory", p)
		}
	}
	if len(cfg.Checksums) == 0 && cfg.RequireChecksums {
		return nodeexec.Plan{}, configError("checksums", "none given, and RequireChecksums is set: nothing staged would be verified before it runs as root")
	}
	if len(cfg.Checksums) > 0 {
		if err := ValidateChecksums(cfg.Checksums); err != nil {
			return nodeexec.Plan{}, err
		}
		if err := cfg.checkCoverage(); err != nil {
			return nodeexec.Plan{}, err
		}
	}
	to, _ := parse(cfg.ToVersion)
	b := builder{cfg: cfg, gate131: atLeast(to, 31), gate132: atLeast(to, 32)}
	plan := nodeexec.Plan{
		Name:              cfg.PlanName,
		Node:              cfg.Node,
		Role:              string(cfg.Role),
		FromVersion:       cfg.FromVersion,
		ToVersion:         cfg.ToVersion,
		RollbackOnFailure: cfg.RollbackOnFailure,
		Steps:             b.steps(),
	}
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}

type builder struct {
	cfg              Config
	gate131, gate132 bool
}

func (b builder) staging(p ...string) string {
	return path.Join(append([]string{b.cfg.StagingDir}, p...)...)
}
func (b builder) backup(p ...string) string {
	return path.Join(append([]string{b.cfg.BackupDir}, p...)...)
}
func (b builder) bin(name string) string { return path.Join(b.cfg.BinDir, name) }

// Shell scripts are constants; every path and version is a positional
// argument.
const (
	// $1 staging tree, $2 backup dir: copy aside every host file the tree
	// would overwrite and list the ones it would add.
	scriptBackupTree = `set -eu
mkdir -p "$2"
: > "$2.added"
cd "$1"
find . \( -type f -o -type l \) | while IFS= read -r f; do
  f=${f#./}
  if [ -e "/$f" ] || [ -L "/$f" ]; then
    mkdir -p "$2/$(dirname "$f")"
    cp -a -- "/$f" "$2/$f"
  else
    printf '%s\n' "$f" >> "$2.added"
  fi
done`
	// $1 staging tree, $2 backup dir, $3 containerd's configuration file:
	// scriptBackupTree, plus the configuration when the tree does not
	// carry it (the install may migrate it).
	scriptBackupContainerd = scriptBackupTree + `
if [ -f "$3" ] && [ ! -e "$1$3" ]; then
  mkdir -p "$2/$(dirname "$3")"
  cp -a -- "$3" "$2$3"
fi`
	// $1 backup dir: put the saved files back and remove added ones.
	scriptRestoreTree = `set -eu
cp -af -- "$1"/. /
if [ -f "$1.added" ]; then
  while IFS= read -r f; do rm -f -- "/$f"; done < "$1.added"
fi`
	// $1 staging tree: install it onto /. -f replaces busy executables.
	scriptInstallTree = `set -eu
cp -af -- "$1"/. /`
	// $1 host binary, $2 backup file.
	scriptBackupFile = `set -eu
mkdir -p "$(dirname "$2")"
cp -a -- "$1" "$2"`
	// $1 source, $2 destination: replace a binary atomically.
	scriptInstallFile = `set -eu
cp -f -- "$1" "$2.upgradekit-new"
chmod 0755 "$2.upgradekit-new"
mv -f -- "$2.upgradekit-new" "$2"`
	// $1 file, content in UPGRADEKIT_FILE_CONTENT.
	scriptWriteFile = `set -eu
umask 077
mkdir -p "$(dirname "$1")"
printf '%s' "$UPGRADEKIT_FILE_CONTENT" > "$1.tmp"
mv -f -- "$1.tmp" "$1"`
	// $1 staged images directory, $2 containerd socket: import every
	// archive into the k8s.io namespace (where the kubelet looks).
	scriptImportImages = `set -eu
command -v ctr >/dev/null 2>&1 || { echo "images: ctr is not on the node's PATH" >&2; exit 1; }
n=0
for f in "$1"/*.tar; do
  [ -f "$f" ] || continue
  ctr --address "$2" -n k8s.io images import "$f"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "images: no image archive (*.tar) in $1" >&2; exit 1; }
echo "images: imported $n archive(s)"`
	// $1 etcdctl, $2 snapshot file, $3 PKI dir, $4 how many snapshots to
	// keep. The snapshot holds every Secret of the cluster: it is written
	// readable by root only, and once it is saved the etcd-snapshot.db
	// files of other plans (the sibling directories of $2's directory,
	// plan names only) beyond the newest $4 counting this one are removed.
	scriptEtcdSnapshot = `set -eu
umask 077
mkdir -p "$(dirname "$2")"
ETCDCTL_API=3 "$1" --endpoints=https://127.0.0.1:2379 \
  --cacert="$3/etcd/ca.crt" --cert="$3/apiserver-etcd-client.crt" --key="$3/apiserver-etcd-client.key" \
  snapshot save "$2"
chmod 600 "$2"
plan=$(dirname "$2")
root=$(dirname "$plan")
cur=$(basename "$plan")
snap=$(basename "$2")
cd "$root"
n=1
ls -1td -- */"$snap" 2>/dev/null | while IFS= read -r f; do
  d=${f%/*}
  case "$d" in *[!a-z0-9.-]*|"$cur") continue ;; esac
  [ -f "$f" ] || continue
  n=$((n + 1))
  [ "$n" -le "$4" ] || rm -f -- "$f"
done`
	// $1 staging tree, $2 backup dir (scriptBackupContainerd's), $3 unit,
	// $4 containerd's configuration file: install the tree; migrate the
	// configuration to the installed containerd's format when that
	// containerd is 2.x or newer, the file is older than version 3 and the
	// tree does not carry it; restart the unit and check it stays up. If
	// the migration fails or the unit does not stay up, put the backup
	// back (configuration included) and restart again before failing, so
	// the step never ends with the unit down.
	scriptInstallContainerdRestart = `set -u
up() { systemctl daemon-reload && systemctl restart "$1" && sleep 2 && systemctl is-active --quiet "$1"; }
migrate() {
  [ -f "$4" ] || return 0
  [ ! -e "$1$4" ] || return 0
  bin=$(cd "$1" && find . -type f -path '*/bin/containerd' | sort | head -n 1)
  [ -n "$bin" ] || return 0
  bin=/${bin#./}
  major=$("$bin" --version 2>/dev/null | sed -n 's/^containerd [^ ]* v\{0,1\}\([0-9][0-9]*\)\..*/\1/p')
  [ -n "$major" ] && [ "$major" -ge 2 ] || return 0
  cv=$(sed -n 's/^version[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$4" | head -n 1)
  [ "${cv:-1}" -lt 3 ] || return 0
  cp -p -- "$4" "$4.upgradekit-new" &&
    "$bin" --config "$4" config migrate > "$4.upgradekit-new" 2>/dev/null &&
    grep -q '^version' "$4.upgradekit-new" &&
    mv -f -- "$4.upgradekit-new" "$4" || {
    rm -f -- "$4.upgradekit-new"
    echo "containerd: $bin could not migrate $4" >&2
    return 1
  }
  echo "containerd: migrated $4 from version ${cv:-1} for containerd $major.x"
}
cp -af -- "$1"/. / || exit 1
if migrate "$@" && up "$3"; then exit 0; fi
echo "$3 did not stay up after the install; restoring $2" >&2
cp -af -- "$2"/. /
if [ -f "$2.added" ]; then
  while IFS= read -r f; do rm -f -- "/$f"; done < "$2.added"
fi
up "$3" || echo "$3 did not come back with the restored files either" >&2
exit 1`
	// $1 new binary, $2 installed path, $3 backup of the installed one,
	// $4 unit: replace the binary atomically, restart the unit and check it
	// stays up; if it does not, put the backup back and restart again
	// before failing, so the step never ends with the unit down. The unit
	// is never stopped on its own: the running process keeps the old
	// binary until the restart replaces it.
	scriptReplaceBinaryRestart = `set -u
up() { systemctl daemon-reload && systemctl restart "$1" && sleep 2 && systemctl is-active --quiet "$1"; }
install() { cp -f -- "$1" "$2.upgradekit-new" && chmod 0755 "$2.upgradekit-new" && mv -f -- "$2.upgradekit-new" "$2"; }
install "$1" "$2" || exit 1
if up "$4"; then exit 0; fi
echo "$4 did not stay up with $1; restoring $3" >&2
install "$3" "$2" && up "$4" || echo "$4 did not come back with the restored binary either" >&2
exit 1`
	// $1 staged kubernetes dir (its parent is the staging directory, the
	// base of the checksums), $2 version, then the staged paths later steps
	// install from (a directory must not be empty); the checksums, in
	// sha256sum's format, in $UPGRADEKIT_BUNDLE_SHA256SUMS. Nothing staged
	// runs before the checksums are verified: every listed file with
	// `sha256sum -c` in the staging directory, and every file of the
	// binaries and trees the plan uses listed, regular, not a link.
	scriptBundle = `set -eu
fail() { echo "bundle: $*" >&2; exit 1; }
k=$1 v=$2
shift 2
s=$(dirname -- "$k")
for p in "$k/kubeadm" "$k/kubelet" "$k/kubectl" "$@"; do
  if [ -d "$p" ]; then
    [ -n "$(ls -A "$p")" ] || fail "staged $p is empty"
  else
    [ -e "$p" ] || fail "staged $p is missing"
  fi
done
sums=${UPGRADEKIT_BUNDLE_SHA256SUMS:-}
if [ -z "$sums" ]; then
  echo "bundle: WARNING: no checksums given: nothing staged is verified before it runs as root" >&2
else
  cd "$s"
  printf '%s\n' "$sums" | sha256sum --check --strict --quiet - >&2 || fail "staged files do not match their checksums: the upgrader image is not the bundle the checksums describe"
  listed=$(printf '%s\n' "$sums" | cut -c67-)
  for p in "$k/kubeadm" "$k/kubelet" "$k/kubectl" "$@"; do
    r=${p#"$s"/}
    odd=$(find "$r" ! -type f ! -type d -print)
    [ -z "$odd" ] || fail "staged $odd is not a regular file or directory"
    unlisted=$(find "$r" -type f -print | while IFS= read -r f; do printf '%s\n' "$listed" | grep -qxF -- "$f" || printf '%s\n' "$f"; done)
    [ -z "$unlisted" ] || fail "staged $unlisted has no checksum"
  done
  echo "bundle: staged files match their checksums"
fi
got=$("$k/kubeadm" version -o short) || fail "staged $k/kubeadm does not run"
[ "$got" = "$v" ] || fail "staged kubeadm is $got, want $v: the upgrader image carries another bundle"
got=$("$k/kubelet" --version) || fail "staged $k/kubelet does not run"
[ "$got" = "Kubernetes $v" ] || fail "staged kubelet is '$got', want $v: the upgrader image carries another bundle"
"$k/kubectl" version --client 2>/dev/null | grep -qxF "Client Version: $v" || fail "staged kubectl is not $v: the upgrader image carries another bundle"
echo "bundle: $v staged"`
	// $1 kubeadm, $2 kubelet, $3 kubectl, $4 version, $5 node, $6 role.
	// The kubelet version is read from the Node object, i.e. what the
	// running kubelet reports, not just what is on disk.
	scriptVerify = `set -eu
fail() { echo "verify: $*" >&2; exit 1; }
got=$("$1" version -o short) || fail "kubeadm version"
[ "$got" = "$4" ] || fail "kubeadm is $got, want $4"
got=$("$2" --version) || fail "kubelet --version"
[ "$got" = "Kubernetes $4" ] || fail "kubelet binary is '$got', want $4"
"$3" version --client 2>/dev/null | grep -qxF "Client Version: $4" || fail "kubectl client is not $4"
systemctl is-active --quiet containerd || fail "containerd is not active"
systemctl is-active --quiet kubelet || fail "kubelet is not active"
kc=/etc/kubernetes/kubelet.conf
[ "$6" = worker ] || kc=/etc/kubernetes/admin.conf
got=$("$3" --kubeconfig "$kc" get node "$5" -o 'jsonpath={.status.nodeInfo.kubeletVersion}') || fail "reading node $5"
[ "$got" = "$4" ] || fail "running kubelet reports $got, want $4"
if [ "$6" != worker ]; then
  img=$("$3" --kubeconfig "$kc" -n kube-system get pod "kube-apiserver-$5" -o 'jsonpath={.status.containerStatuses[0].image}') || fail "reading kube-apiserver-$5"
  case "$img" in *":$4") ;; *) fail "kube-apiserver runs $img, want tag $4" ;; esac
fi
echo "verified $5 at $4"`
)

func (b builder) steps() []nodeexec.Step {
	c := b.cfg
	var steps []nodeexec.Step
	add := func(s nodeexec.Step) { steps = append(steps, s) }
	retry := nodeexec.RetryPolicy{Attempts: 3, Backoff: 5 * time.Second, MaxBackoff: 30 * time.Second}

	bundle := []string{b.staging("kubernetes"), c.ToVersion}
	if c.Role == RoleFirstControlPlane && !c.SkipEtcdSnapshot {
		bundle = append(bundle, b.staging("etcd", "etcdctl"))
	}
	if !c.SkipContainerd {
		bundle = append(bundle, b.staging("containerd"))
	}
	if !c.SkipCNIPlugins {
		bundle = append(bundle, b.staging("cni-plugins"))
	}
	if c.ImportImages {
		bundle = append(bundle, b.staging("images"))
	}
	bundleStep := nodeexec.Step{
		Name:       StepBundle,
		Argv:       nodeexec.ShellArgv(scriptBundle, bundle...),
		Timeout:    time.Minute,
		Idempotent: true,
		// It only reads the staging directory.
		NothingToUndo: true,
	}
	if len(c.Checksums) > 0 {
		bundleStep.Env = []nodeexec.EnvVar{{Name: ChecksumsEnv, Value: FormatChecksums(c.Checksums)}}
	}
	add(bundleStep)
	if c.Role == RoleFirstControlPlane && !c.SkipEtcdSnapshot {
		add(nodeexec.Step{
			Name: StepEtcdSnapshot,
			Argv: nodeexec.ShellArgv(scriptEtcdSnapshot, b.staging("etcd", "etcdctl"), b.backup("etcd-snapshot.db"), c.PKIDir,
				strconv.Itoa(c.KeepEtcdSnapshots)),
			Timeout:    5 * time.Minute,
			Retry:      retry,
			Idempotent: true,
			// The snapshot is what a human restores from; it changes nothing.
			NothingToUndo: true,
		})
	}
	if !c.SkipContainerd {
		// containerd's tree, its configuration migrated for a new major
		// version, restarted in the same step (scriptInstallContainerdRestart).
		tree, bak := b.staging("containerd"), b.backup("containerd")
		add(nodeexec.Step{
			Name:   StepContainerd,
			Argv:   nodeexec.ShellArgv(scriptInstallContainerdRestart, tree, bak, "containerd", c.ContainerdConfig),
			Backup: nodeexec.ShellArgv(scriptBackupContainerd, tree, bak, c.ContainerdConfig),
			Rollback: nodeexec.ShellArgv(scriptRestoreTree+"\n"+`systemctl daemon-reload
systemctl restart "$2"
sleep 2
systemctl is-active --quiet "$2"`, bak, "containerd"),
			Timeout:    5 * time.Minute,
			Retry:      retry,
			Idempotent: true,
		})
	}
	if !c.SkipCNIPlugins {
		tree, bak := b.staging("cni-plugins"), b.backup("cni-plugins")
		add(nodeexec.Step{
			Name:       StepCNIPlugins,
			Argv:       nodeexec.ShellArgv(scriptInstallTree, tree),
			Backup:     nodeexec.ShellArgv(scriptBackupTree, tree, bak),
			Rollback:   nodeexec.ShellArgv(scriptRestoreTree, bak),
			Timeout:    5 * time.Minute,
			Idempotent: true,
		})
	}
	binary := func(name, file string) nodeexec.Step {
		src, dst, bak := b.staging("kubernetes", file), b.bin(file), b.backup("bin", file)
		return nodeexec.Step{
			Name:     name,
			Argv:     nodeexec.ShellArgv(scriptInstallFile, src, dst),
			Check:    []string{"cmp", "-s", "--", src, dst},
			Backup:   nodeexec.ShellArgv(scriptBackupFile, dst, bak),
			Rollback: nodeexec.ShellArgv(scriptInstallFile, bak, dst),
			Timeout:  2 * time.Minute,
			// Copying is safe to repeat; the check just saves the work.
			Idempotent: true,
		}
	}
	add(binary(StepKubeadmBinary, "kubeadm"))
	if c.ImportImages {
		add(nodeexec.Step{
			Name:          StepImages,
			Argv:          nodeexec.ShellArgv(scriptImportImages, b.staging("images"), c.ContainerdSocket),
			Timeout:       10 * time.Minute,
			Retry:         retry,
			Idempotent:    true,
			NothingToUndo: true,
		})
	}

	kubeadm := b.bin("kubeadm")
	upgrade := nodeexec.Step{
		Name:       StepKubeadmUpgrade,
		Timeout:    15 * time.Minute,
		Retry:      nodeexec.RetryPolicy{Attempts: 2, Backoff: 30 * time.Second},
		Idempotent: true, // kubeadm documents `kubeadm upgrade` as idempotent
		// No Rollback and not NothingToUndo on purpose: a plan rollback stops
		// here (PlanStateNeedsAttention) instead of putting the old kubeadm,
		// containerd and CNI plugins under an upgraded control plane.
		// Keep a copy of /etc/kubernetes for manual recovery; kubeadm keeps
		// its own in /etc/kubernetes/tmp as well.
		Backup: nodeexec.ShellArgv(scriptBackupEtcKubernetes, b.backup("etc-kubernetes"), strconv.Itoa(c.KeepEtcBackups), "/etc/kubernetes"),
	}
	ignore := func(names ...string) string {
		return "--ignore-preflight-errors=" + strings.Join(names, ",")
	}
	withCoreDNS := append(append([]string{}, coreDNSPreflightErrors...), c.IgnorePreflightErrors...)
	switch c.Role {
	case RoleFirstControlPlane:
		if b.gate131 {
			cfgPath := b.staging("kubeadm-upgrade-config.yaml")
			add(nodeexec.Step{
				Name:       StepKubeadmConfig,
				Argv:       nodeexec.ShellArgv(scriptWriteFile, cfgPath),
				Env:        []nodeexec.EnvVar{{Name: "UPGRADEKIT_FILE_CONTENT", Value: UpgradeConfiguration(c.ToVersion, c.IgnorePreflightErrors...)}},
				Timeout:    time.Minute,
				Idempotent: true,
				// Only writes a file in the staging directory.
				NothingToUndo: true,
			})
			upgrade.Argv = []string{kubeadm, "upgrade", "apply", "--config", cfgPath, "--yes"}
		} else {
			upgrade.Argv = []string{kubeadm, "upgrade", "apply", c.ToVersion, "--yes", ignore(withCoreDNS...)}
		}
	case RoleControlPlane:
		// `kubeadm upgrade node` runs no CoreDNS check (only
		// SystemVerification and the runtime version); before 1.32 its
		// CoreDNS phase still did.
		if b.gate132 {
			upgrade.Argv = []string{kubeadm, "upgrade", "node", "--skip-phases=addon/coredns"}
			if len(c.IgnorePreflightErrors) > 0 {
				upgrade.Argv = append(upgrade.Argv, ignore(c.IgnorePreflightErrors...))
			}
		} else {
			upgrade.Argv = []string{kubeadm, "upgrade", "node", ignore(withCoreDNS...)}
		}
	case RoleWorker:
		upgrade.Argv = []string{kubeadm, "upgrade", "node"}
		if len(c.IgnorePreflightErrors) > 0 {
			upgrade.Argv = append(upgrade.Argv, ignore(c.IgnorePreflightErrors...))
		}
	}
	add(upgrade)
	add(binary(StepKubectlBinary, "kubectl"))
	// The kubelet is replaced and restarted in one step (see the step
	// list above). No Check: a binary already in place may not be the one
	// running, and restarting the kubelet again is harmless.
	kubeletSrc, kubeletDst, kubeletBak := b.staging("kubernetes", "kubelet"), b.bin("kubelet"), b.backup("bin", "kubelet")
	add(nodeexec.Step{
		Name:     StepKubelet,
		Argv:     nodeexec.ShellArgv(scriptReplaceBinaryRestart, kubeletSrc, kubeletDst, kubeletBak, "kubelet"),
		Backup:   nodeexec.ShellArgv(scriptBackupFile, kubeletDst, kubeletBak),
		Rollback: nodeexec.ShellArgv(scriptReplaceBinaryRestart, kubeletBak, kubeletDst, kubeletBak, "kubelet"),
		Timeout:  3 * time.Minute,
		Retry:    retry,
		// Installing the same binary and restarting again is safe.
		Idempotent: true,
	})
	add(nodeexec.Step{
		Name: StepVerify,
		Argv: nodeexec.ShellArgv(scriptVerify, kubeadm, b.bin("kubelet"), b.bin("kubectl"), c.ToVersion, c.Node, string(c.Role)),
		// The kubelet needs a few seconds to report its new version.
		Retry:         nodeexec.RetryPolicy{Attempts: 12, Backoff: 5 * time.Second, MaxBackoff: 10 * time.Second},
		Timeout:       time.Minute,
		Idempotent:    true,
		NothingToUndo: true,
	})
	return steps
}

// UpgradeConfiguration returns the kubeadm.k8s.io/v1beta4
// UpgradeConfiguration the first control plane uses for Kubernetes >= 1.31
// (written by the kubeadm-config step; NewPlan does not use it for 1.30,
// where v1beta4 is still experimental). For >= 1.32 it skips the CoreDNS
// addon phase, which Cluster API manages. At every version it ignores the
// CoreDNS preflight errors (CoreDNSUnsupportedPlugins, CoreDNSMigration):
// kubeadm runs those checks even when the addon phase is skipped, and
// they fail on a CoreDNS kubeadm does not know (Cluster API's, or none),
// as a real kubeadm v1.37 node showed. ignorePreflightErrors are added
// (the caller validates them; NewPlan does).
func UpgradeConfiguration(toVersion string, ignorePreflightErrors ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: UpgradeConfiguration\napply:\n")
	fmt.Fprintf(&b, "  kubernetesVersion: %q\n", toVersion)
	// Not forceUpgrade: that also overrides kubeadm's own safety checks.
	// The command line passes --yes for non-interactive mode instead.
	b.WriteString("  etcdUpgrade: true\n  certificateRenewal: true\n")
	v, err := parse(toVersion)
	if err == nil && atLeast(v, 32) {
		b.WriteString("  skipPhases:\n  - addon/coredns\n")
	}
	b.WriteString("  ignorePreflightErrors:\n")
	for _, n := range append(append([]string{}, coreDNSPreflightErrors...), ignorePreflightErrors...) {
		fmt.Fprintf(&b, "  - %s\n", n)
	}
	return b.String()
}
