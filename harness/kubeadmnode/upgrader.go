package kubeadmnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// StageOptions say what StageBundle puts in the node's staging directory
// besides the target version's kubeadm, kubelet and kubectl.
type StageOptions struct {
	// Etcdctl stages etcd/etcdctl (the first control plane's snapshot).
	Etcdctl bool
	// Containerd stages containerd/usr/bin/containerd: the machine's own
	// containerd binary (Debian's), so that the plan's containerd step
	// installs it again and restarts containerd for real; with
	// ContainerdDir, that directory's containerd, containerd-shim-runc-v2
	// and ctr instead.
	Containerd bool
	// ContainerdDir is a directory holding another containerd (its
	// containerd, containerd-shim-runc-v2 and ctr: what
	// hack/containerd-assets.sh prints), staged under containerd/usr/bin/
	// where they replace the machine's own. Only with Containerd.
	ContainerdDir string
	// CNIPlugins stages cni-plugins/opt/cni/bin/ with the target version's
	// plugins.
	CNIPlugins bool
	// Images are written as images/images.tar, for the plan's images step
	// (kubeadm.Config.ImportImages).
	Images []Image
}

// bundleFiles maps each file of a bundle (path under the staging
// directory) to its source on this machine. With o.Images the image
// archive is written into dir first.
func bundleFiles(to Assets, o StageOptions, dir string) (map[string]string, error) {
	files := map[string]string{}
	for _, b := range []string{"kubeadm", "kubelet", "kubectl"} {
		files["kubernetes/"+b] = to.Bin(b)
	}
	if o.Etcdctl {
		files["etcd/etcdctl"] = to.Bin("etcdctl")
	}
	switch {
	case o.ContainerdDir != "" && !o.Containerd:
		return nil, fmt.Errorf("nodetest: StageOptions.ContainerdDir %s without Containerd", o.ContainerdDir)
	case o.ContainerdDir != "":
		for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
			p := filepath.Join(o.ContainerdDir, b)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("nodetest: staging containerd from StageOptions.ContainerdDir: %w", err)
			}
			files["containerd/usr/bin/"+b] = p
		}
	case o.Containerd:
		bin, err := exec.LookPath("containerd")
		if err != nil {
			return nil, fmt.Errorf("nodetest: staging containerd: %w", err)
		}
		files["containerd/usr/bin/containerd"] = bin
	}
	if o.CNIPlugins {
		for _, b := range []string{"bridge", "host-local", "loopback", "portmap"} {
			files["cni-plugins/opt/cni/bin/"+b] = to.Bin("cni/" + b)
		}
	}
	if len(o.Images) > 0 {
		f, err := os.CreateTemp(dir, "images-*.tar")
		if err != nil {
			return nil, err
		}
		if err := WriteImages(f, o.Images...); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		files["images/images.tar"] = f.Name()
	}
	return files, nil
}

// StageBundle fills the node's kubeadm.DefaultStagingDir as the upgrader
// pod's stage container would from the upgrader image, with to's binaries.
// It returns the SHA-256 of every staged file by its path under the
// staging directory, as kubeadm.Config.Checksums takes them (in a real
// deployment they come from the operator's release records, not from the
// bundle).
func (n *Node) StageBundle(to Assets, o StageOptions) (map[string]string, error) {
	dir := kubeadm.DefaultStagingDir
	if err := os.RemoveAll(n.Path(dir)); err != nil {
		return nil, err
	}
	files, err := bundleFiles(to, o, filepath.Join(n.dir, "disk"))
	if err != nil {
		return nil, err
	}
	sums := make(map[string]string, len(files))
	for rel, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		if err := n.WriteFile(dir+"/"+rel, data, 0o755); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		sums[rel] = hex.EncodeToString(sum[:])
	}
	return sums, nil
}

// UpgraderImage is the image examples/upgrader's Dockerfile builds (its
// bundle target), assembled from files instead: busybox (the machine's
// busybox-static) with the applets the Dockerfile links, the upgrader
// binary at /upgrader, and the bundle for to under /staging. It is written
// for a node's ImportImages; dir holds the bundle's image archive.
func UpgraderImage(name, upgrader string, to Assets, o StageOptions, dir string) (Image, error) {
	bundle, err := bundleFiles(to, o, dir)
	if err != nil {
		return Image{}, err
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return Image{}, fmt.Errorf("nodetest: the upgrader image needs busybox (Debian's busybox-static): %w", err)
	}
	img := Image{Name: name, Files: map[string]string{"/upgrader": upgrader, "/bin/busybox": busybox},
		Symlinks: map[string]string{}, Entrypoint: []string{"/upgrader"}}
	for _, applet := range []string{"nsenter", "sh", "cp", "mkdir", "rm"} {
		img.Symlinks["/bin/"+applet] = "busybox"
	}
	for rel, src := range bundle {
		img.Files["/staging/"+rel] = src
	}
	return img, nil
}

// BuildUpgrader builds the project's upgrader command (examples/upgrader)
// into dir and returns its path. It builds from this repository's checkout
// (the examples module, next to the harness module this file is in), so it
// works in a clone of the repository, not from the module cache.
func BuildUpgrader(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "upgrader")
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("nodetest: building the upgrader: cannot locate the repository")
	}
	examples := filepath.Join(filepath.Dir(self), "..", "..", "examples")
	if _, err := os.Stat(filepath.Join(examples, "go.mod")); err != nil {
		return "", fmt.Errorf("nodetest: building the upgrader: the examples module is not at %s: %w", examples, err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./upgrader")
	cmd.Dir = examples
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("nodetest: building the upgrader: %w: %s", err, b)
	}
	return out, nil
}

// UpgraderRun is one run of the upgrader command against a node.
type UpgraderRun struct {
	// ExitCode is the upgrader's exit code (examples/upgrader documents
	// them: 0 Succeeded, 4 RolledBack, 5 Failed, 6 NeedsAttention, ...).
	ExitCode int
	// Output is its standard output and error.
	Output string
}

// UpgraderCommand returns the upgrader command line the way the upgrader
// pod's runner runs on a node: steps run through nsenter in the node's
// namespaces (--target-pid is the node's PID), the journal is in
// journalDir, and a plan file is written next to it. cmd is "run" or
// "rollback"; args come after it. The command is in a process group of
// its own, so that a test can kill it with everything it started, as a
// crashing upgrader container would be.
func (n *Node) UpgraderCommand(ctx context.Context, upgrader, cmd string, plan nodeexec.Plan, journalDir string, args ...string) (*exec.Cmd, error) {
	data, err := nodeexec.EncodePlan(plan)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(journalDir, 0o700); err != nil {
		return nil, err
	}
	planFile := filepath.Join(journalDir, plan.Name+".plan.json")
	if err := os.WriteFile(planFile, data, 0o600); err != nil {
		return nil, err
	}
	argv := append([]string{cmd, "-plan", planFile, "-journal-dir", journalDir, "-target-pid", strconv.Itoa(n.PID())}, args...)
	c := exec.CommandContext(ctx, upgrader, argv...)
	c.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c, nil
}

// RunUpgrader runs UpgraderCommand to its end.
func (n *Node) RunUpgrader(ctx context.Context, upgrader, cmd string, plan nodeexec.Plan, journalDir string, args ...string) (UpgraderRun, error) {
	c, err := n.UpgraderCommand(ctx, upgrader, cmd, plan, journalDir, args...)
	if err != nil {
		return UpgraderRun{}, err
	}
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return UpgraderRun{ExitCode: ee.ExitCode(), Output: string(out)}, nil
	}
	return UpgraderRun{Output: string(out)}, err
}

// Starts says how often the supervisor has started unit ("kubelet",
// "containerd") on the node.
func (n *Node) Starts(unit string) int {
	n.sup.mu.Lock()
	defer n.sup.mu.Unlock()
	if u, ok := n.sup.units[unit]; ok {
		return u.starts
	}
	return 0
}

// Log returns what unit ("kubelet", "containerd") wrote, its last max
// bytes.
func (n *Node) Log(unit string, max int) string {
	data, _ := os.ReadFile(filepath.Join(n.dir, "log", unit+".log"))
	s := string(data)
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return strings.TrimSpace(s)
}
