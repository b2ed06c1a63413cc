package capi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// AnnotationKubeletArgs is the Node annotation in which MachineUpdater
// records a digest of the kubelet extra arguments it last applied to the
// node and verified (the kubelet running with them). An update whose
// desired KubeadmConfig has other extra arguments, or a node without the
// annotation (joined before upgradekit managed it), gets them applied by
// the update's plan; a node with the digest of the desired arguments needs
// nothing for them.
const AnnotationKubeletArgs = "upgradekit.io/kubelet-extra-args"

// kubeletArgs are the kubelet extra arguments a desired KubeadmConfig
// asks for, with their digest; digest is "" when the request carries no
// KubeadmConfig (another bootstrap provider), and then nothing is done
// about them.
type kubeletArgs struct {
	args   []kubeadm.KubeletArg
	digest string
}

// desiredSpec decodes the desired KubeadmConfig's spec (for a
// KubeadmConfigTemplate, set template: spec.template.spec); nil when raw
// is empty or another kind (another bootstrap provider).
func desiredSpec(raw runtime.RawExtension, template bool) (*bootstrapv1.KubeadmConfigSpec, error) {
	b := raw.Raw
	if b == nil && raw.Object != nil {
		var err error
		if b, err = json.Marshal(raw.Object); err != nil {
			return nil, fmt.Errorf("bootstrap config: %w", err)
		}
	}
	if len(b) == 0 {
		return nil, nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("bootstrap config: %w", err)
	}
	want := "KubeadmConfig"
	if template {
		want = "KubeadmConfigTemplate"
	}
	if head.Kind != want || head.APIVersion != bootstrapv1.GroupVersion.String() {
		return nil, nil
	}
	if template {
		var t bootstrapv1.KubeadmConfigTemplate
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("bootstrap config template: %w", err)
		}
		return &t.Spec.Template.Spec, nil
	}
	var c bootstrapv1.KubeadmConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("bootstrap config: %w", err)
	}
	return &c.Spec, nil
}

// argsOf converts Cluster API's extra arguments (a nil value is "").
func argsOf(in []bootstrapv1.Arg) []kubeadm.KubeletArg {
	out := make([]kubeadm.KubeletArg, 0, len(in))
	for _, a := range in {
		v := ""
		if a.Value != nil {
			v = *a.Value
		}
		out = append(out, kubeadm.KubeletArg{Name: a.Name, Value: v})
	}
	return out
}

// desiredKubeletArgs reads nodeRegistration.kubeletExtraArgs of the
// configuration kubeadm ran on the node: the join configuration when the
// KubeadmConfig has one (every machine but the first control plane; Cluster
// API clears the other one), else the init configuration.
func desiredKubeletArgs(spec *bootstrapv1.KubeadmConfigSpec) kubeletArgs {
	if spec == nil {
		return kubeletArgs{}
	}
	from := spec.InitConfiguration.NodeRegistration.KubeletExtraArgs
	if spec.JoinConfiguration.IsDefined() {
		from = spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs
	}
	out := kubeletArgs{args: argsOf(from)}
	sum := sha256.New()
	for _, a := range out.args {
		fmt.Fprintf(sum, "%s=%s\n", a.Name, a.Value)
	}
	out.digest = hex.EncodeToString(sum.Sum(nil))[:16]
	return out
}

// kubeletArgsConfig is the kubelet-args plan's configuration for desired:
// kubeadm-flags.env is rewritten as `kubeadm join` writes it with desired
// as the extra arguments (ReplaceAll: the arguments the node was joined
// with are not in the request). A desired argument kubeadm also computes
// (KubeadmOwnedKubeletArgs) overrides kubeadm's value, as join does.
func kubeletArgsConfig(node, planName, backupDir string, desired []kubeadm.KubeletArg) kubeadm.KubeletArgsConfig {
	var owned []kubeadm.KubeletArg
	for _, a := range desired {
		if slices.Contains(kubeadm.KubeadmOwnedKubeletArgs(), a.Name) {
			owned = append(owned, a)
		}
	}
	return kubeadm.KubeletArgsConfig{PlanName: planName, Node: node, Desired: desired, Previous: owned,
		BackupDir: backupDir, ReplaceAll: true}
}

// withKubeletArgs appends the kubelet-args steps for desired to plan, with
// their backups under the plan's own backup directory.
func withKubeletArgs(plan nodeexec.Plan, desired []kubeadm.KubeletArg) (nodeexec.Plan, error) {
	args, err := kubeadm.NewKubeletArgsPlan(kubeletArgsConfig(plan.Node, plan.Name, path.Join(kubeadm.DefaultBackupRoot, plan.Name, "kubelet-args"), desired))
	if err != nil {
		return nodeexec.Plan{}, err
	}
	plan.Steps = append(slices.Clone(plan.Steps), args.Steps...)
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}

// KubeletArgsCheck declines an in-place update whose desired KubeadmConfig
// (or KubeadmConfigTemplate) has kubelet extra arguments MachineUpdater
// cannot write into kubeadm-flags.env (kubeadm.NewKubeletArgsPlan: a value
// with whitespace or quotes, which systemd would split or unquote; an
// invalid name). MachineUpdater applies the desired extra arguments with
// every update, so such a configuration would fail every update of the
// machine: it is declined (the machine is replaced, and the new node is
// joined by kubeadm with whatever it makes of the value). The Extension
// always runs it, after VersionCheck.
func KubeletArgsCheck() Check {
	return CheckFunc(func(_ context.Context, r CheckRequest) error {
		raw, ok := r.Desired.Bootstrap.(runtime.RawExtension)
		if !ok {
			return nil
		}
		spec, err := desiredSpec(raw, r.Templates)
		ka := desiredKubeletArgs(spec)
		if err != nil || ka.digest == "" {
			return nil // not a KubeadmConfig this updater applies
		}
		if _, err := kubeadm.NewKubeletArgsPlan(kubeletArgsConfig("check", "", "", ka.args)); err != nil {
			return fmt.Errorf("%w: kubelet extra arguments cannot be applied in place: %w", ErrInfeasible, err)
		}
		return nil
	})
}

// patchNodeAnnotation sets one annotation of the Node (value nil removes
// it) with a JSON merge patch of that key only.
func patchNodeAnnotation(ctx context.Context, c client.Client, node, key string, value any) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, data))
}
