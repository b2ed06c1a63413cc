package simulator

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// fileAttrs are a host file's mode (canonical octal, "644") and owner
// ("user" or "user:group"); files without them are 644 root:root.
type fileAttrs struct{ mode, owner string }

// filesKind names one of the files plan's scripts.
type filesKind int

const (
	scriptFilesBackup filesKind = iota + 1
	scriptFilesWrite
	scriptFilesVerify
	scriptFilesRollback
)

var (
	filesScriptsOnce sync.Once
	filesScripts     map[string]filesKind
)

func knownFilesScripts() map[string]filesKind {
	filesScriptsOnce.Do(func() {
		filesScripts = learnScripts(func() (nodeexec.Plan, error) {
			return kubeadm.NewFilesPlan(kubeadm.FilesConfig{Node: "learn", Files: []kubeadm.File{{Path: "/etc/kubernetes/learn"}}})
		},
			scriptSource[filesKind]{kubeadm.StepFiles, backupArgv, scriptFilesBackup},
			scriptSource[filesKind]{kubeadm.StepFiles, runArgv, scriptFilesWrite},
			scriptSource[filesKind]{kubeadm.StepFiles, checkArgv, scriptFilesVerify},
			scriptSource[filesKind]{kubeadm.StepFiles, rollbackArgv, scriptFilesRollback},
			scriptSource[filesKind]{kubeadm.StepFilesVerify, runArgv, scriptFilesVerify})
	})
	return filesScripts
}

func init() {
	planScripts = append(planScripts, func(_ context.Context, h *Host, script string, args []string, env map[string]string) (int, string, bool) {
		k, ok := knownFilesScripts()[script]
		if !ok {
			return 0, "", false
		}
		code, out := h.locked(func() (int, string) { return h.filesScript(k, args, env) })
		return code, out, true
	})
}

// FileAttrs returns a host file's mode (octal, "644") and owner.
func (h *Host) FileAttrs(p string) (mode, owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.attrsOf(path.Clean(p))
	return a.mode, a.owner
}

// attrsOf returns p's attributes; h.mu is held.
func (h *Host) attrsOf(p string) fileAttrs {
	if a, ok := h.attrs[p]; ok {
		return a
	}
	return fileAttrs{mode: "644", owner: "root:root"}
}

// sameOwner compares owners as stat would: names and IDs agree for root,
// the only account the simulated host has.
func sameOwner(want, got string) bool {
	norm := func(s string) string {
		u, g, hasGroup := strings.Cut(s, ":")
		if u == "0" {
			u = "root"
		}
		if g == "0" {
			g = "root"
		}
		if !hasGroup {
			return u
		}
		return u + ":" + g
	}
	w, g := norm(want), norm(got)
	if !strings.Contains(w, ":") {
		g, _, _ = strings.Cut(g, ":")
	}
	return w == g
}

// filesScript interprets the files plan's scripts; h.mu is held.
func (h *Host) filesScript(k filesKind, args []string, env map[string]string) (int, string) {
	if h.attrs == nil {
		h.attrs = map[string]fileAttrs{}
	}
	switch k {
	case scriptFilesBackup, scriptFilesRollback:
		if len(args) < 1 {
			return 2, "fake host: files script expects a backup directory"
		}
		dir := path.Clean(args[0])
		for i, p := range args[1:] {
			p = path.Clean(p)
			saved, absent := path.Join(dir, strconv.Itoa(i)), path.Join(dir, strconv.Itoa(i)+".absent")
			if k == scriptFilesBackup {
				delete(h.files, saved)
				delete(h.files, absent)
				if content, ok := h.files[p]; ok {
					h.files[saved] = content
					h.attrs[saved] = h.attrsOf(p)
				} else {
					h.files[absent] = ""
				}
				continue
			}
			if _, ok := h.files[absent]; ok {
				delete(h.files, p)
				delete(h.attrs, p)
			} else if content, ok := h.files[saved]; ok {
				h.files[p] = content
				h.attrs[p] = h.attrsOf(saved)
			}
		}
		return 0, ""
	case scriptFilesWrite:
		if len(args)%3 != 0 {
			return 2, fmt.Sprintf("fake host: files write expects path, mode, owner triples, got %q", args)
		}
		for i := 0; i < len(args); i += 3 {
			b64, ok := env[kubeadm.FilesEnvPrefix+strconv.Itoa(i/3)]
			if !ok {
				return 1, "base64: invalid input" // printenv printed nothing
			}
			content, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return 1, "base64: invalid input"
			}
			p := path.Clean(args[i])
			h.files[p] = string(content)
			h.attrs[p] = fileAttrs{mode: args[i+1], owner: args[i+2]}
		}
		return 0, ""
	case scriptFilesVerify:
		if len(args)%4 != 0 {
			return 2, fmt.Sprintf("fake host: files verify expects path, sha256, mode, owner quadruples, got %q", args)
		}
		for i := 0; i < len(args); i += 4 {
			p, sum, mode, owner := path.Clean(args[i]), args[i+1], args[i+2], args[i+3]
			content, ok := h.files[p]
			if !ok {
				return 1, "files: " + p + " is missing"
			}
			got := sha256.Sum256([]byte(content))
			if hex.EncodeToString(got[:]) != sum {
				return 1, fmt.Sprintf("files: %s has content sha256 %x, want %s", p, got, sum)
			}
			a := h.attrsOf(p)
			if a.mode != mode {
				return 1, fmt.Sprintf("files: %s has mode %s, want %s", p, a.mode, mode)
			}
			if !sameOwner(owner, a.owner) {
				return 1, fmt.Sprintf("files: %s is owned by %s, want %s", p, a.owner, owner)
			}
		}
		return 0, "files verified"
	}
	return ExitUnknownCommand, "fake host: unhandled files script"
}
