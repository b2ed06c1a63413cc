package kubeadmnode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// NodeOptions configure StartNode.
type NodeOptions struct {
	// Name is the node's name and host name: a DNS-1123 label of at most
	// 20 characters.
	Name string
	// Assets are the binaries the node starts with: kubeadm, kubelet and
	// kubectl in /usr/bin, the CNI plugins in /opt/cni/bin.
	Assets Assets
	// Network is the segment the node is attached to.
	Network *Network
	// Images are imported into containerd's k8s.io namespace before the
	// node returns (at least the pause image; a control plane needs
	// Assets.ControlPlaneImages of each version it will run).
	Images []Image
	// WorkDir is where the node keeps its disk (containerd's content,
	// logs); default os.TempDir(). Its memory-backed root (everything
	// else the node writes) is mounted below it.
	WorkDir string
	// Log receives the harness's progress; default logr.Discard().
	Log logr.Logger
}

// Node is a machine for kubeadm made of Linux namespaces: a network
// namespace on its Network, a mount namespace whose root is an overlay of
// this machine's root filesystem (reads see the host's files, writes stay
// in the node's own memory-backed layer), its own host name, and
// containerd and the kubelet run by a supervisor that answers the
// systemctl stand-in installed as the node's /usr/bin/systemctl.
//
// What it shares with the machine, and so what it does not isolate: the
// PID namespace (its processes are visible with ps, and a process of the
// node can see the machine's), the kernel, cgroup hierarchies (the
// kubelet runs with --cgroup-root=/upgradekit-<id>, removed by Close),
// devices, and the host's files below / (read-only through the overlay,
// except /var/lib/containerd and /var/lib/upgradekit-node, which are
// directories of the node's WorkDir).
type Node struct {
	// Name is the node's name; IP its address on the Network.
	Name, IP string

	opts       NodeOptions
	log        logr.Logger
	dir        string // on the machine: the node's disk
	rootMount  string // tmpfs holding the overlay's upper layer
	netns      string
	cgroupRoot string
	anchor     *exec.Cmd
	anchorDone chan struct{}
	sup        *supervisor
	closeOnce  sync.Once
	closeErr   error
}

var nodeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// setupScript runs as the node's first process, in a new mount and UTS
// namespace inside the node's network namespace: $1 the tmpfs with the
// overlay's layers, $2 the node's disk, $3 its name. It builds the node's
// root, pivots into it, says "ready" and sleeps: its PID is the node's
// (the target the upgrader enters).
const setupScript = `set -eu
layers=$1 disk=$2 name=$3
m=$layers/merged
mkdir -p "$layers/upper" "$layers/work" "$m"
mount -t overlay overlay -o "lowerdir=/,upperdir=$layers/upper,workdir=$layers/work" "$m"
mount -t proc proc "$m/proc"
mount -t sysfs sysfs "$m/sys"
mount --rbind /sys/fs/cgroup "$m/sys/fs/cgroup"
mount --rbind /dev "$m/dev"
mount -t tmpfs -o mode=0755 tmpfs "$m/run"
mkdir -p "$disk/containerd" "$disk/node" "$m/var/lib/containerd" "$m/var/lib/upgradekit-node"
mount --bind "$disk/containerd" "$m/var/lib/containerd"
mount --bind "$disk/node" "$m/var/lib/upgradekit-node"
hostname "$name"
cd "$m"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
mount --make-rshared /
echo ready
exec sleep infinity`

// StartNode builds the node, starts containerd in it and imports
// opts.Images. Close undoes everything StartNode did, also when StartNode
// fails half-way (it calls Close itself then).
func StartNode(ctx context.Context, opts NodeOptions) (_ *Node, err error) {
	if !nodeName.MatchString(opts.Name) {
		return nil, fmt.Errorf("nodetest: node name %q: want a DNS-1123 label of at most 20 characters", opts.Name)
	}
	if opts.Network == nil {
		return nil, errors.New("nodetest: NodeOptions.Network is nil")
	}
	if opts.Assets.Dir == "" {
		return nil, errors.New("nodetest: NodeOptions.Assets is empty (LoadAssets)")
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	n := &Node{Name: opts.Name, opts: opts, log: opts.Log.WithValues("node", opts.Name)}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close(context.WithoutCancel(ctx)))
		}
	}()
	if n.dir, err = os.MkdirTemp(opts.WorkDir, "upgradekit-node-"+opts.Name+"-"); err != nil {
		return nil, err
	}
	n.cgroupRoot = "/upgradekit-" + filepath.Base(n.dir)
	n.rootMount = filepath.Join(n.dir, "root")
	for _, d := range []string{n.rootMount, filepath.Join(n.dir, "disk"), filepath.Join(n.dir, "log")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := run(ctx, "mount", "-t", "tmpfs", "-o", "size=12g,mode=0700", "tmpfs", n.rootMount); err != nil {
		n.rootMount = ""
		return nil, err
	}
	if n.netns, n.IP, err = opts.Network.attach(ctx, opts.Name); err != nil {
		return nil, err
	}
	if err := n.startAnchor(ctx); err != nil {
		return nil, err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return nil, err
	}
	if err := n.installFiles(); err != nil {
		return nil, err
	}
	n.sup = newSupervisor(n.log, n.Enter(), filepath.Join(n.dir, "log"),
		unitSpec{name: "containerd", argv: func() ([]string, error) {
			return []string{"/usr/bin/containerd", "--config", "/etc/containerd/config.toml"}, nil
		}},
		unitSpec{name: "kubelet", argv: n.kubeletArgv},
	)
	if err := n.sup.serve(n.Path(socketPath)); err != nil {
		return nil, err
	}
	if _, err := n.Run(ctx, "systemctl", "restart", "containerd"); err != nil {
		return nil, err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return nil, err
	}
	if len(opts.Images) > 0 {
		if err := n.ImportImages(ctx, opts.Images...); err != nil {
			return nil, err
		}
	}
	n.log.Info("node started", "ip", n.IP, "dir", n.dir)
	return n, nil
}

// startAnchor starts the node's first process and waits for its "ready".
func (n *Node) startAnchor(ctx context.Context) error {
	cmd := exec.Command("nsenter", "--net=/run/netns/"+n.netns, "--",
		"unshare", "--mount", "--uts", "--propagation", "private", "--",
		"sh", "-c", setupScript, "sh", n.rootMount, filepath.Join(n.dir, "disk"), n.Name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.anchor = cmd
	n.anchorDone = make(chan struct{})
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = cmd.Wait(); close(n.anchorDone) }()
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		<-n.anchorDone
		return fmt.Errorf("nodetest: setting up node %s failed: %s", n.Name, strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PID is the node's first process: the target whose namespaces nsenter
// (and the upgrader, as UPGRADEKIT_TARGET_PID) enters to run on the node.
func (n *Node) PID() int { return n.anchor.Process.Pid }

// Enter is the nsenter prefix that runs a command on the node.
func (n *Node) Enter() []string {
	return []string{"nsenter", "--target", strconv.Itoa(n.PID()), "--mount", "--uts", "--ipc", "--net", "--"}
}

// Path is where the node's path p is seen from the machine (through
// /proc/<PID>/root), for reading and writing the node's files.
func (n *Node) Path(p string) string {
	return filepath.Join("/proc", strconv.Itoa(n.PID()), "root", filepath.FromSlash(p))
}

// Dir is the node's directory on the machine; its log subdirectory holds
// containerd's and the kubelet's output.
func (n *Node) Dir() string { return n.dir }

// Run runs argv on the node (never through a shell) and returns its
// combined output; the error carries the output when it fails.
func (n *Node) Run(ctx context.Context, argv ...string) (string, error) {
	full := append(n.Enter(), argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("node %s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, lastLines(string(out), 20))
	}
	return string(out), nil
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}

// WriteFile writes a file on the node, creating its directory.
func (n *Node) WriteFile(p string, data []byte, mode os.FileMode) error {
	hp := n.Path(p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		return err
	}
	tmp := hp + ".upgradekit-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, hp)
}

// CopyFile copies a file of the machine to the node.
func (n *Node) CopyFile(src, p string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return n.WriteFile(p, data, mode)
}

func (n *Node) installFiles() error {
	a := n.opts.Assets
	files := map[string][]byte{
		"/etc/hosts":                            []byte(fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", n.IP, n.Name)),
		"/etc/hostname":                         []byte(n.Name + "\n"),
		"/etc/containerd/config.toml":           []byte(containerdConfig(a.PauseVersion)),
		"/etc/cni/net.d/10-upgradekit.conflist": []byte(cniConfig(n.IP)),
	}
	for p, data := range files {
		if err := n.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	for _, b := range []string{"kubeadm", "kubelet", "kubectl"} {
		if err := n.CopyFile(a.Bin(b), "/usr/bin/"+b, 0o755); err != nil {
			return err
		}
	}
	for _, b := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if err := n.CopyFile(a.Bin("cni/"+b), "/opt/cni/bin/"+b, 0o755); err != nil {
			return err
		}
	}
	stand, err := systemctlBinary(n.dir)
	if err != nil {
		return err
	}
	return n.CopyFile(stand, "/usr/bin/systemctl", 0o755)
}

// containerdConfig is containerd 1.6's configuration for the node: CRI with
// runc and cgroupfs (the kubelet's driver here), the pause image kubeadm
// names, the CNI plugins in /opt/cni/bin, and restrict_oom_score_adj
// because this machine kind withholds CAP_SYS_RESOURCE.
func containerdConfig(pause string) string {
	return `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:` + pause + `"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`
}

// cniConfig is a bridge network for the node's pods, 10.244.<host>.0/24,
// local to the node (nothing routes between nodes' pod networks; the
// static pods kubeadm runs use the host network).
func cniConfig(ip string) string {
	host := ip[strings.LastIndexByte(ip, '.')+1:]
	return `{
  "cniVersion": "1.0.0",
  "name": "upgradekit",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.` + host + `.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`
}

// kubeletArgv is the kubelet's command line as kubeadm's systemd drop-in
// (10-kubeadm.conf) builds it: its fixed flags, then $KUBELET_KUBEADM_ARGS
// from /var/lib/kubelet/kubeadm-flags.env and $KUBELET_EXTRA_ARGS from
// /etc/default/kubelet, each split at white space as systemd does.
func (n *Node) kubeletArgv() ([]string, error) {
	argv := []string{"/usr/bin/kubelet",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml"}
	for _, f := range []struct{ path, name string }{
		{"/var/lib/kubelet/kubeadm-flags.env", "KUBELET_KUBEADM_ARGS"},
		{"/etc/default/kubelet", "KUBELET_EXTRA_ARGS"},
	} {
		data, err := os.ReadFile(n.Path(f.path))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		argv = append(argv, envFileWords(string(data), f.name)...)
	}
	return argv, nil
}

// envFileWords returns the words of variable name in a systemd
// EnvironmentFile: NAME="value" or NAME=value, quotes removed, split at
// white space (how ExecStart expands an unquoted $NAME).
func envFileWords(data, name string) []string {
	var val string
	for _, line := range strings.Split(data, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || k != name {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		val = v
	}
	return strings.Fields(val)
}

func (n *Node) waitContainerd(ctx context.Context) error {
	return poll(ctx, 100*time.Millisecond, 2*time.Minute, func() error {
		_, err := n.Run(ctx, "ctr", "--address", "/run/containerd/containerd.sock", "version")
		return err
	})
}

// ImportImages writes images as one archive on the node's disk and
// imports it into containerd's k8s.io namespace.
func (n *Node) ImportImages(ctx context.Context, images ...Image) error {
	f, err := os.CreateTemp(filepath.Join(n.dir, "disk", "node"), "images-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := WriteImages(f, images...); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = n.Run(ctx, "ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import", "/var/lib/upgradekit-node/"+filepath.Base(f.Name()))
	return err
}

// poll calls f every interval until it returns nil, ctx ends or limit
// passes; it returns f's last error.
func poll(ctx context.Context, interval, limit time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (after %s: %v)", err, limit, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// cgroupHierarchies lists the mounted cgroup hierarchies of the machine.
func cgroupHierarchies() ([]string, error) {
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out, nil
}

// makeCgroupRoot creates the kubelet's --cgroup-root in every hierarchy
// (cpuset needs its cpus and mems before a process may join).
func (n *Node) makeCgroupRoot() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		d := filepath.Join(h, n.cgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
