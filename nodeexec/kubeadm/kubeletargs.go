package kubeadm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
)

// Defaults for KubeletArgsConfig fields left empty.
const (
	// DefaultKubeadmFlagsFile is where kubeadm writes the kubelet's flags.
	DefaultKubeadmFlagsFile = "/var/lib/kubelet/kubeadm-flags.env"
	// DefaultKubeletArgsRecordFile is the record the kubelet-args step
	// keeps of the extra args it applied (FormatKubeletArgsRecord).
	DefaultKubeletArgsRecordFile = "/var/lib/kubelet/upgradekit-kubelet-extra-args"
	// DefaultProcDir is where the verification reads the running kubelet's
	// command line (<ProcDir>/<MainPID>/cmdline).
	DefaultProcDir = "/proc"
	// DefaultKubeletSettle is how long the kubelet must stay active after
	// its restart.
	DefaultKubeletSettle = 5 * time.Second
)

// Step names of the kubelet-args plan (NewKubeletArgsPlan), in order.
const (
	// StepKubeletArgs backs up kubeadm-flags.env and the record file
	// (Step.Backup, kept like every backup), writes the new kubeadm-flags.env
	// atomically (temporary file, rename), then the record, restarts the
	// kubelet and checks it stays active for Settle; if it does not, it
	// puts both files back and restarts the kubelet again before failing.
	// It never stops the kubelet on its own. Its check passes when both
	// files already have the wanted content and the running kubelet has
	// every desired argument and no other value of a replaced or removed
	// one, so a re-run (or a resume after a crash) that finds the work done
	// changes nothing and restarts nothing. Its rollback restores the
	// backup and restarts the kubelet the same way. Idempotent, retried,
	// 3 minutes per attempt.
	StepKubeletArgs = "kubelet-args"
	// StepKubeletArgsVerify checks that the kubelet is active and that its
	// command line (/proc/<MainPID>/cmdline, MainPID from `systemctl show`)
	// carries every desired --name=value and no other value of a
	// replaced or removed name. Retried for about a minute.
	StepKubeletArgsVerify = "kubelet-args-verify"
)

// Errors of NewKubeletArgsPlan's arguments; *KubeletArgError wraps them
// (and ErrInvalidConfig).
var (
	// ErrInvalidKubeletArg: a name or value that cannot be applied as
	// given (see ValidateKubeletArgName and ValidateKubeletArgValue).
	ErrInvalidKubeletArg = errors.New("invalid kubelet argument")
	// ErrKubeadmOwnedArg: a change to a flag kubeadm computes itself
	// (KubeadmOwnedKubeletArgs). Removing one cannot restore kubeadm's
	// value, and changing --hostname-override or
	// --container-runtime-endpoint in place changes the node's identity or
	// runtime.
	ErrKubeadmOwnedArg = errors.New("kubelet flag computed by kubeadm")
)

// KubeadmOwnedKubeletArgs are the flags kubeadm writes into
// kubeadm-flags.env itself. NewKubeletArgsPlan refuses to add, change or
// remove them: they may appear in KubeletArgsConfig.Desired only with
// exactly the values they have in Previous.
func KubeadmOwnedKubeletArgs() []string {
	return []string{"container-runtime-endpoint", "hostname-override", "pod-infra-container-image", "register-with-taints"}
}

// KubeletArgError names the argument NewKubeletArgsPlan refused.
type KubeletArgError struct {
	// Field is the argument's place, e.g. "desired[2].value".
	Field string
	// Name is the flag name (without dashes).
	Name string
	// Err is ErrInvalidKubeletArg or ErrKubeadmOwnedArg.
	Err error
	// Detail says why.
	Detail string
}

// Error implements error.
func (e *KubeletArgError) Error() string {
	return errtext.Cap(fmt.Sprintf("kubeadm: %s (--%s): %v: %s", e.Field, errtext.Clip(e.Name), e.Err, e.Detail))
}

// Unwrap makes errors.Is match ErrInvalidConfig and the specific sentinel.
func (e *KubeletArgError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// KubeletArgsConfig describes a same-version change of the kubelet's extra
// arguments on one kubeadm node (nodeRegistration.kubeletExtraArgs).
type KubeletArgsConfig struct {
	// PlanName defaults to "kubelet-args-" + a short hash of the node and
	// the arguments.
	PlanName string
	// Node is the Kubernetes node name.
	Node string
	// Desired are the extra arguments the kubelet should run with, in
	// order (a name may repeat, as kubeadm allows). Names are given
	// without dashes (ValidateKubeletArgName); values must pass
	// ValidateKubeletArgValue.
	Desired []KubeletArg
	// Previous are the extra arguments the node was joined with (the
	// KubeadmConfig before the change). Arguments of these names that are
	// not desired any more are removed from kubeadm-flags.env, as are
	// those the record file lists (what an earlier kubelet-args plan
	// applied). Only the names reach the node.
	Previous []KubeletArg
	// FlagsFile, RecordFile, BackupDir and ProcDir are absolute host
	// paths; tests point them into a temporary directory.
	//
	// FlagsFile defaults to DefaultKubeadmFlagsFile.
	FlagsFile string
	// RecordFile defaults to DefaultKubeletArgsRecordFile.
	RecordFile string
	// BackupDir defaults to DefaultBackupRoot/<plan name>; it must not be
	// "/". Backups are kept after success.
	BackupDir string
	// ProcDir defaults to DefaultProcDir.
	ProcDir string
	// Settle is how long the kubelet must stay active after its restart,
	// in whole seconds from 1s to 60s; default DefaultKubeletSettle.
	Settle time.Duration
	// RollbackOnFailure is copied into the plan: a failed verification
	// then restores the old flags and restarts the kubelet.
	RollbackOnFailure bool
	// ReplaceAll removes every argument of kubeadm-flags.env that is
	// neither desired nor one of kubeadm's own (KubeadmOwnedKubeletArgs),
	// whatever Previous says: the file becomes what `kubeadm join` writes
	// with Desired as the extra args. Use it when the extra args the node
	// was joined with are not known (Cluster API's UpdateMachine hook sends
	// only the desired configuration). Flags set elsewhere (the unit's
	// drop-in, /etc/default/kubelet) are not touched.
	ReplaceAll bool
}

func (c *KubeletArgsConfig) defaults() {
	if c.FlagsFile == "" {
		c.FlagsFile = DefaultKubeadmFlagsFile
	}
	if c.RecordFile == "" {
		c.RecordFile = DefaultKubeletArgsRecordFile
	}
	if c.ProcDir == "" {
		c.ProcDir = DefaultProcDir
	}
	if c.Settle == 0 {
		c.Settle = DefaultKubeletSettle
	}
	if c.PlanName == "" {
		h := sha256.New()
		h.Write([]byte(c.Node))
		for _, list := range [][]KubeletArg{c.Desired, c.Previous} {
			h.Write([]byte{0})
			for _, a := range list {
				h.Write([]byte(a.Name + "\x00" + a.Value + "\x00"))
			}
		}
		c.PlanName = "kubelet-args-" + hex.EncodeToString(h.Sum(nil))[:12]
	}
	if c.BackupDir == "" {
		c.BackupDir = path.Join(DefaultBackupRoot, c.PlanName)
	}
}

func (c KubeletArgsConfig) validate() error {
	if msgs := validation.IsDNS1123Subdomain(c.Node); len(msgs) > 0 {
		return configError("node", "%q: %s", c.Node, msgs[0])
	}
	for field, p := range map[string]string{"flagsFile": c.FlagsFile, "recordFile": c.RecordFile, "backupDir": c.BackupDir, "procDir": c.ProcDir} {
		if err := absPath(field, p); err != nil {
			return err
		}
	}
	if path.Clean(c.BackupDir) == "/" {
		return configError("backupDir", "%q: must not be the root directory", c.BackupDir)
	}
	if path.Clean(c.FlagsFile) == path.Clean(c.RecordFile) {
		return configError("recordFile", "%q is also the flags file", c.RecordFile)
	}
	if c.Settle < time.Second || c.Settle > time.Minute || c.Settle%time.Second != 0 {
		return configError("settle", "%v (want whole seconds from 1s to 1m)", c.Settle)
	}
	argErr := func(field, name string, err error, detail string) error {
		return &KubeletArgError{Field: field, Name: name, Err: err, Detail: detail}
	}
	for i, a := range c.Desired {
		if err := checkKubeletArgName(a.Name); err != nil {
			return argErr(fmt.Sprintf("desired[%d].name", i), a.Name, ErrInvalidKubeletArg, err.Error())
		}
		if err := checkKubeletArgValue(a.Value); err != nil {
			return argErr(fmt.Sprintf("desired[%d].value", i), a.Name, ErrInvalidKubeletArg, err.Error())
		}
	}
	for i, a := range c.Previous {
		if err := checkKubeletArgName(a.Name); err != nil {
			return argErr(fmt.Sprintf("previous[%d].name", i), a.Name, ErrInvalidKubeletArg, err.Error())
		}
	}
	values := func(list []KubeletArg, name string) []string {
		var v []string
		for _, a := range list {
			if a.Name == name {
				v = append(v, a.Value)
			}
		}
		slices.Sort(v)
		return v
	}
	for _, name := range KubeadmOwnedKubeletArgs() {
		if d, p := values(c.Desired, name), values(c.Previous, name); !slices.Equal(d, p) {
			return argErr("desired", name, ErrKubeadmOwnedArg, fmt.Sprintf("values %q, previously %q: kubeadm computes this flag; changing it in place is refused", d, p))
		}
	}
	return nil
}

// NewKubeletArgsPlan returns the plan that changes a kubeadm node's
// kubelet extra arguments without changing its version: StepKubeletArgs
// (back up, rewrite kubeadm-flags.env, restart the kubelet, restore on
// failure) and StepKubeletArgsVerify.
//
// The new kubeadm-flags.env is what `kubeadm join` would write with
// Desired as kubeletExtraArgs (see KubeadmFlags.WithExtraArgs): kubeadm's
// own flags are kept, every flag named in Desired, in Previous or in the
// record file is taken out, Desired is added, and the arguments are
// sorted as kubeadm sorts them. The step refuses (changing nothing) a
// flags file ParseKubeadmFlags would refuse.
//
// Bad configuration is refused before anything is produced: ErrInvalidConfig
// for paths and the node, *KubeletArgError (wrapping ErrInvalidKubeletArg
// or ErrKubeadmOwnedArg, and ErrInvalidConfig) for arguments, naming the
// field. Names and values reach the node's scripts as separate argv
// elements only.
func NewKubeletArgsPlan(cfg KubeletArgsConfig) (nodeexec.Plan, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	desired := make([]string, len(cfg.Desired))
	for i, a := range cfg.Desired {
		desired[i] = a.String()
	}
	var removed []string
	for _, a := range cfg.Previous {
		if !slices.ContainsFunc(cfg.Desired, func(d KubeletArg) bool { return d.Name == a.Name }) && !slices.Contains(removed, a.Name) {
			removed = append(removed, a.Name)
		}
	}
	// Every script takes the same arguments (scriptKubeletArgsLib).
	args := append([]string{cfg.FlagsFile, cfg.RecordFile, cfg.BackupDir, cfg.ProcDir,
		strconv.Itoa(int(cfg.Settle / time.Second)), strconv.Itoa(len(desired))}, desired...)
	args = append(args, removed...)
	if cfg.ReplaceAll {
		args = append(args, RemoveAllExtraArgs)
	}
	argv := func(script string) []string { return nodeexec.ShellArgv(script, args...) }
	plan := nodeexec.Plan{
		Name:              cfg.PlanName,
		Node:              cfg.Node,
		RollbackOnFailure: cfg.RollbackOnFailure,
		Steps: []nodeexec.Step{{
			Name:       StepKubeletArgs,
			Argv:       argv(scriptKubeletArgsApply),
			Check:      argv(scriptKubeletArgsCheck),
			Backup:     nodeexec.ShellArgv(scriptKubeletArgsBackup, cfg.FlagsFile, cfg.RecordFile, cfg.BackupDir),
			Rollback:   argv(scriptKubeletArgsRollback),
			Timeout:    3 * time.Minute,
			Retry:      nodeexec.RetryPolicy{Attempts: 2, Backoff: 5 * time.Second},
			Idempotent: true,
		}, {
			Name:          StepKubeletArgsVerify,
			Argv:          argv(scriptKubeletArgsVerify),
			Timeout:       time.Minute,
			Retry:         nodeexec.RetryPolicy{Attempts: 6, Backoff: 5 * time.Second, MaxBackoff: 10 * time.Second},
			Idempotent:    true,
			NothingToUndo: true,
		}},
	}
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}

// Scripts of the kubelet-args plan. They are constants; every path, name
// and value is an argument. Values never contain whitespace
// (ValidateKubeletArgValue), so newline- and tab-separated lists of them
// are unambiguous; globbing is off, and values are only compared and
// printed, never evaluated.
const (
	// $1 flags file, $2 record file, $3 backup dir.
	scriptKubeletArgsBackup = `set -eu
mkdir -p "$3"
cp -p -- "$1" "$3/kubeadm-flags.env"
if [ -f "$2" ]; then
  cp -p -- "$2" "$3/extra-args"
  rm -f -- "$3/extra-args.absent"
else
  rm -f -- "$3/extra-args"
  : > "$3/extra-args.absent"
fi`

	// The common part of the other scripts. Arguments: $1 flags file,
	// $2 record file, $3 backup dir, $4 proc dir, $5 settle seconds, $6 the
	// number N of desired arguments, then N desired --name=value, then the
	// names of previous arguments to remove. render computes new_flags and
	// new_record exactly as KubeadmFlags.WithExtraArgs and
	// FormatKubeletArgsRecord do (TestKubeletArgsScriptMatchesModel).
	scriptKubeletArgsLib = `set -u
set -f
export LC_ALL=C
nl='
'
tab=$(printf '\t')
ifs=$IFS
die() { echo "kubelet-args: $*" >&2; exit 1; }
flags=$1 record=$2 backup=$3 proc=$4 settle=$5 n=$6
shift 6
pid= cmdline=
desired=
while [ "$n" -gt 0 ]; do desired="$desired$1$nl"; shift; n=$((n-1)); done
remove=
for a in "$@"; do remove="$remove$a$nl"; done
IFS=$nl
for tok in $desired; do name=${tok%%=*}; remove="$remove${name#--}$nl"; done
IFS=$ifs
has() { case "$nl$remove" in *"$nl$1$nl"*) return 0 ;; esac; return 1; }
owned() { case "$1" in container-runtime-endpoint|hostname-override|pod-infra-container-image|register-with-taints) return 0 ;; esac; return 1; }
wanted() { case "$nl$desired" in *"$nl$1$nl"*) return 0 ;; esac; return 1; }
flagname() {
  case "$1" in --*=*) ;; *) return 1 ;; esac
  name=${1%%=*}
  name=${name#--}
  case "$name" in ''|[!a-zA-Z0-9]*|*[!a-zA-Z0-9._-]*) return 1 ;; esac
}
render() {
  if [ -f "$record" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
      case "$line" in
      ''|'#'*) ;;
      *) flagname "$line" || die "$record: unexpected line (not written by upgradekit?): $line"
         remove="$remove$name$nl" ;;
      esac
    done < "$record"
  fi
  [ -f "$flags" ] || die "$flags does not exist (not a kubeadm node?)"
  tr -d '\000-\010\013-\037\177' < "$flags" | cmp -s - "$flags" || die "$flags has control characters; not editing it"
  pre= post= found=0 body=
  while IFS= read -r line || [ -n "$line" ]; do
    lead=${line%%[! $tab]*}
    case "${line#"$lead"}" in
    '#'*|';'*)
      case "$line" in *\\) die "$flags: a comment ends in a backslash (systemd joins it with the next line); not editing it" ;; esac ;;
    *)
      case "$line" in
      KUBELET_KUBEADM_ARGS=\"*\")
        [ "$found" = 0 ] || die "$flags assigns KUBELET_KUBEADM_ARGS twice; not editing it"
        body=${line#KUBELET_KUBEADM_ARGS=\"}
        body=${body%\"}
        case "$body" in *[\"\'\\]*) die "$flags: quotes or backslashes inside KUBELET_KUBEADM_ARGS; not editing it" ;; esac
        found=1
        continue ;;
      *KUBELET_KUBEADM_ARGS*) die "$flags: KUBELET_KUBEADM_ARGS is not assigned the way kubeadm writes it (KUBELET_KUBEADM_ARGS=\"--name=value ...\"); not editing it" ;;
      *[\"\'\\]*) die "$flags: quotes or backslashes outside KUBELET_KUBEADM_ARGS; not editing it" ;;
      esac ;;
    esac
    if [ "$found" = 0 ]; then pre="$pre$line$nl"; else post="$post$line$nl"; fi
  done < "$flags"
  list=
  IFS=" $tab"
  for tok in $body; do
    flagname "$tok" || die "$flags: $tok is not a --name=value argument; not editing it"
    if ! has "$name" && has '*' && ! owned "$name"; then
      remove="$remove$name$nl" # ReplaceAll: removed, and checked gone from the running kubelet
    fi
    has "$name" || list="$list$name$tab${tok#*=}$nl"
  done
  IFS=$nl
  for tok in $desired; do name=${tok%%=*}; list="$list${name#--}$tab${tok#*=}$nl"; done
  joined=
  for l in $(printf '%s' "$list" | sort -t "$tab" -k1,1 -k2,2); do
    joined="$joined${joined:+ }--${l%%"$tab"*}=${l#*"$tab"}"
  done
  new_record="# upgradekit: kubelet extra args applied to kubeadm-flags.env, one --name=value per line; do not edit$nl"
  for tok in $desired; do new_record="$new_record$tok$nl"; done
  IFS=$ifs
  new_flags="${pre}KUBELET_KUBEADM_ARGS=\"$joined\"$nl$post"
}
# running reads the kubelet's command line into cmdline, one argument a line.
running() {
  pid=$(systemctl show -p MainPID kubelet) || return 1
  pid=${pid#MainPID=}
  case "$pid" in ''|0|*[!0-9]*) return 1 ;; esac
  cmdline=$(tr '\000' '\n' < "$proc/$pid/cmdline") || return 1
}
# stale prints the first running argument that should not be there: a
# desired one missing, or another value of a replaced or removed name.
stale() {
  IFS=$nl
  for tok in $desired; do
    case "$nl$cmdline$nl" in *"$nl$tok$nl"*) ;; *) IFS=$ifs; echo "missing $tok"; return 0 ;; esac
  done
  for l in $cmdline; do
    if flagname "$l" && has "$name" && ! wanted "$l"; then IFS=$ifs; echo "still running with $l"; return 0; fi
  done
  IFS=$ifs
  return 1
}
up() {
  systemctl restart kubelet || return 1
  i=0
  while [ "$i" -lt "$settle" ]; do
    sleep 1
    systemctl is-active --quiet kubelet || return 1
    i=$((i+1))
  done
}
put() { printf '%s' "$2" > "$1.upgradekit-new" && chmod 0644 "$1.upgradekit-new" && mv -f -- "$1.upgradekit-new" "$1"; }
restore() {
  cp -p -- "$backup/kubeadm-flags.env" "$flags.upgradekit-new" && mv -f -- "$flags.upgradekit-new" "$flags" || return 1
  if [ -f "$backup/extra-args" ]; then
    cp -p -- "$backup/extra-args" "$record.upgradekit-new" && mv -f -- "$record.upgradekit-new" "$record"
  else
    rm -f -- "$record"
  fi
}
`

	scriptKubeletArgsApply = scriptKubeletArgsLib + `render
[ -f "$backup/kubeadm-flags.env" ] || die "no backup of $flags in $backup (the step's backup runs first)"
if ! printf '%s' "$new_flags" | cmp -s - "$flags"; then
  put "$flags" "$new_flags" || die "writing $flags failed"
fi
put "$record" "$new_record" || { restore; die "writing $record failed; $flags restored"; }
if up; then echo "kubelet restarted with $joined"; exit 0; fi
echo "kubelet-args: the kubelet did not stay up with the new flags; restoring $flags from $backup" >&2
restore || die "restoring $flags from $backup failed"
up || echo "kubelet-args: the kubelet did not come back with the restored flags either" >&2
exit 1`

	// Exit 0 when the work is done: both files as render wants them and
	// the running kubelet started from them.
	scriptKubeletArgsCheck = scriptKubeletArgsLib + `render
printf '%s' "$new_flags" | cmp -s - "$flags" || exit 1
[ -f "$record" ] && printf '%s' "$new_record" | cmp -s - "$record" || exit 1
systemctl is-active --quiet kubelet || exit 1
running || exit 1
if stale > /dev/null; then exit 1; fi
exit 0`

	scriptKubeletArgsRollback = scriptKubeletArgsLib + `[ -f "$backup/kubeadm-flags.env" ] || die "no backup of $flags in $backup"
restore || die "restoring $flags from $backup failed"
up || die "the kubelet is not active with the restored flags"
echo "restored $flags from $backup"`

	scriptKubeletArgsVerify = scriptKubeletArgsLib + `systemctl is-active --quiet kubelet || die "verify: the kubelet is not active"
running || die "verify: cannot read the kubelet's command line (MainPID $pid)"
if why=$(stale); then die "verify: the kubelet is $why"; fi
echo "verified the kubelet's arguments"`
)
