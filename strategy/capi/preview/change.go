package preview

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrInvalidChange is matched by the errors about a proposed change that
// cannot be previewed: unparsable YAML, an object without kind or name, a
// Cluster API object in another API version than v1beta2, an object the
// API server's dry run refuses, a ClusterClass-managed change other than
// the version. The message names the object.
var ErrInvalidChange = errors.New("invalid change")

// MaxChangeBytes caps what ParseChange reads: a change is a handful of
// objects, not a dump of a cluster.
const MaxChangeBytes = 8 << 20

// ParseChange reads the objects of a proposed change: YAML documents
// separated by "---", or JSON, as kubectl apply -f takes them (a List's
// items are taken one by one). Every object needs apiVersion, kind and
// metadata.name.
func ParseChange(r io.Reader) ([]*unstructured.Unstructured, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidChange)
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxChangeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %w", ErrInvalidChange, err)
	}
	if len(data) > MaxChangeBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrInvalidChange, MaxChangeBytes)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(bytes.NewReader(data)), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%w: document %d: %w", ErrInvalidChange, doc, err)
		}
		if obj == nil {
			continue // an empty document
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.IsList() {
			items, _ := obj["items"].([]any)
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%w: document %d: items[%d] is not an object", ErrInvalidChange, doc, i)
				}
				item := &unstructured.Unstructured{Object: m}
				if err := checkObject(item, fmt.Sprintf("document %d items[%d]", doc, i)); err != nil {
					return nil, err
				}
				out = append(out, item)
			}
			continue
		}
		if err := checkObject(u, fmt.Sprintf("document %d", doc)); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no objects", ErrInvalidChange)
	}
	return out, nil
}

func checkObject(u *unstructured.Unstructured, where string) error {
	switch {
	case u.GetAPIVersion() == "":
		return fmt.Errorf("%w: %s: apiVersion is missing", ErrInvalidChange, where)
	case u.GetKind() == "":
		return fmt.Errorf("%w: %s: kind is missing", ErrInvalidChange, where)
	case u.GetName() == "":
		return fmt.Errorf("%w: %s (%s): metadata.name is missing", ErrInvalidChange, where, u.GetKind())
	}
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		return fmt.Errorf("%w: %s (%s %s): apiVersion: %w", ErrInvalidChange, where, u.GetKind(), u.GetName(), err)
	}
	switch gv.Group {
	case clusterv1.GroupVersion.Group, bootstrapv1.GroupVersion.Group, controlplanev1.GroupVersion.Group:
		if gv.Version != "v1beta2" {
			return fmt.Errorf("%w: %s (%s %s): apiVersion %s: the preview reads Cluster API's v1beta2 only", ErrInvalidChange, where, u.GetKind(), u.GetName(), u.GetAPIVersion())
		}
	}
	return nil
}

// objKey identifies an object across API versions.
type objKey struct {
	group, kind, namespace, name string
}

func keyOf(u *unstructured.Unstructured) objKey {
	gvk := u.GroupVersionKind()
	return objKey{gvk.Group, gvk.Kind, u.GetNamespace(), u.GetName()}
}

func (k objKey) String() string {
	gk := k.kind
	if k.group != "" {
		gk += "." + k.group
	}
	return gk + " " + k.namespace + "/" + k.name
}

// overlay reads the proposed objects where the change has them and the
// management cluster for the rest: templates a change adds are found by
// the same reads Cluster API makes.
type overlay struct {
	client.Client
	objs map[objKey]*unstructured.Unstructured
}

// Get returns the proposed object for an unstructured read of one the
// change holds, and the management cluster's otherwise.
func (o *overlay) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		gvk := u.GroupVersionKind()
		if p, found := o.objs[objKey{gvk.Group, gvk.Kind, key.Namespace, key.Name}]; found {
			p.DeepCopyInto(u)
			u.SetGroupVersionKind(gvk)
			return nil
		}
	}
	return o.Client.Get(ctx, key, obj, opts...)
}

// dryRun sends obj to the API server as a server-side apply with dryRun=All
// so that Cluster API's webhooks default and validate it as they would
// the real apply, and returns what the server would store. Server-managed
// metadata and status are dropped first: a change copied from kubectl get
// -o yaml applies as the user meant it.
func dryRun(ctx context.Context, c client.Client, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	in := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range u.Object {
		if k != "status" {
			in.Object[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	in.SetManagedFields(nil)
	in.SetResourceVersion("")
	in.SetUID("")
	in.SetGeneration(0)
	unstructured.RemoveNestedField(in.Object, "metadata", "creationTimestamp")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(in), client.FieldOwner(FieldManager), client.ForceOwnership, client.DryRunAll); err != nil {
		return nil, fmt.Errorf("%w: %s: the API server's dry run refuses it: %w", ErrInvalidChange, keyOf(u), err)
	}
	return in, nil
}

// FieldManager is the field manager of the preview's dry-run applies.
const FieldManager = "upgradekit-preview"

// toTyped converts a proposed object to a typed Cluster API object.
func toTyped(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidChange, keyOf(u), err)
	}
	return nil
}

// sortedKeys lists a change's objects in a stable order, for messages.
func sortedKeys(m map[objKey]*unstructured.Unstructured) []objKey {
	keys := make([]objKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b objKey) int { return strings.Compare(a.String(), b.String()) })
	return keys
}
