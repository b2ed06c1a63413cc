package capi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// AnnotationControlPlaneConfig is the Node annotation in which
// MachineUpdater records a digest of the control plane configuration
// (ClusterConfiguration's apiServer, controllerManager and scheduler
// extraArgs, etcd.local's imageTag and extraArgs) it last applied to a
// control plane node and verified in its static pod manifests. A control
// plane update whose desired configuration has another digest, or a node
// without the annotation, gets it applied by the update's plan.
const AnnotationControlPlaneConfig = "upgradekit.io/control-plane-config"

// controlPlaneConfig is what a control plane machine's desired
// ClusterConfiguration asks of its static pods; digest is "" when there is
// nothing to apply (not a control plane, no ClusterConfiguration).
type controlPlaneConfig struct {
	expect []kubeadm.ManifestExpectation
	digest string
	// externalEtcd: the cluster's etcd is not on its control plane nodes,
	// so no node of it takes the etcd snapshot.
	externalEtcd bool
}

// desiredControlPlaneConfig reads the parts of the desired
// ClusterConfiguration that `kubeadm upgrade node phase control-plane`
// renders into the static pod manifests and the verify step checks.
func desiredControlPlaneConfig(spec *bootstrapv1.KubeadmConfigSpec, controlPlane bool) controlPlaneConfig {
	if spec == nil || !controlPlane || !spec.ClusterConfiguration.IsDefined() {
		return controlPlaneConfig{}
	}
	cc := spec.ClusterConfiguration
	out := controlPlaneConfig{expect: []kubeadm.ManifestExpectation{
		{Component: "kube-apiserver", Args: argsOf(cc.APIServer.ExtraArgs)},
		{Component: "kube-controller-manager", Args: argsOf(cc.ControllerManager.ExtraArgs)},
		{Component: "kube-scheduler", Args: argsOf(cc.Scheduler.ExtraArgs)},
	}}
	if !cc.Etcd.External.IsDefined() { // external etcd is not this node's
		out.expect = append(out.expect, kubeadm.ManifestExpectation{Component: "etcd", Args: argsOf(cc.Etcd.Local.ExtraArgs), ImageTag: cc.Etcd.Local.ImageTag})
	} else {
		out.externalEtcd = true
	}
	sum := sha256.New()
	for _, e := range out.expect {
		fmt.Fprintf(sum, "%s\x00%s\x00", e.Component, e.ImageTag)
		for _, a := range e.Args {
			fmt.Fprintf(sum, "%s=%s\x00", a.Name, a.Value)
		}
		sum.Write([]byte{'\n'})
	}
	out.digest = hex.EncodeToString(sum.Sum(nil))[:16]
	return out
}

// controlPlaneConfigPlan is the same-version plan that regenerates the
// node's static pod manifests from kubeadm-config and verifies them.
func controlPlaneConfigPlan(node, planName string, cp controlPlaneConfig) (nodeexec.Plan, error) {
	return kubeadm.NewControlPlaneConfigPlan(kubeadm.ControlPlaneConfig{PlanName: planName, Node: node, Expect: cp.expect})
}

// withControlPlaneVerify appends the control plane config plan's verify
// step to a version plan, whose `kubeadm upgrade` already regenerates the
// manifests from kubeadm-config.
func withControlPlaneVerify(plan nodeexec.Plan, cp controlPlaneConfig) (nodeexec.Plan, error) {
	p, err := controlPlaneConfigPlan(plan.Node, plan.Name, cp)
	if err != nil {
		return nodeexec.Plan{}, err
	}
	i := slices.IndexFunc(p.Steps, func(s nodeexec.Step) bool { return s.Name == kubeadm.StepControlPlaneConfigVerify })
	if i < 0 {
		return nodeexec.Plan{}, fmt.Errorf("control plane config plan has no %s step", kubeadm.StepControlPlaneConfigVerify)
	}
	plan.Steps = append(slices.Clone(plan.Steps), p.Steps[i])
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}

// kubeadmConfigMatches reports, as "" or a reason, whether the workload
// cluster's kube-system/kubeadm-config ClusterConfiguration carries the
// desired configuration: KubeadmControlPlane writes it there before it
// updates machines, and `kubeadm upgrade` renders the manifests from it,
// so running the plan before then would render the old configuration.
// Both kubeadm API shapes of extraArgs are read: a map (v1beta3) and a
// list of name/value (v1beta4).
func kubeadmConfigMatches(ctx context.Context, c client.Client, cp controlPlaneConfig) (string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm); err != nil {
		return "", fmt.Errorf("reading kube-system/kubeadm-config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cfg); err != nil {
		return "", fmt.Errorf("kube-system/kubeadm-config: ClusterConfiguration: %w", err)
	}
	at := map[string][]string{
		"kube-apiserver":          {"apiServer"},
		"kube-controller-manager": {"controllerManager"},
		"kube-scheduler":          {"scheduler"},
		"etcd":                    {"etcd", "local"},
	}
	for _, e := range cp.expect {
		obj := lookup(cfg, at[e.Component]...)
		have := map[string]string{}
		switch v := obj["extraArgs"].(type) {
		case map[string]any:
			for n, val := range v {
				have[n] = fmt.Sprint(val)
			}
		case []any:
			for _, item := range v {
				if m, ok := item.(map[string]any); ok {
					have[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
				}
			}
		}
		want := map[string]string{}
		for _, a := range e.Args {
			want[a.Name] = a.Value
		}
		if !mapsEqual(have, want) {
			return fmt.Sprintf("%s extraArgs are %s, desired %s", e.Component, argList(have), argList(want)), nil
		}
		if e.Component == "etcd" {
			if tag, _ := obj["imageTag"].(string); tag != e.ImageTag {
				return fmt.Sprintf("etcd imageTag is %q, desired %q", tag, e.ImageTag), nil
			}
		}
	}
	return "", nil
}

func lookup(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, _ := m[k].(map[string]any)
		m = next
	}
	return m
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func argList(m map[string]string) string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}
