package kubeadmnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// systemctlBinary builds the systemctl stand-in into dir.
func systemctlBinary(dir string) (string, error) {
	out := filepath.Join(dir, "systemctl")
	cmd := exec.Command("go", "build", "-o", out, "github.com/upgradekit/upgradekit/harness/kubeadmnode/internal/systemctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nodetest: building the systemctl stand-in: %w: %s", err, b)
	}
	return out, nil
}

// Close stops everything the node runs and removes everything it made:
// the kubelet and containerd (through the supervisor), every process left
// in the node's namespaces or cgroups (containers, shims), the cgroups,
// the memory-backed root, the node's directory and its network namespace.
// It is safe to call more than once and after a failed StartNode.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	var errs []error
	if n.sup != nil {
		n.sup.Close(ctx)
	}
	if n.anchor != nil {
		if err := n.killAll(ctx); err != nil {
			errs = append(errs, err)
		}
		_ = syscall.Kill(-n.anchor.Process.Pid, syscall.SIGKILL)
		select {
		case <-n.anchorDone:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("nodetest: node %s: its first process did not exit", n.Name))
		}
	}
	if n.cgroupRoot != "" {
		if err := removeCgroups(n.cgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	if n.rootMount != "" {
		if err := run(ctx, "umount", n.rootMount); err != nil {
			// Something still holds it; detach it so that it goes away
			// with the last user.
			if err2 := run(ctx, "umount", "-l", n.rootMount); err2 != nil {
				errs = append(errs, err, err2)
			}
		}
	}
	if n.netns != "" {
		if err := run(ctx, "ip", "netns", "del", n.netns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	if n.dir != "" {
		if err := os.RemoveAll(n.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killAll SIGKILLs every process in the node's mount or network namespace
// or in its cgroups until none is left (containers and shims outlive
// containerd; a pod with its own namespaces is found by its cgroup).
func (n *Node) killAll(ctx context.Context) error {
	self := os.Getpid()
	anchor := n.anchor.Process.Pid
	mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", anchor))
	net := ""
	var st syscall.Stat_t
	if n.netns != "" && syscall.Stat("/run/netns/"+n.netns, &st) == nil {
		net = fmt.Sprintf("net:[%d]", st.Ino)
	}
	for attempt := 0; attempt < 50; attempt++ {
		pids := map[int]bool{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || pid == anchor {
				continue
			}
			if m, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); mnt != "" && m == mnt {
				pids[pid] = true
			}
			if nn, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); net != "" && nn == net {
				pids[pid] = true
			}
		}
		for _, pid := range cgroupPIDs(n.cgroupRoot) {
			if pid != self {
				pids[pid] = true
			}
		}
		if len(pids) == 0 {
			return nil
		}
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("nodetest: node %s: processes still running after repeated SIGKILL", n.Name)
}

// cgroupPIDs lists the processes in root's subtree of every hierarchy.
func cgroupPIDs(root string) []int {
	if root == "" {
		return nil
	}
	hs, _ := cgroupHierarchies()
	var pids []int
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups removes root's subtree in every hierarchy, deepest first.
func removeCgroups(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
