package simulator

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// Component versions a Host starts with when no option says otherwise.
const (
	DefaultContainerdVersion = "1.7.27"
	defaultCNIVersion        = "v1.6.2"
	DefaultEtcdVersion       = "3.5.15-0"
)

// Host paths of the simulated components. The kubeadm step library's
// default BinDir is /usr/bin; containerd and the CNI plugins are installed
// from rootfs trees under the staging directory.
const (
	containerdPath = "/usr/local/bin/containerd"
	cniPluginPath  = "/opt/cni/bin/loopback"
)

// Component names a piece of software on a Host.
type Component string

// Components whose versions a Host tracks.
const (
	ComponentKubelet    Component = "kubelet"
	ComponentKubeadm    Component = "kubeadm"
	ComponentKubectl    Component = "kubectl"
	ComponentContainerd Component = "containerd"
	ComponentCNI        Component = "cni"
	ComponentEtcd       Component = "etcd"
	// ComponentControlPlane is the version of the static control plane pods
	// (kube-apiserver and friends) that kubeadm upgrade writes; "" on
	// workers.
	ComponentControlPlane Component = "control-plane"
)

// Unit states reported by a Host.
const (
	UnitActive   = "active"
	UnitInactive = "inactive"
)

// Exit codes of the simulated host for commands it refuses.
const (
	// ExitUnknownCommand is returned for any argv or script the host does
	// not interpret (like a shell's "command not found").
	ExitUnknownCommand = 127
	// exitInjected is the exit code of a failure injected by Faults.
	exitInjected = 86
)

// HostOption configures a Host.
type HostOption func(*Host)

// WithNodeClient makes the host update its Node (status.nodeInfo and the
// Ready condition) through c when the kubelet starts or a fault makes the
// node NotReady, and makes the verify step read the kubelet version from
// the Node, as the real script does with kubectl.
func WithNodeClient(c client.Client) HostOption { return func(h *Host) { h.client = c } }

// WithHostClock sets the clock slow steps advance (default: the real clock,
// which slow steps then only read). Use a *testingclock.FakeClock to test
// deadlines without sleeping; see Faults.SlowStep.
func WithHostClock(c clock.Clock) HostOption {
	return func(h *Host) {
		if c != nil {
			h.clock = c
		}
	}
}

// WithFaults injects the faults f describes into the host's commands.
func WithFaults(f *Faults) HostOption { return func(h *Host) { h.faults = f } }

// WithComponentVersions overrides the starting containerd, CNI plugins and
// etcd versions ("" keeps the default).
func WithComponentVersions(containerd, cni, etcd string) HostOption {
	return func(h *Host) {
		if containerd != "" {
			h.containerd = containerd
		}
		if cni != "" {
			h.cni = cni
		}
		if etcd != "" {
			h.etcd = etcd
		}
	}
}

// kubeadmState is what kubeadm keeps in the cluster (the kubeadm-config
// ConfigMap): the version `kubeadm upgrade apply` last set, which `kubeadm
// upgrade node` on the other nodes follows. A host with a node client
// reads kubeadm-config's kubernetesVersion instead when the ConfigMap
// exists (whoever wrote it: `kubeadm upgrade apply`, or
// KubeadmControlPlane before it joins a machine at a new version).
type kubeadmState struct {
	mu      sync.Mutex
	version string
}

func (k *kubeadmState) get() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.version
}

func (k *kubeadmState) set(v string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.version = v
}

// Host is a simulated node: component versions, a small in-memory
// filesystem and systemd unit states. It implements nodeexec.Executor by
// interpreting exactly the commands the kubeadm step library
// (nodeexec/kubeadm) emits; anything else gets exit code
// ExitUnknownCommand. It is safe for concurrent use.
type Host struct {
	mu           sync.Mutex
	node         string
	role         strategy.Role
	files        map[string]string
	etcBackups   []string          // plan backup dirs with a copy of /etc/kubernetes, oldest first
	units        map[string]string // unit -> active/inactive
	running      map[Component]string
	cp           string // control plane static pod version
	etcd         string
	containerd   string
	cni          string
	etcdVersions map[string]string
	kubeadm      *kubeadmState
	client       client.Client
	clock        clock.Clock
	faults       *Faults
	history      []nodeexec.Command
	notReady     bool
	kubeletArgs  []string             // what the running kubelet read from kubeadm-flags.env
	attrs        map[string]fileAttrs // modes and owners the files plan set
	// observe, when set, sees every command Run answered, once it returns
	// (the Simulator's MachineUpdater mode records Executions with it).
	observe func(nodeexec.Command, nodeexec.Result, error)
}

// NewHost returns a host for node at Kubernetes version, with the
// kubelet and containerd running. Control plane hosts also run etcd and
// the control plane static pods at version.
func NewHost(node string, role strategy.Role, version string, opts ...HostOption) (*Host, error) {
	return newHost(node, role, version, &kubeadmState{version: version}, opts)
}

func newHost(node string, role strategy.Role, version string, ks *kubeadmState, opts []HostOption) (*Host, error) {
	if node == "" {
		return nil, fmt.Errorf("simulator: %w: NewHost: empty node name", ErrInvalidCluster)
	}
	if role != strategy.RoleControlPlane && role != strategy.RoleWorker {
		return nil, fmt.Errorf("simulator: %w: NewHost %s: role %s (want %s or %s)", ErrInvalidCluster, errtext.Quote(node), errtext.Quote(string(role)), strategy.RoleControlPlane, strategy.RoleWorker)
	}
	if err := kubeadm.CheckUpgrade(version, version); err != nil {
		return nil, fmt.Errorf("simulator: %w: NewHost %s: version: %w", ErrInvalidCluster, node, err)
	}
	h := &Host{
		node: node, role: role, files: map[string]string{}, units: map[string]string{},
		running: map[Component]string{}, containerd: DefaultContainerdVersion, cni: defaultCNIVersion,
		etcd: DefaultEtcdVersion, etcdVersions: map[string]string{}, kubeadm: ks, clock: clock.RealClock{},
	}
	for _, o := range opts {
		if o != nil {
			o(h)
		}
	}
	bin := kubeadm.DefaultBinDir
	for _, c := range []Component{ComponentKubeadm, ComponentKubelet, ComponentKubectl} {
		h.files[path.Join(bin, string(c))] = binary(c, version)
	}
	h.files[containerdPath] = binary(ComponentContainerd, h.containerd)
	h.files[cniPluginPath] = binary(ComponentCNI, h.cni)
	h.files["/etc/kubernetes/kubelet.conf"] = "kubelet kubeconfig for " + node
	h.files["/var/lib/kubelet/config.yaml"] = "kind: KubeletConfiguration # " + version
	h.files[kubeadm.DefaultKubeadmFlagsFile] = defaultKubeadmFlags
	if role == strategy.RoleControlPlane {
		h.cp = version
		h.files["/etc/kubernetes/admin.conf"] = "admin kubeconfig"
		h.files["/etc/kubernetes/pki/etcd/ca.crt"] = "etcd ca"
		h.files["/etc/kubernetes/pki/apiserver-etcd-client.crt"] = "etcd client cert"
		h.files["/etc/kubernetes/pki/apiserver-etcd-client.key"] = "etcd client key"
		h.renderManifests(staticPodConfig{})
	} else {
		h.etcd = ""
	}
	h.units["kubelet"], h.units["containerd"] = UnitActive, UnitActive
	h.running[ComponentKubelet], h.running[ComponentContainerd] = version, h.containerd
	h.kubeletArgs = h.readKubeletArgs()
	return h, nil
}

func binary(c Component, version string) string { return "fake-binary " + string(c) + " " + version }

// binaryVersion returns the component and version of a simulated binary.
func binaryVersion(content string) (Component, string, bool) {
	f := strings.Fields(content)
	if len(f) == 4 && f[3] == crashesOnStart {
		f = f[:3]
	}
	if len(f) != 3 || f[0] != "fake-binary" {
		return "", "", false
	}
	return Component(f[1]), f[2], true
}

// crashesOnStart, appended to a simulated binary, makes a daemon that
// reports its version (`kubelet --version` works) but exits when its unit
// starts it: a bad build, a flag it no longer accepts.
const crashesOnStart = "crashes-on-start"

// Node returns the host's node name.
func (h *Host) Node() string { return h.node }

// Version returns the installed version of c ("" if absent). For Kubelet
// and Containerd it is the binary on disk; RunningVersion says what runs.
func (h *Host) Version(c Component) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch c {
	case ComponentKubeadm, ComponentKubelet, ComponentKubectl:
		return h.binVersion(path.Join(kubeadm.DefaultBinDir, string(c)))
	case ComponentContainerd:
		return h.binVersion(containerdPath)
	case ComponentCNI:
		return h.binVersion(cniPluginPath)
	case ComponentEtcd:
		return h.etcd
	case ComponentControlPlane:
		return h.cp
	}
	return ""
}

func (h *Host) binVersion(p string) string {
	_, v, _ := binaryVersion(h.files[p])
	return v
}

// RunningVersion returns the version of the running kubelet or containerd
// ("" when the unit is stopped).
func (h *Host) RunningVersion(c Component) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running[c]
}

// UnitState returns "active", "inactive" or "" for an unknown unit.
func (h *Host) UnitState(unit string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.units[unit]
}

// File returns the content of a host file.
func (h *Host) File(p string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.files[path.Clean(p)]
	return s, ok
}

// WriteFile writes a host file (for tests that prepare or corrupt state).
func (h *Host) WriteFile(p, content string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		return // a Host not made by NewHost has no file system
	}
	h.files[path.Clean(p)] = content
}

// RemoveFile deletes a host file.
func (h *Host) RemoveFile(p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.files, path.Clean(p))
}

// Files lists the host's file paths under dir, sorted.
func (h *Host) Files(dir string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.under(path.Clean(dir))
}

func (h *Host) under(dir string) []string {
	var out []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for p := range h.files {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Commands returns every command the host was asked to run, in order.
func (h *Host) Commands() []nodeexec.Command {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]nodeexec.Command(nil), h.history...)
}

// Staging is what Stage puts in a staging directory, in the layout
// nodeexec/kubeadm.Config documents. Empty versions are not staged.
type Staging struct {
	// Dir defaults to kubeadm.DefaultStagingDir.
	Dir string
	// Kubernetes stages kubeadm, kubelet and kubectl (and etcdctl).
	Kubernetes string
	// Containerd stages containerd/usr/local/bin/containerd.
	Containerd string
	// ContainerdCrashes makes the staged containerd one that reports its
	// version (and migrates a configuration, for 2.x) but exits as soon
	// as its unit starts it: a bad build.
	ContainerdCrashes bool
	// CNI stages cni-plugins/opt/cni/bin/loopback.
	CNI string
}

// Stage writes the new binaries a kubeadm plan installs into the staging
// directory, as the node pod's staging init container would.
func (h *Host) Stage(s Staging) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		return // a Host not made by NewHost has no file system
	}
	dir := s.Dir
	if dir == "" {
		dir = kubeadm.DefaultStagingDir
	}
	if s.Kubernetes != "" {
		for _, c := range []Component{ComponentKubeadm, ComponentKubelet, ComponentKubectl} {
			h.files[path.Join(dir, "kubernetes", string(c))] = binary(c, s.Kubernetes)
		}
		h.files[path.Join(dir, "etcd", "etcdctl")] = binary("etcdctl", s.Kubernetes)
	}
	if s.Containerd != "" {
		h.files[path.Join(dir, "containerd", containerdPath)] = binary(ComponentContainerd, s.Containerd)
		if s.ContainerdCrashes {
			h.files[path.Join(dir, "containerd", containerdPath)] += " " + crashesOnStart
		}
	}
	if s.CNI != "" {
		h.files[path.Join(dir, "cni-plugins", cniPluginPath)] = binary(ComponentCNI, s.CNI)
	}
}

// clearDir removes every file under dir.
func (h *Host) clearDir(dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.under(path.Clean(dir)) {
		delete(h.files, f)
	}
}

// Run implements nodeexec.Executor. It accepts argvs with or without the
// nsenter prefix nodeexec.NsenterArgv produces.
//
// A Host not made by NewHost (or Fleet.Add) runs nothing: ErrInvalidCluster.
func (h *Host) Run(ctx context.Context, cmd nodeexec.Command) (nodeexec.Result, error) {
	if h.files == nil || h.clock == nil {
		return nodeexec.Result{ExitCode: -1}, fmt.Errorf("simulator: %w: Host not made by NewHost", ErrInvalidCluster)
	}
	res, err := h.run(ctx, cmd)
	if h.observe != nil {
		h.observe(cmd, res, err)
	}
	return res, err
}

func (h *Host) run(ctx context.Context, cmd nodeexec.Command) (nodeexec.Result, error) {
	if err := ctx.Err(); err != nil {
		return nodeexec.Result{ExitCode: -1}, fmt.Errorf("fake host %s: step %q %s: %w", h.node, cmd.Step, cmd.Phase, err)
	}
	h.mu.Lock()
	h.history = append(h.history, cmd)
	h.mu.Unlock()
	start := h.clock.Now()
	if h.faults != nil {
		if res, err, handled := h.faults.before(ctx, h, cmd); handled {
			res.Duration = h.clock.Since(start)
			return res, err
		}
	}
	code, out := h.exec(ctx, cmd)
	if code == 0 && h.faults != nil && cmd.Phase == nodeexec.PhaseRun {
		if err := h.faults.after(ctx, h, cmd); err != nil {
			code, out = 1, out+"\nfake host: "+err.Error()
		}
	}
	return nodeexec.Result{ExitCode: code, Output: []byte(out), Duration: h.clock.Since(start)}, nil
}

// stripNsenter removes "nsenter --target N --flags... --".
func stripNsenter(argv []string) []string {
	if len(argv) == 0 || path.Base(argv[0]) != "nsenter" {
		return argv
	}
	for i, a := range argv {
		if a == "--" {
			return argv[i+1:]
		}
	}
	return argv
}

func (h *Host) exec(ctx context.Context, cmd nodeexec.Command) (int, string) {
	argv := stripNsenter(cmd.Argv)
	if len(argv) == 0 {
		return ExitUnknownCommand, "fake host: empty argv"
	}
	env := map[string]string{}
	for _, kv := range cmd.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if argv[0] == "/bin/sh" && len(argv) >= 4 && argv[1] == "-c" {
		for _, interpret := range planScripts {
			if code, out, ok := interpret(ctx, h, argv[2], argv[4:], env); ok {
				return code, out
			}
		}
		s, ok := knownScripts()[argv[2]]
		if !ok {
			return ExitUnknownCommand, fmt.Sprintf("fake host %s: unknown shell script (the simulated host interprets only the kubeadm step library's scripts):\n%s", h.node, argv[2])
		}
		return h.script(ctx, s, argv[4:], env)
	}
	return h.command(ctx, argv)
}

// planScripts interpret the shell scripts of the step library's plans
// other than NewPlan's (knownScripts): each answers ok=false for a script
// it does not know. Each plan's interpreter adds itself in its file's init.
var planScripts []func(ctx context.Context, h *Host, script string, args []string, env map[string]string) (code int, out string, ok bool)

func unknown(argv []string) (int, string) {
	return ExitUnknownCommand, fmt.Sprintf("fake host: unknown command %q", argv)
}

// command interprets a direct argv.
func (h *Host) command(ctx context.Context, argv []string) (int, string) {
	name := path.Base(argv[0])
	args := argv[1:]
	switch name {
	case "true":
		// What a raw upgrader pod's status container runs (nodepod).
		if len(args) == 0 {
			return 0, ""
		}
	case "systemctl":
		return h.systemctl(ctx, args)
	case "cmp":
		if len(args) == 4 && args[0] == "-s" && args[1] == "--" {
			h.mu.Lock()
			defer h.mu.Unlock()
			a, okA := h.files[path.Clean(args[2])]
			b, okB := h.files[path.Clean(args[3])]
			switch {
			case !okA || !okB:
				return 2, ""
			case a != b:
				return 1, ""
			}
			return 0, ""
		}
	case "kubeadm":
		if len(args) >= 2 && args[0] == "upgrade" {
			return h.kubeadmUpgrade(ctx, argv[0], args[1:])
		}
		if len(args) == 3 && args[0] == "version" && args[1] == "-o" && args[2] == "short" {
			return h.versionOf(argv[0], ComponentKubeadm, "%s")
		}
	case "kubelet":
		if len(args) == 1 && args[0] == "--version" {
			return h.versionOf(argv[0], ComponentKubelet, "Kubernetes %s")
		}
	case "kubectl":
		if len(args) == 2 && args[0] == "version" && args[1] == "--client" {
			return h.versionOf(argv[0], ComponentKubectl, "Client Version: %s\nKustomize Version: v5.6.0")
		}
	case "containerd":
		if len(args) == 1 && args[0] == "--version" {
			return h.versionOf(argv[0], ComponentContainerd, "containerd github.com/containerd/containerd/v2 %s")
		}
	}
	return unknown(argv)
}

// resolve finds a program: an absolute path as is, else in the bin dirs.
func (h *Host) resolve(prog string) string {
	if path.IsAbs(prog) {
		return path.Clean(prog)
	}
	for _, d := range []string{kubeadm.DefaultBinDir, "/usr/local/bin"} {
		if _, ok := h.files[path.Join(d, prog)]; ok {
			return path.Join(d, prog)
		}
	}
	return prog
}

func (h *Host) versionOf(prog string, want Component, format string) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, v, err := h.program(prog, want)
	if err != "" {
		return 126, err
	}
	return 0, fmt.Sprintf(format, v)
}

// program checks that prog is a simulated binary of component want.
func (h *Host) program(prog string, want Component) (Component, string, string) {
	p := h.resolve(prog)
	content, ok := h.files[p]
	if !ok {
		return "", "", fmt.Sprintf("sh: %s: not found", prog)
	}
	c, v, ok := binaryVersion(content)
	if !ok || c != want {
		return "", "", fmt.Sprintf("sh: %s: cannot execute: not a %s binary", prog, want)
	}
	return c, v, ""
}

func (h *Host) systemctl(ctx context.Context, args []string) (int, string) {
	if len(args) == 1 && args[0] == "daemon-reload" {
		return 0, ""
	}
	if len(args) == 3 && args[0] == "is-active" && args[1] == "--quiet" {
		if h.UnitState(args[2]) == UnitActive {
			return 0, ""
		}
		return 3, ""
	}
	if len(args) != 2 {
		return unknown(append([]string{"systemctl"}, args...))
	}
	verb, unit := args[0], strings.TrimSuffix(args[1], ".service")
	switch verb {
	case "stop":
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.units[unit]; !ok {
			return 5, fmt.Sprintf("Failed to stop %s.service: Unit %s.service not loaded.", unit, unit)
		}
		h.units[unit] = UnitInactive
		delete(h.running, Component(unit))
		if unit == "kubelet" {
			h.kubeletArgs = nil
		}
		return 0, ""
	case "start", "restart":
		return h.startUnit(ctx, unit)
	case "is-active":
		st := h.UnitState(unit)
		if st == UnitActive {
			return 0, st
		}
		return 3, UnitInactive
	}
	return unknown(append([]string{"systemctl"}, args...))
}

// startUnit starts (or restarts) kubelet or containerd from the binary on
// disk. A started kubelet reports its version on the Node.
func (h *Host) startUnit(ctx context.Context, unit string) (int, string) {
	h.mu.Lock()
	if _, ok := h.units[unit]; !ok {
		h.mu.Unlock()
		return 5, fmt.Sprintf("Failed to restart %s.service: Unit %s.service not found.", unit, unit)
	}
	p := path.Join(kubeadm.DefaultBinDir, "kubelet")
	if unit == "containerd" {
		p = containerdPath
	}
	_, v, msg := h.program(p, Component(unit))
	if msg == "" && strings.HasSuffix(h.files[h.resolve(p)], " "+crashesOnStart) {
		msg = fmt.Sprintf("%s: exited with status 1 right after starting", p)
	}
	if msg != "" {
		h.units[unit] = UnitInactive
		delete(h.running, Component(unit))
		if unit == "kubelet" {
			h.kubeletArgs = nil
		}
		h.mu.Unlock()
		return 1, fmt.Sprintf("Job for %s.service failed because the control process exited with error code.\n%s", unit, msg)
	}
	h.units[unit] = UnitActive
	h.running[Component(unit)] = v
	if unit == "kubelet" {
		h.notReady = false
		h.kubeletArgs = h.readKubeletArgs()
	}
	h.mu.Unlock()
	if unit == "kubelet" {
		if err := h.updateNode(ctx, func(n *corev1.Node) {
			n.Status.NodeInfo.KubeletVersion = v
			setNodeReady(n, true)
		}); err != nil {
			return 1, fmt.Sprintf("fake host %s: kubelet started but could not update its Node: %v", h.node, err)
		}
	}
	return 0, ""
}

func setNodeReady(n *corev1.Node, ready bool) {
	cond := NodeReady(ready)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i] = cond
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, cond)
}

// updateNode changes the host's Node through the client, if one was given,
// retrying on conflicts.
func (h *Host) updateNode(ctx context.Context, mutate func(*corev1.Node)) error {
	if h.client == nil {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := h.client.Get(ctx, client.ObjectKey{Name: h.node}, n); err != nil {
			return err
		}
		mutate(n)
		return h.client.Status().Update(ctx, n)
	})
}

// nodeKubeletVersion is what `kubectl get node -o
// jsonpath={.status.nodeInfo.kubeletVersion}` prints.
func (h *Host) nodeKubeletVersion(ctx context.Context) (string, error) {
	if h.client == nil {
		return h.RunningVersion(ComponentKubelet), nil
	}
	n := &corev1.Node{}
	if err := h.client.Get(ctx, client.ObjectKey{Name: h.node}, n); err != nil {
		if apierrors.IsNotFound(err) {
			//lint:ignore ST1005 the verify step prints kubectl's own wording
			return "", fmt.Errorf("Error from server (NotFound): nodes %q not found", h.node)
		}
		return "", err
	}
	return n.Status.NodeInfo.KubeletVersion, nil
}

// kubeadmUpgrade interprets `kubeadm upgrade apply|node ...` and `kubeadm
// upgrade node phase control-plane`. On a control plane host each renders
// the static pod manifests from kubeadm-config's ClusterConfiguration (read
// through the node client) and the kubelet then runs them (mirror pods
// updated).
func (h *Host) kubeadmUpgrade(ctx context.Context, prog string, args []string) (int, string) {
	cfg, err := h.clusterConfiguration(ctx)
	if err != nil {
		return 1, "[upgrade/config] FATAL: " + err.Error()
	}
	code, out := h.kubeadmUpgradeLocked(prog, args, cfg)
	if code == 0 && args[0] == "apply" {
		// kubeadm's upload-config phase: the new version goes into
		// kubeadm-config, which `kubeadm upgrade node` reads.
		if err := h.uploadVersion(ctx, h.kubeadm.get()); err != nil {
			return 1, out + "\n[upload-config] FATAL: " + err.Error()
		}
	}
	if code == 0 && h.role == strategy.RoleControlPlane {
		if err := h.syncMirrorPods(ctx); err != nil {
			return 1, out + "\n[upgrade/staticpods] FATAL: " + err.Error()
		}
	}
	return code, out
}

func (h *Host) kubeadmUpgradeLocked(prog string, args []string, cfg staticPodConfig) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, kv, msg := h.program(prog, ComponentKubeadm)
	if msg != "" {
		return 126, msg
	}
	sub, flags := args[0], args[1:]
	if sub == "node" && len(flags) >= 2 && flags[0] == "phase" && flags[1] == "control-plane" {
		return h.controlPlanePhase(kv, flags[2:], cfg)
	}
	target, configPath := "", ""
	for i := 0; i < len(flags); i++ {
		f := flags[i]
		switch {
		case f == "--yes" || f == "-y":
		case f == "--config" && i+1 < len(flags):
			configPath = flags[i+1]
			i++
		case strings.HasPrefix(f, "--ignore-preflight-errors="), strings.HasPrefix(f, "--skip-phases="):
		case sub == "apply" && !strings.HasPrefix(f, "-") && target == "":
			target = f
		default:
			return 1, fmt.Sprintf("Error: unknown flag or argument %q for \"kubeadm upgrade %s\"", f, sub)
		}
	}
	cluster := h.kubeadm.get()
	switch sub {
	case "apply":
		if h.role != strategy.RoleControlPlane {
			return 1, "[upgrade/config] FATAL: kubeadm upgrade apply must run on a control plane node"
		}
		if configPath != "" {
			content, ok := h.files[path.Clean(configPath)]
			if !ok {
				return 1, fmt.Sprintf("[upgrade/config] FATAL: open %s: no such file or directory", configPath)
			}
			target = configVersion(content)
			if target == "" {
				return 1, fmt.Sprintf("[upgrade/config] FATAL: %s has no apply.kubernetesVersion", configPath)
			}
		}
		if target == "" {
			return 1, "[upgrade/version] FATAL: missing version to upgrade to"
		}
		if target != kv {
			return 1, fmt.Sprintf("[upgrade/version] FATAL: the upgrade version %s differs from kubeadm's %s; upgrade kubeadm first", target, kv)
		}
		if err := kubeadm.CheckUpgrade(cluster, target); err != nil {
			return 1, fmt.Sprintf("[upgrade/version] FATAL: %v", err)
		}
		h.kubeadm.set(target)
		h.upgradeControlPlane(target, cfg)
		return 0, fmt.Sprintf("[upgrade/successful] SUCCESS! Your cluster was upgraded to %q. Enjoy!", target)
	case "node":
		if configPath != "" {
			return 1, "Error: unknown flag: --config"
		}
		// `kubeadm upgrade node` follows kubeadm-config, which `kubeadm
		// upgrade apply` writes, and so does KubeadmControlPlane before it
		// adds a control plane machine at a new version.
		if cfg.version != "" {
			cluster = cfg.version
		}
		if kv != cluster {
			return 1, fmt.Sprintf("[upgrade] FATAL: the cluster is at %s (kubeadm-config) and this kubeadm is %s; run `kubeadm upgrade apply` on the first control plane node first", cluster, kv)
		}
		if h.role == strategy.RoleControlPlane {
			h.upgradeControlPlane(cluster, cfg)
		}
		h.files["/var/lib/kubelet/config.yaml"] = "kind: KubeletConfiguration # " + cluster
		return 0, "[upgrade] The configuration for this node was successfully upgraded!"
	}
	return unknown(append([]string{prog, "upgrade"}, args...))
}

// controlPlanePhase interprets `kubeadm upgrade node phase control-plane`:
// the manifests rendered again at the cluster's version from
// kubeadm-config, which is what KubeadmControlPlane changed. Like kubeadm
// it waits for the kubelet to restart the changed static pods, so with the
// kubelet stopped it times out and leaves the manifests as they were.
// h.mu is held.
func (h *Host) controlPlanePhase(kv string, flags []string, cfg staticPodConfig) (int, string) {
	for _, f := range flags {
		if !strings.HasPrefix(f, "--certificate-renewal=") {
			return 1, fmt.Sprintf("Error: unknown flag: %s", f)
		}
	}
	if h.role != strategy.RoleControlPlane {
		return 1, "[upgrade/staticpods] FATAL: this node has no static control plane pods"
	}
	cluster := h.kubeadm.get()
	if kv != cluster {
		return 1, fmt.Sprintf("[upgrade] FATAL: the cluster is at %s (kubeadm-config) and this kubeadm is %s", cluster, kv)
	}
	if h.units["kubelet"] != UnitActive {
		return 1, "[upgrade/staticpods] FATAL: couldn't upgrade control plane. kubeadm has tried to recover everything into the earlier state. Errors faced: timed out waiting for the condition"
	}
	h.cp = cluster
	h.renderManifests(cfg)
	return 0, "[upgrade/staticpods] Component \"kube-apiserver\" upgraded successfully!"
}

func (h *Host) upgradeControlPlane(v string, cfg staticPodConfig) {
	h.cp = v
	if e, ok := h.etcdVersions[minor(v)]; ok {
		h.etcd = e
	}
	h.renderManifests(cfg)
	h.files["/var/lib/kubelet/config.yaml"] = "kind: KubeletConfiguration # " + v
}

func minor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// configVersion reads apply.kubernetesVersion from an UpgradeConfiguration.
func configVersion(yaml string) string {
	for _, line := range strings.Split(yaml, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "kubernetesVersion" {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// NodeNotReady marks the host NotReady, and its Node too when the host has
// a node client, as if the kubelet had stopped posting ready status. The
// kubelet's next start marks it Ready again.
func (h *Host) NodeNotReady(ctx context.Context) error {
	h.mu.Lock()
	h.notReady = true
	h.mu.Unlock()
	return h.updateNode(ctx, func(n *corev1.Node) { setNodeReady(n, false) })
}

// Ready reports whether the host's kubelet last reported Ready.
func (h *Host) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.notReady && h.units["kubelet"] == UnitActive
}

// sleep advances virtual time by d, or fails like a deadline would when d
// does not fit in ctx's remaining time. With a FakeClock nothing blocks: the
// clock is stepped by the time spent.
func (h *Host) sleep(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok {
		// The deadline is the Runner's real-time context.WithTimeout, set
		// microseconds ago: rounded to the second, the time left is the
		// step's timeout, the same on every run, so timelines replay.
		remaining := time.Until(dl).Round(time.Second)
		if d >= remaining {
			h.advance(max(remaining, 0))
			return context.DeadlineExceeded
		}
	}
	h.advance(d)
	return nil
}

func (h *Host) advance(d time.Duration) {
	if s, ok := h.clock.(interface{ Step(time.Duration) }); ok {
		s.Step(d)
	}
}

// uploadVersion sets kubernetesVersion in kube-system/kubeadm-config's
// ClusterConfiguration, as `kubeadm upgrade apply` does; a host without a
// node client, or a cluster without the ConfigMap, has nothing to update.
func (h *Host) uploadVersion(ctx context.Context, v string) error {
	if h.client == nil || v == "" {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		if err := h.client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, &cm); err != nil {
			return client.IgnoreNotFound(err)
		}
		var cc map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
			return fmt.Errorf("kubeadm-config: ClusterConfiguration: %w", err)
		}
		if cc == nil {
			cc = map[string]any{}
		}
		if cc["kubernetesVersion"] == v {
			return nil
		}
		cc["kubernetesVersion"] = v
		out, err := yaml.Marshal(cc)
		if err != nil {
			return err
		}
		cm.Data["ClusterConfiguration"] = string(out)
		return h.client.Update(ctx, &cm)
	})
}
