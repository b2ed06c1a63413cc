package kubeadm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// Step names of the files plan (NewFilesPlan), in order.
const (
	// StepFiles writes every file (content, mode, owner) through a
	// temporary file renamed over the target, after backing up what each
	// path held (or that it held nothing). Its check skips it when every
	// file already matches; its rollback puts the backups back and removes
	// the files that did not exist.
	StepFiles = "files"
	// StepFilesVerify checks every file's SHA-256, mode and owner on the
	// host.
	StepFilesVerify = "files-verify"
)

// MaxFilesContent bounds the total content of a files plan. The plan
// travels in the upgrader pod's spec, once per container (base64 adds a
// third), and a pod must fit in the API server's 1.5 MiB object limit.
const MaxFilesContent = 32 << 10

// FilesEnvPrefix prefixes the environment variables that carry the files'
// contents (base64) to StepFiles: FilesEnvPrefix + the file's index.
const FilesEnvPrefix = "UPGRADEKIT_FILE_"

// File is one file the files plan writes.
type File struct {
	// Path is absolute and clean.
	Path string
	// Content is written as is.
	Content []byte
	// Permissions is the octal mode ("0644", "600"); default "0644", as
	// cloud-init's write_files.
	Permissions string
	// Owner is "user" or "user:group" (names or numeric IDs); default
	// "root:root", as cloud-init's write_files.
	Owner string
}

// FilesConfig configures NewFilesPlan.
type FilesConfig struct {
	// PlanName defaults to "files-" + a short hash of the node and files.
	PlanName string
	// Node is the Kubernetes node name.
	Node string
	// Files are written in order; at least one, paths unique.
	Files []File
	// BackupDir defaults to DefaultBackupRoot/<plan name>; not "/".
	BackupDir string
	// RollbackOnFailure is copied into the plan: a failed verification
	// then puts the previous files back.
	RollbackOnFailure bool
	// AllowedDirs are the host directories files may be written under
	// (anywhere below them, never the directory itself); empty means
	// DefaultFilesAllowedDirs. Each is absolute and clean, not "/", not
	// under a path no files plan writes (kubeadm's keys and kubeconfigs,
	// the kubelet's and upgradekit's state, /proc, /sys, /dev). Those
	// paths stay refused inside an allowed directory too.
	//
	// Whoever can edit the files (a KubeadmConfig, its template, a
	// KubeadmControlPlane) is root on the node anyway, at the latest when
	// the bootstrap provider makes the next machine; the allowlist limits
	// what an in-place update writes as root, not who is trusted.
	AllowedDirs []string
}

// DefaultFilesAllowedDirs returns the directories a files plan writes
// under when FilesConfig.AllowedDirs is empty: /etc/kubernetes (kubeadm's
// own files in it excepted: pki, the kubeconfigs, manifests, tmp; audit
// policies, encryption and admission configurations are the usual files
// here), /etc/sysctl.d and /etc/modules-load.d (kernel settings a node
// needs for Kubernetes, read at boot) and /etc/containerd/certs.d
// (registry hosts and certificates). Not the kubelet's or containerd's
// systemd units, nor containerd's config.toml: they name the programs
// root starts.
func DefaultFilesAllowedDirs() []string {
	return []string{"/etc/kubernetes", "/etc/sysctl.d", "/etc/modules-load.d", "/etc/containerd/certs.d"}
}

// protectedPrefixes are host paths a files plan never writes: kubeadm's
// certificates and keys and kubeconfigs (kubeadm owns them; a file there
// could hand the cluster to whoever wrote the KubeadmConfig, and a
// rollback of ours would fight kubeadm's own renewals), the kubelet's
// state, and upgradekit's own staging, journal and backups.
// The write, backup, rollback and verification scripts check the same
// prefixes on the host, against the real path of each file's directory.
var protectedPrefixes = []string{
	"/etc/kubernetes/pki", "/etc/kubernetes/admin.conf", "/etc/kubernetes/super-admin.conf",
	"/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf", "/etc/kubernetes/controller-manager.conf",
	"/etc/kubernetes/scheduler.conf", "/etc/kubernetes/manifests", "/etc/kubernetes/tmp",
	"/var/lib/kubelet", "/var/lib/etcd", "/var/lib/upgradekit",
	"/proc", "/sys", "/dev",
}

// protectedBy returns the protected prefix p is or is under, "" if none.
func protectedBy(p string) string {
	for _, x := range protectedPrefixes {
		if p == x || strings.HasPrefix(p, x+"/") {
			return x
		}
	}
	return ""
}

// cleanAbs reports whether p is a clean absolute path other than "/" that
// a shell script can take as an argument.
func cleanAbs(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && p != "/" && !strings.ContainsAny(p, "\x00\n\r")
}

var ownerPart = regexp.MustCompile(`^([a-z_][a-z0-9_.-]*\$?|[0-9]+)$`)

// octalMode parses a permission string into its canonical octal form
// ("0644" -> "644").
func octalMode(p string) (string, error) {
	v, err := strconv.ParseUint(p, 8, 32)
	if err != nil || v > 0o7777 {
		return "", fmt.Errorf("%q is not an octal mode", p)
	}
	return strconv.FormatUint(v, 8), nil
}

// withDefaults fills an empty Permissions and Owner with cloud-init's
// defaults.
func (f File) withDefaults() File {
	if f.Permissions == "" {
		f.Permissions = "0644"
	}
	if f.Owner == "" {
		f.Owner = "root:root"
	}
	return f
}

func (c *FilesConfig) defaults() {
	c.Files = slices.Clone(c.Files)
	for i := range c.Files {
		c.Files[i] = c.Files[i].withDefaults()
	}
	if c.PlanName == "" {
		sum := sha256.New()
		fmt.Fprintf(sum, "%s\x00", c.Node)
		for _, f := range c.Files {
			fmt.Fprintf(sum, "%s\x00%s\x00%s\x00%x\x00", f.Path, f.Permissions, f.Owner, sha256.Sum256(f.Content))
		}
		c.PlanName = "files-" + hex.EncodeToString(sum.Sum(nil))[:12]
	}
	if c.BackupDir == "" {
		c.BackupDir = path.Join(DefaultBackupRoot, c.PlanName)
	}
}

// ValidateFile reports, as an error wrapping ErrInvalidConfig and naming
// the field, why NewFilesPlan with FilesConfig.AllowedDirs allowedDirs
// would refuse f (field prefixes the field names, e.g. "files[2]"): a path
// that is not clean and absolute, not under one of allowedDirs (empty:
// DefaultFilesAllowedDirs) or under a path no files plan writes; a mode
// with setuid, setgid or sticky bits or writable by group or others; an
// owner that is not user or user:group; or an allowed directory that
// FilesConfig.AllowedDirs would refuse ("allowedDirs[i]"). An empty
// Permissions or Owner takes the default, as in NewFilesPlan.
func ValidateFile(field string, f File, allowedDirs []string) error {
	if err := validateAllowedDirs(allowedDirs); err != nil {
		return err
	}
	if len(allowedDirs) == 0 {
		allowedDirs = DefaultFilesAllowedDirs()
	}
	f = f.withDefaults()
	if err := absPath(field+".path", f.Path); err != nil {
		return err
	}
	if !cleanAbs(f.Path) {
		return configError(field+".path", "%q is not a clean absolute file path", f.Path)
	}
	if x := protectedBy(f.Path); x != "" {
		return configError(field+".path", "%q is under %s, which is not written in place", f.Path, x)
	}
	if !slices.ContainsFunc(allowedDirs, func(d string) bool { return strings.HasPrefix(f.Path, d+"/") }) {
		return configError(field+".path", "%q is not under an allowed directory (%s)", f.Path, strings.Join(allowedDirs, ", "))
	}
	mode, err := octalMode(f.Permissions)
	if err != nil {
		return configError(field+".permissions", "%v", err)
	}
	switch v, _ := strconv.ParseUint(mode, 8, 32); {
	case v&0o7000 != 0:
		return configError(field+".permissions", "%q has the setuid, setgid or sticky bit", f.Permissions)
	case v&0o022 != 0:
		return configError(field+".permissions", "%q is writable by group or others", f.Permissions)
	}
	user, group, hasGroup := strings.Cut(f.Owner, ":")
	if !ownerPart.MatchString(user) || (hasGroup && !ownerPart.MatchString(group)) {
		return configError(field+".owner", "%q is not user or user:group", f.Owner)
	}
	return nil
}

func (c FilesConfig) validate() error {
	if msgs := validation.IsDNS1123Subdomain(c.Node); len(msgs) > 0 {
		return configError("node", "%q: %s", c.Node, strings.Join(msgs, "; "))
	}
	if err := absPath("backupDir", c.BackupDir); err != nil {
		return err
	}
	if path.Clean(c.BackupDir) == "/" {
		return configError("backupDir", "must not be the root directory")
	}
	if err := validateAllowedDirs(c.AllowedDirs); err != nil {
		return err
	}
	if len(c.Files) == 0 {
		return configError("files", "no file to write")
	}
	seen := map[string]bool{}
	total := 0
	for i, f := range c.Files {
		field := fmt.Sprintf("files[%d]", i)
		if err := ValidateFile(field, f, c.AllowedDirs); err != nil {
			return err
		}
		if seen[f.Path] {
			return configError(field+".path", "%q twice", f.Path)
		}
		seen[f.Path] = true
		total += len(f.Content)
	}
	if total > MaxFilesContent {
		return configError("files", "%d bytes of content, more than the %d an upgrader pod can carry", total, MaxFilesContent)
	}
	return nil
}

// validateAllowedDirs checks FilesConfig.AllowedDirs.
func validateAllowedDirs(dirs []string) error {
	for i, d := range dirs {
		field := fmt.Sprintf("allowedDirs[%d]", i)
		if !cleanAbs(d) {
			return configError(field, "%q is not a clean absolute directory other than /", d)
		}
		if x := protectedBy(d); x != "" {
			return configError(field, "%q is under %s, which is not written in place", d, x)
		}
	}
	return nil
}

// filesSafe is the prelude of the files plan's scripts: fail, and safe P,
// which fails unless P is absent or a regular file (not a symbolic link),
// the real path of its directory (of its nearest existing ancestor, while
// the directory does not exist) is the path as written (no symbolic link
// on the way: one could lead into a directory no files plan writes), and
// neither P nor that directory is under a protected prefix.
var filesSafe = `fail() { echo "files: $*" >&2; exit 1; }
protected='` + strings.Join(protectedPrefixes, " ") + `'
safe() {
  d=$(dirname -- "$1")
  while [ ! -e "$d" ] && [ ! -L "$d" ]; do d=$(dirname -- "$d"); done
  r=$(readlink -f -- "$d") || fail "cannot resolve $d"
  [ "$r" = "$d" ] || fail "$d resolves to $r: a symbolic link on the way to $1"
  [ -d "$d" ] || fail "$d is not a directory"
  for x in $protected; do
    case "$1/" in "$x"/*) fail "$1 is under $x" ;; esac
    case "$r/" in "$x"/*) fail "$1 is under $x" ;; esac
  done
  if [ -L "$1" ]; then fail "$1 is a symbolic link"; fi
  if [ -e "$1" ] && [ ! -f "$1" ]; then fail "$1 is not a regular file"; fi
}
`

// Scripts of the files plan; every path, mode, owner and checksum is an
// argument, every content an environment variable read by its name. Each
// checks every path with safe (filesSafe) before it changes anything.
var (
	// $1 backup dir, then the paths: each saved as <dir>/<i> (cp -a) or
	// marked absent with <dir>/<i>.absent.
	scriptFilesBackup = "set -eu\n" + filesSafe + `dir=$1
shift
for p in "$@"; do safe "$p"; done
mkdir -p "$dir"
i=0
for p in "$@"; do
  rm -rf -- "$dir/$i" "$dir/$i.absent"
  if [ -e "$p" ]; then cp -a -- "$p" "$dir/$i"; else : > "$dir/$i.absent"; fi
  i=$((i+1))
done`
	// Per file: path, mode, owner; content in $UPGRADEKIT_FILE_<i>.
	scriptFilesWrite = "set -eu\n" + filesSafe + `n=0
for a in "$@"; do
  [ $((n % 3)) -ne 0 ] || safe "$a"
  n=$((n+1))
done
i=0
while [ $# -gt 0 ]; do
  p=$1 mode=$2 owner=$3
  shift 3
  mkdir -p -- "$(dirname -- "$p")"
  safe "$p"
  tmp=$(mktemp -- "$p.upgradekit.XXXXXX")
  printenv "UPGRADEKIT_FILE_$i" | base64 -d > "$tmp"
  chmod -- "$mode" "$tmp"
  chown -- "$owner" "$tmp"
  mv -f -- "$tmp" "$p"
  i=$((i+1))
done`
	// Per file: path, sha256, mode (canonical octal), owner.
	scriptFilesVerify = "set -eu\n" + filesSafe + `n=0
for a in "$@"; do
  [ $((n % 4)) -ne 0 ] || safe "$a"
  n=$((n+1))
done
while [ $# -gt 0 ]; do
  p=$1 sum=$2 mode=$3 owner=$4
  shift 4
  [ -f "$p" ] || fail "$p is missing"
  got=$(sha256sum < "$p" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || fail "$p has content sha256 $got, want $sum"
  m=$(stat -c '%a' -- "$p")
  [ "$m" = "$mode" ] || fail "$p has mode $m, want $mode"
  u=${owner%%:*}
  un=$(stat -c '%U' -- "$p") ui=$(stat -c '%u' -- "$p")
  [ "$u" = "$un" ] || [ "$u" = "$ui" ] || fail "$p is owned by $un, want $u"
  case "$owner" in
  *:*)
    g=${owner#*:}
    gn=$(stat -c '%G' -- "$p") gi=$(stat -c '%g' -- "$p")
    [ "$g" = "$gn" ] || [ "$g" = "$gi" ] || fail "$p has group $gn, want $g" ;;
  esac
done
echo "files verified"`
	// $1 backup dir, then the paths: each restored from <dir>/<i>, or
	// removed when <dir>/<i>.absent says it did not exist.
	scriptFilesRollback = "set -eu\n" + filesSafe + `dir=$1
shift
for p in "$@"; do safe "$p"; done
i=0
for p in "$@"; do
  if [ -e "$dir/$i.absent" ]; then rm -f -- "$p"; elif [ -e "$dir/$i" ]; then cp -a -- "$dir/$i" "$p"; fi
  i=$((i+1))
done`
)

// NewFilesPlan returns the plan that writes files on a node and verifies
// them: StepFiles (backup, write through a temporary file and rename,
// rollback from the backup; skipped when the verification already passes)
// and StepFilesVerify (SHA-256, mode, owner). Nothing restarts: a service
// that reads a changed file at start needs its own step. Errors wrap
// ErrInvalidConfig and name the field.
func NewFilesPlan(cfg FilesConfig) (nodeexec.Plan, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	var paths, write, verify []string
	var env []nodeexec.EnvVar
	for i, f := range cfg.Files {
		mode, _ := octalMode(f.Permissions) // validated
		paths = append(paths, f.Path)
		write = append(write, f.Path, mode, f.Owner)
		sum := sha256.Sum256(f.Content)
		verify = append(verify, f.Path, hex.EncodeToString(sum[:]), mode, f.Owner)
		env = append(env, nodeexec.EnvVar{Name: FilesEnvPrefix + strconv.Itoa(i), Value: base64.StdEncoding.EncodeToString(f.Content)})
	}
	backup := path.Join(cfg.BackupDir, "files")
	plan := nodeexec.Plan{
		Name:              cfg.PlanName,
		Node:              cfg.Node,
		RollbackOnFailure: cfg.RollbackOnFailure,
		Steps: []nodeexec.Step{{
			Name:       StepFiles,
			Argv:       nodeexec.ShellArgv(scriptFilesWrite, write...),
			Env:        env,
			Check:      nodeexec.ShellArgv(scriptFilesVerify, verify...),
			Backup:     nodeexec.ShellArgv(scriptFilesBackup, append([]string{backup}, paths...)...),
			Rollback:   nodeexec.ShellArgv(scriptFilesRollback, append([]string{backup}, paths...)...),
			Timeout:    2 * time.Minute,
			Idempotent: true,
		}, {
			Name:          StepFilesVerify,
			Argv:          nodeexec.ShellArgv(scriptFilesVerify, verify...),
			Timeout:       time.Minute,
			Idempotent:    true,
			NothingToUndo: true,
		}},
	}
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}
