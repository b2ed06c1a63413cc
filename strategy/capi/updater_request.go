package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// requestMismatch is the message of every observe.FailureRequestMismatch answer:
// one message for a missing Machine, an unmarked one and a mismatched one,
// so that the answer tells a caller nothing about the management cluster.
const requestMismatch = "the request does not match a Machine that Cluster API is updating in place; the extension's log says why"

// validateNames checks the names a request gives before anything is looked
// up with them: the Machine's namespace (a DNS-1123 label), name and
// cluster name (DNS-1123 subdomains). Its errors quote at most
// errtext.MaxQuoted bytes of a name.
func validateNames(m *clusterv1.Machine) error {
	for _, f := range []struct {
		field, value string
		label        bool
	}{
		{"metadata.namespace", m.Namespace, true},
		{"metadata.name", m.Name, false},
		{"spec.clusterName", m.Spec.ClusterName, false},
	} {
		if f.value == "" && f.field == "spec.clusterName" {
			continue // answered InvalidMachine once the Machine is known
		}
		kind, max, valid := "a DNS-1123 subdomain", validation.DNS1123SubdomainMaxLength, validation.IsDNS1123Subdomain
		if f.label {
			kind, max, valid = "a DNS-1123 label", validation.DNS1123LabelMaxLength, validation.IsDNS1123Label
		}
		// The length first: a megabyte is not run through a regexp.
		if len(f.value) > max || len(valid(f.value)) > 0 {
			return fmt.Errorf("desired Machine's %s (%d bytes) is not %s: %s", f.field, len(f.value), kind, quoteShort(f.value))
		}
	}
	return nil
}

// quoteShort quotes s with errtext.Quote and keeps at most 120 bytes of
// the quoted text, so that an answer quoting it stays short even when
// every byte of s needs an escape.
func quoteShort(s string) string {
	q := errtext.Quote(s)
	if len(q) > 120 {
		q = q[:120] + "..."
	}
	return q
}

// checkRequest checks the request against the live Machine, its
// KubeadmConfig and its infrastructure machine (UpdaterOptions.ManagementReader) and
// returns the live Machine and its KubeadmConfig's spec (nil without one)
// to act on. A mismatch is a Failure with the one message requestMismatch,
// its details logged; a failed read is answered in progress.
func (u *MachineUpdater) checkRequest(ctx context.Context, log logr.Logger, m *clusterv1.Machine, desired runtimehooksv1.UpdateMachineRequestObjects) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
	mismatch := func(why string, kv ...any) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
		log.Info("UpdateMachine request refused: it does not match the management cluster", append([]any{"why", why}, kv...)...)
		return nil, nil, failedAs(observe.FailureRequestMismatch, "%s", requestMismatch), false
	}
	readFailed := func(what string, err error) (*clusterv1.Machine, *bootstrapv1.KubeadmConfigSpec, updateResult, bool) {
		log.Info("reading the management cluster to check an UpdateMachine request", "object", what, "error", err.Error())
		return nil, nil, waiting(observe.ReasonPending, "reading the management cluster to check the request: %s", errtext.Clip(err.Error())), false
	}
	live := &clusterv1.Machine{}
	if err := u.mgmt.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return mismatch("no such Machine")
		}
		return readFailed("Machine", err)
	}
	if _, ok := live.Annotations[clusterv1.UpdateInProgressAnnotation]; !ok {
		return mismatch("the Machine has no " + clusterv1.UpdateInProgressAnnotation + " annotation: Cluster API has not asked for its in-place update")
	}
	if !hookPending(live.Annotations[runtimev1.PendingHooksAnnotation]) {
		return mismatch("the Machine's " + runtimev1.PendingHooksAnnotation + " annotation does not hold UpdateMachine: Cluster API has not asked for its in-place update")
	}
	for _, f := range []struct{ field, req, live string }{
		{"spec.clusterName", m.Spec.ClusterName, live.Spec.ClusterName},
		{"spec.providerID", m.Spec.ProviderID, live.Spec.ProviderID},
		{"spec.version", m.Spec.Version, live.Spec.Version},
	} {
		if f.req != f.live {
			return mismatch("the request's "+f.field+" is not the Machine's", "request", errtext.Quote(f.req), "live", f.live)
		}
	}
	// The labels the update reads (the role, the gates' group) must be the
	// ones Cluster API sent: Cluster API copies the live Machine's.
	_, reqCP := m.Labels[clusterv1.MachineControlPlaneLabel]
	_, liveCP := live.Labels[clusterv1.MachineControlPlaneLabel]
	if reqCP != liveCP {
		return mismatch("the request's "+clusterv1.MachineControlPlaneLabel+" label is not the Machine's", "request", reqCP, "live", liveCP)
	}
	if r, l := m.Labels[clusterv1.MachineDeploymentNameLabel], live.Labels[clusterv1.MachineDeploymentNameLabel]; r != l {
		return mismatch("the request's "+clusterv1.MachineDeploymentNameLabel+" label is not the Machine's", "request", errtext.Quote(r), "live", l)
	}
	spec, why, err := u.checkBootstrapConfig(ctx, live, desired.BootstrapConfig)
	switch {
	case err != nil:
		return readFailed("KubeadmConfig", err)
	case why != "":
		return mismatch(why)
	}
	if why, err := u.checkInfraMachine(ctx, live, desired.InfrastructureMachine); err != nil {
		return readFailed("infrastructure machine", err)
	} else if why != "" {
		return mismatch(why)
	}
	return live, spec, updateResult{}, true
}

// hookPending tells whether Cluster API's pending-hooks annotation value
// (a comma-separated list of hook names) holds UpdateMachine.
func hookPending(list string) bool {
	name := catalog.HookName(runtimehooksv1.UpdateMachine)
	for h := range strings.SplitSeq(list, ",") {
		if h == name {
			return true
		}
	}
	return false
}

// requestObject decodes one of the request's objects ("" kind when the
// request carries none).
func requestObject(raw runtime.RawExtension) (*unstructured.Unstructured, error) {
	b := raw.Raw
	if b == nil && raw.Object != nil {
		var err error
		if b, err = json.Marshal(raw.Object); err != nil {
			return nil, err
		}
	}
	obj := &unstructured.Unstructured{}
	if len(b) == 0 || string(b) == "null" {
		return obj, nil
	}
	if err := json.Unmarshal(b, &obj.Object); err != nil {
		return nil, err
	}
	return obj, nil
}

// checkBootstrapConfig compares the request's bootstrap config with the
// live Machine's: a KubeadmConfig must be sent (same name), be marked by
// Cluster API for the update and have the spec the request carries, so
// that what UpdateMachine applies from it (kubelet arguments, control
// plane configuration) is Cluster API's, not a caller's. It returns the
// live spec, or why the request does not match, or a read error.
func (u *MachineUpdater) checkBootstrapConfig(ctx context.Context, live *clusterv1.Machine, raw runtime.RawExtension) (*bootstrapv1.KubeadmConfigSpec, string, error) {
	req, err := requestObject(raw)
	if err != nil {
		return nil, "the request's bootstrap config does not decode: " + errtext.Clip(err.Error()), nil
	}
	ref := live.Spec.Bootstrap.ConfigRef
	switch {
	case !ref.IsDefined():
		if req.GetKind() != "" {
			return nil, "the request carries a bootstrap config, and the Machine has none", nil
		}
		return nil, "", nil
	case ref.Kind != "KubeadmConfig" || ref.APIGroup != bootstrapv1.GroupVersion.Group:
		return nil, fmt.Sprintf("the Machine's bootstrap config is a %s (%s), not a KubeadmConfig: the updater runs kubeadm", ref.Kind, ref.APIGroup), nil
	case req.GetKind() == "":
		return nil, "the request carries no bootstrap config, and the Machine's is KubeadmConfig " + ref.Name, nil
	case req.GroupVersionKind() != bootstrapv1.GroupVersion.WithKind("KubeadmConfig") || req.GetName() != ref.Name ||
		(req.GetNamespace() != "" && req.GetNamespace() != live.Namespace):
		return nil, fmt.Sprintf("the request's bootstrap config %s %s is not the Machine's KubeadmConfig %s",
			errtext.Quote(req.GetAPIVersion()+"/"+req.GetKind()), errtext.Quote(req.GetName()), ref.Name), nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	key := types.NamespacedName{Namespace: live.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "no KubeadmConfig " + key.String(), nil
		}
		return nil, "", err
	}
	if _, ok := obj.GetAnnotations()[clusterv1.UpdateInProgressAnnotation]; !ok {
		return nil, "KubeadmConfig " + key.String() + " has no " + clusterv1.UpdateInProgressAnnotation + " annotation: Cluster API has not asked for its in-place update", nil
	}
	var liveSpec, reqSpec bootstrapv1.KubeadmConfigSpec
	for _, x := range []struct {
		obj  *unstructured.Unstructured
		spec *bootstrapv1.KubeadmConfigSpec
		what string
	}{{obj, &liveSpec, "KubeadmConfig " + key.String()}, {req, &reqSpec, "the request's KubeadmConfig"}} {
		if raw, ok := x.obj.Object["spec"]; ok {
			b, err := json.Marshal(raw)
			if err == nil {
				err = json.Unmarshal(b, x.spec)
			}
			if err != nil {
				return nil, x.what + ": spec: " + errtext.Clip(err.Error()), nil
			}
		}
	}
	if !apiequality.Semantic.DeepEqual(reqSpec, liveSpec) {
		return nil, "the request's bootstrap config spec is not KubeadmConfig " + key.String() + "'s", nil
	}
	return &liveSpec, "", nil
}

// checkInfraMachine requires the request to carry the live Machine's
// infrastructure machine, and the live one to be marked by Cluster API for
// the update, as Cluster API requires before it calls the hook. The live
// object is read with the request's API version (its group and kind must
// be the Machine's reference's).
func (u *MachineUpdater) checkInfraMachine(ctx context.Context, live *clusterv1.Machine, raw runtime.RawExtension) (string, error) {
	req, err := requestObject(raw)
	if err != nil {
		return "the request's infrastructure machine does not decode: " + errtext.Clip(err.Error()), nil
	}
	ref := live.Spec.InfrastructureRef
	gvk := req.GroupVersionKind()
	switch {
	case !ref.IsDefined():
		return "the Machine has no infrastructure machine", nil
	case gvk.Group != ref.APIGroup || gvk.Kind != ref.Kind || gvk.Version == "" || req.GetName() != ref.Name ||
		(req.GetNamespace() != "" && req.GetNamespace() != live.Namespace):
		return fmt.Sprintf("the request's infrastructure machine %s %s is not the Machine's %s %s (%s)",
			errtext.Quote(req.GetAPIVersion()+"/"+req.GetKind()), errtext.Quote(req.GetName()), ref.Kind, ref.Name, ref.APIGroup), nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	key := types.NamespacedName{Namespace: live.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return fmt.Sprintf("no %s %s", ref.Kind, key), nil
		}
		return "", err
	}
	if _, ok := obj.GetAnnotations()[clusterv1.UpdateInProgressAnnotation]; !ok {
		return fmt.Sprintf("%s %s has no %s annotation: Cluster API has not asked for its in-place update", ref.Kind, key, clusterv1.UpdateInProgressAnnotation), nil
	}
	return "", nil
}
