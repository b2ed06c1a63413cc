package simulator

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// kubeletArgsKind names one of the kubelet-args plan's scripts.
type kubeletArgsKind int

const (
	scriptKubeletArgsBackup kubeletArgsKind = iota + 1
	scriptKubeletArgsApply
	scriptKubeletArgsCheck
	scriptKubeletArgsRollback
	scriptKubeletArgsVerify
)

var (
	kubeletArgsScriptsOnce sync.Once
	kubeletArgsScripts     map[string]kubeletArgsKind
)

// knownKubeletArgsScripts learns the kubelet-args plan's scripts from a
// plan the library generates, as knownScripts does for NewPlan's.
func knownKubeletArgsScripts() map[string]kubeletArgsKind {
	kubeletArgsScriptsOnce.Do(func() {
		kubeletArgsScripts = learnScripts(func() (nodeexec.Plan, error) {
			return kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{Node: "learn"})
		},
			scriptSource[kubeletArgsKind]{kubeadm.StepKubeletArgs, backupArgv, scriptKubeletArgsBackup},
			scriptSource[kubeletArgsKind]{kubeadm.StepKubeletArgs, runArgv, scriptKubeletArgsApply},
			scriptSource[kubeletArgsKind]{kubeadm.StepKubeletArgs, checkArgv, scriptKubeletArgsCheck},
			scriptSource[kubeletArgsKind]{kubeadm.StepKubeletArgs, rollbackArgv, scriptKubeletArgsRollback},
			scriptSource[kubeletArgsKind]{kubeadm.StepKubeletArgsVerify, runArgv, scriptKubeletArgsVerify})
	})
	return kubeletArgsScripts
}

// defaultKubeadmFlags is the kubeadm-flags.env a Host starts with: what
// kubeadm writes for a containerd node joined without kubeletExtraArgs.
const defaultKubeadmFlags = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"

// KubeletArgs returns the arguments the running kubelet was started with
// from kubeadm-flags.env (kubeadm.DefaultKubeadmFlagsFile), or nil when it
// is stopped. Like systemd, the host reads the file at each kubelet start.
func (h *Host) KubeletArgs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.kubeletArgs)
}

// readKubeletArgs is what the kubelet unit passes from kubeadm-flags.env
// at start; h.mu is held.
func (h *Host) readKubeletArgs() []string {
	content, ok := h.files[kubeadm.DefaultKubeadmFlagsFile]
	if !ok {
		return []string{}
	}
	f, err := kubeadm.ParseKubeadmFlags(content)
	if err != nil {
		// systemd would pass something; the host does not guess what.
		return []string{"<unparsable " + kubeadm.DefaultKubeadmFlagsFile + ">"}
	}
	args := make([]string, 0, len(f.Args))
	for _, a := range f.Args {
		args = append(args, a.String())
	}
	return args
}

// kubeletArgsCall is the common argument list of the kubelet-args scripts
// (see nodeexec/kubeadm): flags file, record file, backup dir, proc dir,
// settle seconds, N, N desired --name=value, then names to remove.
type kubeletArgsCall struct {
	flags, record, backup string
	desired               []kubeadm.KubeletArg
	remove                []string
}

func parseKubeletArgsCall(args []string) (kubeletArgsCall, error) {
	if len(args) < 6 {
		return kubeletArgsCall{}, fmt.Errorf("fake host: kubelet-args script expects at least 6 arguments, got %d: %q", len(args), args)
	}
	n, err := strconv.Atoi(args[5])
	if err != nil || n < 0 || 6+n > len(args) {
		return kubeletArgsCall{}, fmt.Errorf("fake host: kubelet-args script: bad argument count %q in %q", args[5], args)
	}
	c := kubeletArgsCall{flags: path.Clean(args[0]), record: path.Clean(args[1]), backup: path.Clean(args[2])}
	for _, tok := range args[6 : 6+n] {
		name, value, ok := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
		if !ok || !strings.HasPrefix(tok, "--") {
			return kubeletArgsCall{}, fmt.Errorf("fake host: kubelet-args script: %q is not --name=value", tok)
		}
		c.desired = append(c.desired, kubeadm.KubeletArg{Name: name, Value: value})
		c.remove = append(c.remove, name)
	}
	c.remove = append(c.remove, args[6+n:]...)
	return c, nil
}

// render computes both files as the step's script does; h.mu is held.
func (h *Host) renderKubeletArgs(c kubeletArgsCall) (flags, record string, code int, msg string) {
	remove := slices.Clone(c.remove)
	if rec, ok := h.files[c.record]; ok {
		names, err := kubeadm.ParseKubeletArgsRecord(rec)
		if err != nil {
			return "", "", 1, "kubelet-args: " + c.record + ": " + err.Error()
		}
		remove = append(remove, names...)
	}
	content, ok := h.files[c.flags]
	if !ok {
		return "", "", 1, "kubelet-args: " + c.flags + " does not exist (not a kubeadm node?)"
	}
	f, err := kubeadm.ParseKubeadmFlags(content)
	if err != nil {
		return "", "", 1, "kubelet-args: " + c.flags + ": " + err.Error() + "; not editing it"
	}
	return f.WithExtraArgs(c.desired, remove).String(), kubeadm.FormatKubeletArgsRecord(c.desired), 0, ""
}

// staleKubeletArg is the first running argument that should not be there
// (a desired one missing, another value of a replaced or removed name),
// or ""; h.mu is held.
func (h *Host) staleKubeletArg(c kubeletArgsCall) string {
	for _, d := range c.desired {
		if !slices.Contains(h.kubeletArgs, d.String()) {
			return "missing " + d.String()
		}
	}
	for _, a := range h.kubeletArgs {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if slices.Contains(c.remove, name) && !slices.ContainsFunc(c.desired, func(d kubeadm.KubeletArg) bool { return d.String() == a }) {
			return "still running with " + a
		}
	}
	return ""
}

func (h *Host) restoreKubeletArgs(c kubeletArgsCall) (int, string) {
	return h.locked(func() (int, string) {
		bak, ok := h.files[path.Join(c.backup, "kubeadm-flags.env")]
		if !ok {
			return 1, "kubelet-args: no backup of " + c.flags + " in " + c.backup
		}
		h.files[c.flags] = bak
		if rec, ok := h.files[path.Join(c.backup, "extra-args")]; ok {
			h.files[c.record] = rec
		} else {
			delete(h.files, c.record)
		}
		return 0, ""
	})
}

// kubeletArgsScript interprets the kubelet-args plan's scripts.
func init() {
	planScripts = append(planScripts, func(ctx context.Context, h *Host, script string, args []string, _ map[string]string) (int, string, bool) {
		k, ok := knownKubeletArgsScripts()[script]
		if !ok {
			return 0, "", false
		}
		code, out := h.kubeletArgsScript(ctx, k, args)
		return code, out, true
	})
}

func (h *Host) kubeletArgsScript(ctx context.Context, k kubeletArgsKind, args []string) (int, string) {
	if k == scriptKubeletArgsBackup {
		if len(args) != 3 {
			return 2, fmt.Sprintf("fake host: script expects 3 arguments, got %d: %q", len(args), args)
		}
		return h.locked(func() (int, string) {
			flags, record, backup := path.Clean(args[0]), path.Clean(args[1]), path.Clean(args[2])
			content, ok := h.files[flags]
			if !ok {
				return 1, fmt.Sprintf("cp: cannot stat '%s': No such file or directory", args[0])
			}
			h.files[path.Join(backup, "kubeadm-flags.env")] = content
			if rec, ok := h.files[record]; ok {
				h.files[path.Join(backup, "extra-args")] = rec
				delete(h.files, path.Join(backup, "extra-args.absent"))
			} else {
				delete(h.files, path.Join(backup, "extra-args"))
				h.files[path.Join(backup, "extra-args.absent")] = ""
			}
			return 0, ""
		})
	}
	c, err := parseKubeletArgsCall(args)
	if err != nil {
		return 2, err.Error()
	}
	switch k {
	case scriptKubeletArgsApply:
		code, out := h.locked(func() (int, string) {
			flags, record, code, msg := h.renderKubeletArgs(c)
			if code != 0 {
				return code, msg
			}
			if _, ok := h.files[path.Join(c.backup, "kubeadm-flags.env")]; !ok {
				return 1, "kubelet-args: no backup of " + c.flags + " in " + c.backup + " (the step's backup runs first)"
			}
			h.files[c.flags], h.files[c.record] = flags, record
			return 0, ""
		})
		if code != 0 {
			return code, out
		}
		code, out = h.startUnit(ctx, "kubelet")
		if code == 0 {
			return 0, "kubelet restarted with " + strings.Join(h.KubeletArgs(), " ")
		}
		if c2, out2 := h.restoreKubeletArgs(c); c2 != 0 {
			return 1, out + "\n" + out2
		}
		if c2, out2 := h.startUnit(ctx, "kubelet"); c2 != 0 {
			out += "\n" + out2
		}
		return 1, out + "\nkubelet-args: the kubelet did not stay up with the new flags; restored " + c.flags + " from " + c.backup
	case scriptKubeletArgsCheck:
		return h.locked(func() (int, string) {
			flags, record, code, _ := h.renderKubeletArgs(c)
			if code != 0 || h.files[c.flags] != flags {
				return 1, ""
			}
			if got, ok := h.files[c.record]; !ok || got != record {
				return 1, ""
			}
			if h.units["kubelet"] != UnitActive || h.staleKubeletArg(c) != "" {
				return 1, ""
			}
			return 0, ""
		})
	case scriptKubeletArgsRollback:
		if code, out := h.restoreKubeletArgs(c); code != 0 {
			return code, out
		}
		if code, out := h.startUnit(ctx, "kubelet"); code != 0 {
			return 1, out + "\nkubelet-args: the kubelet is not active with the restored flags"
		}
		return 0, "restored " + c.flags + " from " + c.backup
	case scriptKubeletArgsVerify:
		return h.locked(func() (int, string) {
			if h.units["kubelet"] != UnitActive {
				return 1, "kubelet-args: verify: the kubelet is not active"
			}
			if why := h.staleKubeletArg(c); why != "" {
				return 1, "kubelet-args: verify: the kubelet is " + why
			}
			return 0, "verified the kubelet's arguments"
		})
	}
	return ExitUnknownCommand, "fake host: unhandled script"
}
