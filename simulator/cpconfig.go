package simulator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// The static pods of a control plane Host, in the order kubeadm writes
// them. Their manifests are <kubeadm.DefaultManifestDir>/<name>.yaml and
// their mirror pods kube-system/<name>-<node>.
var staticPodComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}

// staticPodConfig is the part of kubeadm's ClusterConfiguration the host
// renders into the static pod manifests: extra arguments per component
// and local etcd's image tag.
type staticPodConfig struct {
	args    map[string]map[string]string // component -> name -> value
	etcdTag string
	// version is the ClusterConfiguration's kubernetesVersion: what
	// `kubeadm upgrade node` upgrades the node to ("" when unknown).
	version string
}

// clusterConfigKey is where each component's settings sit in a
// ClusterConfiguration.
var clusterConfigKey = map[string][]string{
	"kube-apiserver":          {"apiServer"},
	"kube-controller-manager": {"controllerManager"},
	"kube-scheduler":          {"scheduler"},
	"etcd":                    {"etcd", "local"},
}

// clusterConfiguration reads what `kubeadm upgrade` reads:
// kube-system/kubeadm-config's ClusterConfiguration, through the host's
// node client. A host without a client, or a cluster without the
// ConfigMap, renders kubeadm's defaults (no extra arguments, etcd as it
// is); real kubeadm would refuse to run without the ConfigMap.
func (h *Host) clusterConfiguration(ctx context.Context) (staticPodConfig, error) {
	cfg := staticPodConfig{args: map[string]map[string]string{}}
	if h.client == nil {
		return cfg, nil
	}
	var cm corev1.ConfigMap
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return cfg, nil
		}
		return cfg, fmt.Errorf("unable to fetch the kubeadm-config ConfigMap: %w", err)
	}
	var cc map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return cfg, fmt.Errorf("kubeadm-config: ClusterConfiguration: %w", err)
	}
	cfg.version, _ = cc["kubernetesVersion"].(string)
	for c, keys := range clusterConfigKey {
		obj := cc
		for _, k := range keys {
			obj, _ = obj[k].(map[string]any)
		}
		args := map[string]string{}
		switch v := obj["extraArgs"].(type) {
		case map[string]any: // kubeadm v1beta3
			for n, val := range v {
				args[n] = fmt.Sprint(val)
			}
		case []any: // kubeadm v1beta4
			for _, item := range v {
				if m, ok := item.(map[string]any); ok {
					args[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
				}
			}
		}
		cfg.args[c] = args
		if c == "etcd" {
			cfg.etcdTag, _ = obj["imageTag"].(string)
		}
	}
	return cfg, nil
}

// renderManifests writes the static pod manifests as kubeadm does: the
// component's image at the control plane version (etcd at its own), its
// command line (a few of kubeadm's own flags, then the extra arguments,
// which override a default of the same name), marshalled with
// sigs.k8s.io/yaml as kubeadm marshals them, so a value YAML must quote
// comes out quoted. h.mu is held.
func (h *Host) renderManifests(cfg staticPodConfig) {
	if cfg.etcdTag != "" && h.etcd != "" {
		h.etcd = cfg.etcdTag
	}
	for _, c := range staticPodComponents {
		tag := h.cp
		if c == "etcd" {
			if h.etcd == "" {
				continue
			}
			tag = h.etcd
		}
		flags := map[string]string{}
		switch c {
		case "kube-apiserver":
			flags["advertise-address"], flags["secure-port"] = "10.0.0.10", "6443"
		case "kube-controller-manager", "kube-scheduler":
			flags["kubeconfig"], flags["leader-elect"] = "/etc/kubernetes/"+strings.TrimPrefix(c, "kube-")+".conf", "true"
		case "etcd":
			flags["data-dir"], flags["name"] = "/var/lib/etcd", h.node
		}
		for n, v := range cfg.args[c] {
			flags[n] = v
		}
		names := make([]string, 0, len(flags))
		for n := range flags {
			names = append(names, n)
		}
		sort.Strings(names)
		command := []string{c}
		for _, n := range names {
			command = append(command, "--"+n+"="+flags[n])
		}
		pod := map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": c, "namespace": "kube-system", "labels": map[string]any{"component": c, "tier": "control-plane"}},
			"spec": map[string]any{"hostNetwork": true, "containers": []any{map[string]any{
				"name": c, "image": "registry.k8s.io/" + c + ":" + tag, "command": command,
			}}},
		}
		b, err := yaml.Marshal(pod)
		if err != nil { // maps of strings always marshal
			b = []byte(err.Error())
		}
		h.files[path.Join(kubeadm.DefaultManifestDir, c+".yaml")] = string(b)
	}
}

// staticPod is what the kubelet runs from one manifest on disk.
type staticPod struct {
	image   string
	command []string
}

// readStaticPod parses a manifest; ok is false when it is missing or not a
// pod with one container. h.mu is held.
func (h *Host) readStaticPod(component string) (staticPod, bool) {
	content, ok := h.files[path.Join(kubeadm.DefaultManifestDir, component+".yaml")]
	if !ok {
		return staticPod{}, false
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal([]byte(content), &pod); err != nil || len(pod.Spec.Containers) != 1 {
		return staticPod{}, false
	}
	return staticPod{image: pod.Spec.Containers[0].Image, command: pod.Spec.Containers[0].Command}, true
}

// StaticPodCommand returns the command line of a control plane component
// (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) as its
// manifest on disk has it, and the kubelet runs it; nil when there is no
// such manifest.
func (h *Host) StaticPodCommand(component string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.readStaticPod(component)
	if !ok {
		return nil
	}
	return slices.Clone(p.command)
}

// StaticPodImage returns the image of a control plane component's
// manifest on disk ("" when there is none).
func (h *Host) StaticPodImage(component string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, _ := h.readStaticPod(component)
	return p.image
}

// loadStaticPods makes the running control plane what the manifests on
// disk say, as the kubelet does when a manifest changes (after a restore
// from a backup, say). h.mu is held.
func (h *Host) loadStaticPods() {
	if p, ok := h.readStaticPod("kube-apiserver"); ok {
		if _, tag, ok := strings.Cut(p.image, ":"); ok {
			h.cp = tag
		}
	}
	if p, ok := h.readStaticPod("etcd"); ok && h.etcd != "" {
		if _, tag, ok := strings.Cut(p.image, ":"); ok {
			h.etcd = tag
		}
	}
}

// SyncMirrorPods writes the mirror pods of the host's static pods through
// its node client, as a kubelet does when it starts: for a provisioner
// booting a control plane host. Upgrades keep them in step by themselves.
func (h *Host) SyncMirrorPods(ctx context.Context) error { return h.syncMirrorPods(ctx) }

// syncMirrorPods writes the mirror pods of the host's static pods through
// its node client, as the kubelet does: kube-system/<component>-<node>,
// Ready while the kubelet runs and the manifest parses. A host without a
// client has nothing to write.
func (h *Host) syncMirrorPods(ctx context.Context) error {
	if h.client == nil {
		return nil
	}
	h.mu.Lock()
	pods := map[string]staticPod{}
	if h.role == strategy.RoleControlPlane {
		for _, c := range staticPodComponents {
			if p, ok := h.readStaticPod(c); ok {
				pods[c] = p
			}
		}
	}
	kubeletUp := h.units["kubelet"] == UnitActive
	h.mu.Unlock()
	var errs []error
	for _, c := range staticPodComponents {
		p, ok := pods[c]
		if !ok {
			continue
		}
		key := client.ObjectKey{Namespace: "kube-system", Name: c + "-" + h.node}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var pod corev1.Pod
			err := h.client.Get(ctx, key, &pod)
			if apierrors.IsNotFound(err) {
				pod = corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
						Labels:      map[string]string{"component": c, "tier": "control-plane"},
						Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "fake"}},
					Spec: corev1.PodSpec{NodeName: h.node, Containers: []corev1.Container{{Name: c, Image: p.image, Command: p.command}}},
				}
				if err := h.client.Create(ctx, &pod); err != nil {
					return err
				}
			} else if err != nil {
				return err
			}
			if !slices.Equal(pod.Spec.Containers[0].Command, p.command) || pod.Spec.Containers[0].Image != p.image {
				// A changed manifest is a new static pod: the kubelet
				// replaces its mirror pod, deleting the old one at once
				// (grace period 0, as its mirror client does: a real API
				// server would otherwise keep it terminating).
				if err := h.client.Delete(ctx, &pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
				return apierrors.NewConflict(corev1.Resource("pods"), key.Name, errors.New("mirror pod replaced"))
			}
			status := corev1.ConditionFalse
			if kubeletUp {
				status = corev1.ConditionTrue
			}
			pod.Status.Phase = corev1.PodRunning
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
			return h.client.Status().Update(ctx, &pod)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("mirror pod %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// mirrorPodReady is what `kubectl -n kube-system get pod <c>-<node> -o
// jsonpath={.status.conditions[?(@.type=="Ready")].status}` prints. A host
// without a node client answers from its own state: Ready while the
// kubelet runs and the manifest is on disk. A mirror pod's readiness is
// the kubelet's at its last sync: the host does not model a static pod
// that crashes or an image that cannot be pulled.
func (h *Host) mirrorPodReady(ctx context.Context, component string) (string, error) {
	if h.client == nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.readStaticPod(component); ok && h.units["kubelet"] == UnitActive {
			return "True", nil
		}
		return "False", nil
	}
	key := client.ObjectKey{Namespace: "kube-system", Name: component + "-" + h.node}
	var pod corev1.Pod
	err := h.client.Get(ctx, key, &pod)
	if apierrors.IsNotFound(err) {
		// A kubelet creates the mirror pods of the static pods it runs
		// as soon as it runs them; the host, which builds no API objects
		// when it is created, creates them when they are first looked at.
		if err := h.syncMirrorPods(ctx); err != nil {
			return "", err
		}
		err = h.client.Get(ctx, key, &pod)
	}
	if err != nil {
		return "", err
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return string(c.Status), nil
		}
	}
	return "", nil
}

// cpConfigKind names one of the control plane configuration plan's
// scripts.
type cpConfigKind int

const (
	scriptCopyManifests cpConfigKind = iota + 1
	scriptVerifyManifests
)

var (
	cpConfigScriptsOnce sync.Once
	cpConfigScripts     map[string]cpConfigKind
)

// knownCPConfigScripts learns the scripts of kubeadm.NewControlPlaneConfigPlan
// from a plan it generates, as knownScripts does for NewPlan's.
func knownCPConfigScripts() map[string]cpConfigKind {
	cpConfigScriptsOnce.Do(func() {
		cpConfigScripts = learnScripts(func() (nodeexec.Plan, error) {
			return kubeadm.NewControlPlaneConfigPlan(kubeadm.ControlPlaneConfig{Node: "learn", Expect: []kubeadm.ManifestExpectation{{Component: "etcd"}}})
		},
			scriptSource[cpConfigKind]{kubeadm.StepControlPlaneConfig, backupArgv, scriptCopyManifests},
			scriptSource[cpConfigKind]{kubeadm.StepControlPlaneConfig, rollbackArgv, scriptCopyManifests},
			scriptSource[cpConfigKind]{kubeadm.StepControlPlaneConfigVerify, runArgv, scriptVerifyManifests})
	})
	return cpConfigScripts
}

func init() {
	planScripts = append(planScripts, func(ctx context.Context, h *Host, script string, args []string, _ map[string]string) (int, string, bool) {
		k, ok := knownCPConfigScripts()[script]
		if !ok {
			return 0, "", false
		}
		code, out := h.cpConfigScript(ctx, k, args)
		return code, out, true
	})
}

func (h *Host) cpConfigScript(ctx context.Context, k cpConfigKind, args []string) (int, string) {
	switch k {
	case scriptCopyManifests:
		if len(args) != 2 {
			return 2, fmt.Sprintf("fake host: script expects 2 arguments, got %d: %q", len(args), args)
		}
		code, out := h.locked(func() (int, string) {
			code, out := h.copyTree(args[0], args[1])
			if code == 0 && path.Clean(args[1]) == kubeadm.DefaultManifestDir {
				h.loadStaticPods() // the kubelet runs what was put back
			}
			return code, out
		})
		if code == 0 && path.Clean(args[1]) == kubeadm.DefaultManifestDir {
			if err := h.syncMirrorPods(ctx); err != nil {
				return 1, err.Error()
			}
		}
		return code, out
	case scriptVerifyManifests:
		return h.verifyManifests(ctx, args)
	}
	return ExitUnknownCommand, "fake host: unhandled control plane config script"
}

// verifyManifests does what the verify script does, line for line: each
// expected argument is a manifest line "- --name=value" (surrounding blanks
// trimmed), the first image line ends with ":<tag>", and the mirror pod is
// Ready.
func (h *Host) verifyManifests(ctx context.Context, args []string) (int, string) {
	fail := func(format string, a ...any) (int, string) {
		return 1, "control-plane-config: " + fmt.Sprintf(format, a...)
	}
	if len(args) < 4 {
		return 2, fmt.Sprintf("fake host: verify expects at least 4 arguments, got %q", args)
	}
	dir, kubectl, kc, node := args[0], args[1], args[2], args[3]
	if _, _, msg := h.programLocked(kubectl, ComponentKubectl); msg != "" {
		return 127, msg
	}
	rest := args[4:]
	for len(rest) > 0 {
		if len(rest) < 3 {
			return 2, fmt.Sprintf("fake host: verify: truncated component arguments %q", rest)
		}
		c, tag := rest[0], rest[1]
		n, err := strconv.Atoi(rest[2])
		if err != nil || n < 0 || len(rest) < 3+n {
			return 2, fmt.Sprintf("fake host: verify: bad argument count in %q", rest)
		}
		want := rest[3 : 3+n]
		rest = rest[3+n:]
		m := path.Join(dir, c+".yaml")
		h.mu.Lock()
		content, ok := h.files[path.Clean(m)]
		_, kcOK := h.files[path.Clean(kc)]
		h.mu.Unlock()
		if !ok {
			return fail("%s is missing", m)
		}
		lines := strings.Split(content, "\n")
		for i := range lines {
			lines[i] = strings.TrimSpace(lines[i])
		}
		for _, a := range want {
			if !slices.Contains(lines, "- "+a) {
				return fail("%s has no argument %s", m, a)
			}
		}
		if tag != "" {
			img := ""
			for _, l := range lines {
				if v, ok := strings.CutPrefix(l, "image:"); ok {
					img = strings.TrimSpace(v)
					break
				}
			}
			if !strings.HasSuffix(img, ":"+tag) {
				return fail("%s runs image %s, want tag %s", m, img, tag)
			}
		}
		if !kcOK {
			return fail("reading pod kube-system/%s-%s", c, node)
		}
		ready, err := h.mirrorPodReady(ctx, c)
		if err != nil {
			return fail("reading pod kube-system/%s-%s", c, node)
		}
		if ready != "True" {
			return fail("pod kube-system/%s-%s is not Ready (%s)", c, node, ready)
		}
	}
	return 0, "control plane configuration verified on " + node
}

// programLocked is program with h.mu taken.
func (h *Host) programLocked(prog string, want Component) (Component, string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.program(prog, want)
}
