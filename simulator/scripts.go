package simulator

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// scriptKind names one of the kubeadm step library's shell scripts.
type scriptKind int

const (
	scriptEtcdSnapshot scriptKind = iota + 1
	scriptInstallTree
	scriptBackupTree
	scriptRestoreTree
	scriptRestoreTreeRestart
	scriptInstallFile
	scriptBackupFile
	scriptWriteFile
	scriptBackupEtcKubernetes
	scriptVerify
	scriptInstallContainerdRestart
	scriptBackupContainerd
	scriptReplaceBinaryRestart
	scriptBundle
)

var (
	scriptsOnce sync.Once
	scripts     map[string]scriptKind
)

// knownScripts learns the library's scripts from a plan it generates, so
// the host recognises exactly the text the library emits (and stops
// recognising a script the moment the library changes it: the change then
// shows up as an unknown-script failure in this package's tests).
func knownScripts() map[string]scriptKind {
	scriptsOnce.Do(func() {
		type src = scriptSource[scriptKind]
		scripts = learnScripts(func() (nodeexec.Plan, error) {
			return kubeadm.NewPlan(kubeadm.Config{Node: "learn", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.30.0", ToVersion: "v1.31.0"})
		},
			src{kubeadm.StepEtcdSnapshot, runArgv, scriptEtcdSnapshot},
			src{kubeadm.StepContainerd, runArgv, scriptInstallContainerdRestart},
			src{kubeadm.StepContainerd, backupArgv, scriptBackupContainerd},
			src{kubeadm.StepCNIPlugins, backupArgv, scriptBackupTree},
			src{kubeadm.StepContainerd, rollbackArgv, scriptRestoreTreeRestart},
			src{kubeadm.StepCNIPlugins, runArgv, scriptInstallTree},
			src{kubeadm.StepCNIPlugins, rollbackArgv, scriptRestoreTree},
			src{kubeadm.StepKubelet, runArgv, scriptReplaceBinaryRestart},
			src{kubeadm.StepKubeadmBinary, runArgv, scriptInstallFile},
			src{kubeadm.StepKubeadmBinary, backupArgv, scriptBackupFile},
			src{kubeadm.StepKubeadmConfig, runArgv, scriptWriteFile},
			src{kubeadm.StepKubeadmUpgrade, backupArgv, scriptBackupEtcKubernetes},
			src{kubeadm.StepVerify, runArgv, scriptVerify},
			src{kubeadm.StepBundle, runArgv, scriptBundle})
	})
	return scripts
}

// scriptSource names where a plan carries one of its shell scripts: the
// step, and which of its argvs (Step.Argv, Backup, Check or Rollback).
type scriptSource[K comparable] struct {
	step string
	argv func(nodeexec.Step) []string
	kind K
}

// Step argv selectors for scriptSource.
var (
	runArgv      = func(s nodeexec.Step) []string { return s.Argv }
	backupArgv   = func(s nodeexec.Step) []string { return s.Backup }
	checkArgv    = func(s nodeexec.Step) []string { return s.Check }
	rollbackArgv = func(s nodeexec.Step) []string { return s.Rollback }
)

// learnScripts maps the text of each "/bin/sh -c SCRIPT" a plan the
// library generated carries at the given sources to its kind: how a Host
// recognises exactly the scripts the library emits (a plan that cannot be
// generated learns nothing, and the host then refuses its scripts as
// unknown).
func learnScripts[K comparable](generate func() (nodeexec.Plan, error), sources ...scriptSource[K]) map[string]K {
	out := map[string]K{}
	plan, err := generate()
	if err != nil {
		return out
	}
	for _, s := range plan.Steps {
		for _, src := range sources {
			if argv := src.argv(s); s.Name == src.step && len(argv) > 2 && argv[0] == "/bin/sh" {
				out[argv[2]] = src.kind
			}
		}
	}
	return out
}

// scriptArgs is how many arguments each script takes (scriptBundle aside).
var scriptArgs = map[scriptKind]int{
	scriptEtcdSnapshot: 4, scriptInstallTree: 1, scriptBackupTree: 2, scriptRestoreTree: 1,
	scriptRestoreTreeRestart: 2, scriptInstallFile: 2, scriptBackupFile: 2,
	scriptWriteFile: 1, scriptBackupEtcKubernetes: 3, scriptVerify: 6,
	scriptInstallContainerdRestart: 4, scriptBackupContainerd: 3, scriptReplaceBinaryRestart: 4,
}

func (h *Host) script(ctx context.Context, k scriptKind, args []string, env map[string]string) (int, string) {
	want := scriptArgs[k]
	if k == scriptBundle {
		return h.bundle(args)
	}
	if len(args) != want {
		return 2, fmt.Sprintf("fake host: script expects %d arguments, got %d: %q", want, len(args), args)
	}
	for _, a := range args {
		if a == "" {
			return 2, fmt.Sprintf("fake host: empty script argument in %q", args)
		}
	}
	switch k {
	case scriptRestoreTreeRestart:
		if code, out := h.locked(func() (int, string) { return h.restoreTree(args[0]) }); code != 0 {
			return code, out
		}
		return h.startUnit(ctx, args[1])
	case scriptVerify:
		return h.verify(ctx, args)
	case scriptInstallContainerdRestart:
		// Install, migrate the configuration for a new major version,
		// restart; if either fails, restore and restart again before
		// failing (the unit never stays down).
		if code, out := h.locked(func() (int, string) { return h.copyTree(args[0], "/") }); code != 0 {
			return code, out
		}
		code, out := h.locked(func() (int, string) { return h.migrateContainerdConfig(args[0], args[3]) })
		if code == 0 {
			var start string
			code, start = h.startUnit(ctx, args[2])
			out = strings.TrimPrefix(out+"\n"+start, "\n")
		}
		if code == 0 {
			return 0, out
		}
		h.locked(func() (int, string) { return h.restoreTree(args[1]) })
		if c2, out2 := h.startUnit(ctx, args[2]); c2 != 0 {
			out += "\n" + out2
		}
		return 1, out + "\n" + args[2] + " did not stay up after the install; restored " + args[1]
	case scriptReplaceBinaryRestart:
		install := func(src string) (int, string) {
			return h.locked(func() (int, string) {
				content, ok := h.files[path.Clean(src)]
				if !ok {
					return 1, fmt.Sprintf("cp: cannot stat '%s': No such file or directory", src)
				}
				h.files[path.Clean(args[1])] = content
				return 0, ""
			})
		}
		if code, out := install(args[0]); code != 0 {
			return code, out
		}
		code, out := h.startUnit(ctx, args[3])
		if code == 0 {
			return 0, out
		}
		if c2, out2 := install(args[2]); c2 != 0 {
			return 1, out + "\n" + out2
		}
		if c2, out2 := h.startUnit(ctx, args[3]); c2 != 0 {
			out += "\n" + out2
		}
		return 1, out + "\n" + args[3] + " did not stay up with " + args[0] + "; restored " + args[2]
	}
	return h.locked(func() (int, string) {
		switch k {
		case scriptEtcdSnapshot:
			if _, _, msg := h.program(args[0], "etcdctl"); msg != "" {
				return 127, msg
			}
			if h.role != strategy.RoleControlPlane || h.etcd == "" {
				return 1, "Error: dial tcp 127.0.0.1:2379: connect: connection refused"
			}
			for _, f := range []string{"etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key"} {
				if _, ok := h.files[path.Join(args[2], f)]; !ok {
					return 1, fmt.Sprintf("Error: open %s: no such file or directory", path.Join(args[2], f))
				}
			}
			h.files[path.Clean(args[1])] = fmt.Sprintf("fake etcd snapshot of %s (etcd %s, kubernetes %s)", h.node, h.etcd, h.cp)
			return 0, "Snapshot saved at " + args[1]
		case scriptInstallTree:
			return h.copyTree(args[0], "/")
		case scriptBackupTree:
			return h.backupTree(args[0], args[1])
		case scriptBackupContainerd:
			if code, out := h.backupTree(args[0], args[1]); code != 0 {
				return code, out
			}
			conf := path.Clean(args[2])
			if content, ok := h.files[conf]; ok {
				if _, carried := h.files[path.Join(path.Clean(args[0]), conf)]; !carried {
					h.files[path.Join(path.Clean(args[1]), conf)] = content
				}
			}
			return 0, ""
		case scriptRestoreTree:
			return h.restoreTree(args[0])
		case scriptInstallFile, scriptBackupFile:
			src, dst := path.Clean(args[0]), path.Clean(args[1])
			content, ok := h.files[src]
			if !ok {
				return 1, fmt.Sprintf("cp: cannot stat '%s': No such file or directory", args[0])
			}
			h.files[dst] = content
			return 0, ""
		case scriptWriteFile:
			content, ok := env["UPGRADEKIT_FILE_CONTENT"]
			if !ok {
				return 1, "sh: UPGRADEKIT_FILE_CONTENT: parameter not set"
			}
			h.files[path.Clean(args[0])] = content
			return 0, ""
		case scriptBackupEtcKubernetes:
			return h.backupEtcKubernetes(args)
		}
		return ExitUnknownCommand, "fake host: unhandled script"
	})
}

func (h *Host) locked(f func() (int, string)) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f()
}

// copyTree copies every file under src to the same relative path under
// dst, like cp -a src/. dst. src must hold at least one file (the host has
// no empty directories).
func (h *Host) copyTree(src, dst string) (int, string) {
	src = path.Clean(src)
	files := h.under(src)
	if len(files) == 0 {
		return 1, fmt.Sprintf("cp: cannot stat '%s/.': No such file or directory", src)
	}
	for _, f := range files {
		h.files[path.Join(dst, strings.TrimPrefix(f, src+"/"))] = h.files[f]
	}
	return 0, ""
}

// backupTree copies aside every host file the tree at src would overwrite
// into dst and lists the ones it would add in dst.added.
func (h *Host) backupTree(src, dst string) (int, string) {
	src, dst = path.Clean(src), path.Clean(dst)
	files := h.under(src)
	if len(files) == 0 {
		return 2, fmt.Sprintf("sh: cd: can't cd to %s", src)
	}
	var added []string
	for _, f := range files {
		rel := strings.TrimPrefix(f, src+"/")
		if content, ok := h.files["/"+rel]; ok {
			h.files[path.Join(dst, rel)] = content
		} else {
			added = append(added, rel)
		}
	}
	sort.Strings(added)
	list := strings.Join(added, "\n")
	if list != "" {
		list += "\n"
	}
	h.files[dst+".added"] = list
	return 0, ""
}

// migrateContainerdConfig does what the containerd step's script does
// after the install: when the tree at tree installed a containerd of major
// version 2 or newer and conf exists, is not carried by the tree and
// declares a version below 3 (none counts as 1), conf is rewritten. The
// simulated containerd has no configuration format: the new content is
// "version = 3" and a comment naming the old version, not what a real
// containerd's `config migrate` writes (real nodes check that).
func (h *Host) migrateContainerdConfig(tree, conf string) (int, string) {
	tree, conf = path.Clean(tree), path.Clean(conf)
	old, ok := h.files[conf]
	if !ok {
		return 0, ""
	}
	if _, carried := h.files[path.Join(tree, conf)]; carried {
		return 0, ""
	}
	var bin string
	for _, f := range h.under(tree) { // sorted, like the script's find | sort
		if strings.HasSuffix(f, "/bin/containerd") {
			bin = strings.TrimPrefix(f, tree)
			break
		}
	}
	if bin == "" {
		return 0, ""
	}
	_, v, ok := binaryVersion(h.files[bin])
	if !ok {
		return 0, ""
	}
	major, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if err != nil || major < 2 {
		return 0, ""
	}
	cv := 1
	for _, line := range strings.Split(old, "\n") {
		if !strings.HasPrefix(line, "version") {
			continue // the script reads a version line at the start of a line only
		}
		f := strings.Fields(strings.ReplaceAll(line, "=", " = "))
		if len(f) >= 3 && f[0] == "version" && f[1] == "=" {
			if n, err := strconv.Atoi(f[2]); err == nil {
				cv = n
			}
			break
		}
	}
	if cv >= 3 {
		return 0, ""
	}
	h.files[conf] = fmt.Sprintf("version = 3\n# migrated by the simulated containerd %s from version %d\n", v, cv)
	return 0, fmt.Sprintf("containerd: migrated %s from version %d for containerd %d.x", conf, cv, major)
}

// restoreTree puts saved files back and removes the ones the install added.
func (h *Host) restoreTree(dir string) (int, string) {
	dir = path.Clean(dir)
	for _, f := range h.under(dir) {
		h.files["/"+strings.TrimPrefix(f, dir+"/")] = h.files[f]
	}
	if list, ok := h.files[dir+".added"]; ok {
		for _, rel := range strings.Split(list, "\n") {
			if rel != "" {
				delete(h.files, "/"+rel)
			}
		}
	}
	h.loadStaticPods() // the kubelet runs the manifests put back
	return 0, ""
}

// verify interprets the verify step: $1 kubeadm, $2 kubelet, $3 kubectl,
// $4 version, $5 node, $6 role.
// bundle checks the staged programs' versions and that every other
// staged path exists (a directory: holds a file), as scriptBundle does.
// It does not check the plan's checksums (kubeadm.ChecksumsEnv): simulated
// programs have no bytes to hash; the real script is tested on a real
// host in package kubeadm.
func (h *Host) bundle(a []string) (int, string) {
	fail := func(format string, args ...any) (int, string) { return 1, "bundle: " + fmt.Sprintf(format, args...) }
	if len(a) < 2 || a[0] == "" || a[1] == "" {
		return 2, fmt.Sprintf("fake host: bundle script expects a staging directory and a version, got %q", a)
	}
	dir, version := a[0], a[1]
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range []Component{ComponentKubeadm, ComponentKubelet, ComponentKubectl} {
		_, v, msg := h.program(path.Join(dir, string(c)), c)
		if msg != "" {
			return fail("staged %s/%s does not run: %s", dir, c, msg)
		}
		if v != version {
			return fail("staged %s is %s, want %s: the upgrader image carries another bundle", c, v, version)
		}
	}
	for _, p := range a[2:] {
		p = path.Clean(p)
		if _, ok := h.files[p]; ok {
			continue
		}
		found := false
		for f := range h.files {
			if strings.HasPrefix(f, p+"/") {
				found = true
				break
			}
		}
		if !found {
			return fail("staged %s is missing", p)
		}
	}
	return 0, "bundle: " + version + " staged"
}

func (h *Host) verify(ctx context.Context, a []string) (int, string) {
	fail := func(format string, args ...any) (int, string) { return 1, "verify: " + fmt.Sprintf(format, args...) }
	version, node, role := a[3], a[4], a[5]
	h.mu.Lock()
	checks := []struct {
		prog string
		c    Component
		what string
	}{{a[0], ComponentKubeadm, "kubeadm"}, {a[1], ComponentKubelet, "kubelet binary"}, {a[2], ComponentKubectl, "kubectl client"}}
	for _, c := range checks {
		_, v, msg := h.program(c.prog, c.c)
		if msg != "" {
			h.mu.Unlock()
			return fail("%s: %s", c.what, msg)
		}
		if v != version {
			h.mu.Unlock()
			return fail("%s is %s, want %s", c.what, v, version)
		}
	}
	for _, u := range []string{"containerd", "kubelet"} {
		if h.units[u] != UnitActive {
			h.mu.Unlock()
			return fail("%s is not active", u)
		}
	}
	cp := h.cp
	h.mu.Unlock()
	if node != h.node {
		return fail("reading node %s: this host is %s", node, h.node)
	}
	got, err := h.nodeKubeletVersion(ctx)
	if err != nil {
		return fail("reading node %s: %v", node, err)
	}
	if got != version {
		return fail("running kubelet reports %s, want %s", got, version)
	}
	if role != string(kubeadm.RoleWorker) && cp != version {
		return fail("kube-apiserver runs registry.k8s.io/kube-apiserver:%s, want tag %s", cp, version)
	}
	return 0, fmt.Sprintf("verified %s at %s", node, version)
}

// backupEtcKubernetes copies args[2] to args[0] and keeps the newest
// args[1] etc-kubernetes copies among the sibling plan directories, as
// the library's script does. The host has no file times: "newest" is the
// order the copies were made on this host (a copy made again moves to the
// end), which is what ls -t sees when nothing else touches them.
func (h *Host) backupEtcKubernetes(args []string) (int, string) {
	if code, out := h.copyTree(args[2], args[0]); code != 0 {
		return code, out
	}
	keep, err := strconv.Atoi(args[1])
	if err != nil || keep < 1 {
		return 2, fmt.Sprintf("sh: bad keep count %q", args[1])
	}
	plan := path.Dir(path.Clean(args[0]))
	h.etcBackups = append(slices.DeleteFunc(h.etcBackups, func(p string) bool { return p == plan }), plan)
	root := path.Dir(plan)
	n := 0
	for i := len(h.etcBackups) - 1; i >= 0; i-- {
		p := h.etcBackups[i]
		if path.Dir(p) != root {
			continue
		}
		if n++; n <= keep {
			continue
		}
		for _, f := range h.under(p + "/etc-kubernetes") {
			delete(h.files, f)
		}
	}
	return 0, ""
}
