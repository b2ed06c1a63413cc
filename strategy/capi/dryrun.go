package capi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// infrastructureDryRunFieldManager is the field manager of
// ExtensionOptions.InfrastructureDryRun's dry runs: Cluster API's MachineSet
// controller's, so that the server merges the dry run exactly as it will
// merge Cluster API's write (a field that controller set before and the new
// template drops is removed in both).
const infrastructureDryRunFieldManager = "capi-machineset"

// ErrDryRunForbidden is matched by the Failure answered when the
// management cluster refuses ExtensionOptions.InfrastructureDryRun's dry run for lack
// of permission (RBAC): patch on the infrastructure machines' resource is
// missing from the extension's role. It is a Failure, not a decline,
// because it is the extension's configuration that is wrong, not the
// change: once granted, Cluster API asks again and the update goes on in
// place.
var ErrDryRunForbidden = errors.New("infrastructure dry run not permitted")

// maxDryRunParallel bounds the dry runs in flight for one answer.
const maxDryRunParallel = 8

// dryRunInfrastructure tries Cluster API's write of the desired template's
// spec on every infrastructure machine of the current MachineSet. It
// returns why the write would be refused ("" when it would not), or an
// error the hook answers as a Failure.
func (e *Extension) dryRunInfrastructure(ctx context.Context, cur any, desiredTemplate any) (string, error) {
	ms, ok := cur.(*clusterv1.MachineSet)
	if !ok || ms == nil {
		return "", fmt.Errorf("%w: infrastructure dry run: current object is a %T, not a MachineSet", ErrIncompleteRequest, cur)
	}
	raw, ok := desiredTemplate.(runtime.RawExtension)
	if !ok {
		return "", fmt.Errorf("%w: infrastructure dry run: desired.infrastructureMachineTemplate is a %T", ErrMalformedRequest, desiredTemplate)
	}
	tmpl, err := requestObject(raw)
	if err != nil {
		return "", fmt.Errorf("%w: desired.infrastructureMachineTemplate: %s", ErrMalformedRequest, errtext.Clip(err.Error()))
	}
	gv, err := schema.ParseGroupVersion(tmpl.GetAPIVersion())
	if err != nil || gv.Version == "" {
		return "", fmt.Errorf("%w: desired.infrastructureMachineTemplate.apiVersion %q", ErrMalformedRequest, tmpl.GetAPIVersion())
	}
	spec, found, err := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	if err != nil {
		return "", fmt.Errorf("%w: desired.infrastructureMachineTemplate.spec.template.spec: %s", ErrMalformedRequest, errtext.Clip(err.Error()))
	}
	if !found {
		spec = map[string]any{}
	}

	var machines clusterv1.MachineList
	if err := e.dryRun.List(ctx, &machines, client.InNamespace(ms.Namespace),
		client.MatchingLabels{clusterv1.MachineSetNameLabel: format.MustFormatValue(ms.Name)}); err != nil {
		return "", fmt.Errorf("infrastructure dry run: listing MachineSet %s/%s's Machines: %w", ms.Namespace, ms.Name, err)
	}
	var objs []*unstructured.Unstructured
	for i := range machines.Items {
		m := &machines.Items[i]
		if owner := metav1.GetControllerOf(m); owner == nil || owner.Kind != "MachineSet" || owner.Name != ms.Name {
			continue
		}
		ref := m.Spec.InfrastructureRef
		if !ref.IsDefined() || !m.DeletionTimestamp.IsZero() {
			continue
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": runtime.DeepCopyJSONValue(spec)}}
		u.SetAPIVersion(schema.GroupVersion{Group: ref.APIGroup, Version: gv.Version}.String())
		u.SetKind(ref.Kind)
		u.SetNamespace(m.Namespace)
		u.SetName(ref.Name)
		objs = append(objs, u)
	}
	slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(objs))
	sem := make(chan struct{}, maxDryRunParallel)
	var wg sync.WaitGroup
	for i, u := range objs {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			errs[i] = e.dryRun.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
				client.DryRunAll, client.ForceOwnership, client.FieldOwner(infrastructureDryRunFieldManager))
			if errs[i] != nil && !apierrors.IsNotFound(errs[i]) {
				cancel() // one answer is enough; the rest stop
			}
		})
	}
	wg.Wait()
	// The first answer that is not a success decides, in name order among
	// the machines tried before the others were stopped; a refusal or a
	// missing permission outranks a transient error.
	var transient error
	for i, err := range errs {
		u := objs[i]
		what := fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case errors.Is(err, context.Canceled) && parent.Err() == nil:
			// Stopped because another machine answered first.
		case rbacForbidden(err):
			return "", fmt.Errorf("%w: %s: %s (grant patch on %s in the extension's role)", ErrDryRunForbidden, what, errtext.Clip(err.Error()), u.GroupVersionKind().GroupKind())
		case refusal(err):
			return fmt.Sprintf("cannot update in place: Cluster API's write of the new template to %s would be refused (dry run): %s", what, errtext.Clip(err.Error())), nil
		case transient == nil:
			transient = fmt.Errorf("infrastructure dry run of %s (transient: Cluster API asks again): %w", what, err)
		}
	}
	return "", transient
}

// rbacForbidden tells RBAC's Forbidden from an admission webhook's.
func rbacForbidden(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), " cannot patch resource ")
}

// refusal reports whether err is the server refusing the object itself,
// which retrying does not change.
func refusal(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnauthorized(err):
		return false
	}
	return status.Status().Code >= 400 && status.Status().Code < 500
}
