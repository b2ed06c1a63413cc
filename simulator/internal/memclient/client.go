package memclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	sigsjson "sigs.k8s.io/json"
)

// ErrInvalidOptions is wrapped by the error New returns for options it
// cannot build a client from.
var ErrInvalidOptions = errors.New("memclient: invalid options")

// Options configures New.
type Options struct {
	// Scheme maps Go types to kinds. Required. The client only reads it.
	Scheme *runtime.Scheme
	// StatusSubresource are the kinds (one object of each) whose status is
	// a subresource.
	StatusSubresource []client.Object
	// ClusterScoped are the kinds, besides Kubernetes' own cluster-scoped
	// ones (Node, Namespace, PersistentVolume, CustomResourceDefinition,
	// ...), whose objects have no namespace. Every other kind is
	// namespaced.
	ClusterScoped []schema.GroupKind
	// Clock gives creationTimestamp and deletionTimestamp (default: the
	// wall clock).
	Clock clock.PassiveClock
}

// builtinClusterScoped are Kubernetes' cluster-scoped kinds.
var builtinClusterScoped = []schema.GroupKind{
	{Kind: "Node"}, {Kind: "Namespace"}, {Kind: "PersistentVolume"}, {Kind: "ComponentStatus"},
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
	{Group: "apiregistration.k8s.io", Kind: "APIService"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
	{Group: "storage.k8s.io", Kind: "StorageClass"}, {Group: "storage.k8s.io", Kind: "CSIDriver"},
	{Group: "storage.k8s.io", Kind: "CSINode"}, {Group: "storage.k8s.io", Kind: "VolumeAttachment"},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}, {Group: "node.k8s.io", Kind: "RuntimeClass"},
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"},
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"},
	{Group: "networking.k8s.io", Kind: "IngressClass"},
}

// Client is the in-memory API server and its client. Make one with New;
// it is safe for concurrent use.
type Client struct {
	scheme        *runtime.Scheme
	mapper        meta.RESTMapper
	clock         clock.PassiveClock
	status        map[schema.GroupVersionKind]bool
	clusterScoped map[schema.GroupKind]bool

	mu       sync.RWMutex
	revision uint64
	objects  map[schema.GroupVersionKind]map[types.NamespacedName]runtime.Object
}

var _ client.WithWatch = (*Client)(nil)

// New returns a client whose store holds deep copies of objs. An object
// without resourceVersion gets the store's next revision; a numeric one
// is kept and the revision counter moves past it; uid and
// creationTimestamp are kept as given.
func New(opts Options, objs ...client.Object) (*Client, error) {
	if opts.Scheme == nil {
		return nil, fmt.Errorf("%w: no scheme", ErrInvalidOptions)
	}
	c := &Client{scheme: opts.Scheme, clock: opts.Clock, status: map[schema.GroupVersionKind]bool{},
		clusterScoped: map[schema.GroupKind]bool{}, objects: map[schema.GroupVersionKind]map[types.NamespacedName]runtime.Object{}}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	for _, gk := range append(slices.Clone(builtinClusterScoped), opts.ClusterScoped...) {
		c.clusterScoped[gk] = true
	}
	for _, o := range opts.StatusSubresource {
		if o == nil {
			return nil, fmt.Errorf("%w: nil status subresource object", ErrInvalidOptions)
		}
		gvk, err := apiutil.GVKForObject(o, c.scheme)
		if err != nil {
			return nil, fmt.Errorf("%w: status subresource %T: %w", ErrInvalidOptions, o, err)
		}
		c.status[gvk] = true
	}
	c.mapper = c.restMapper()
	for _, o := range objs {
		if o == nil {
			return nil, fmt.Errorf("%w: nil object", ErrInvalidOptions)
		}
		gvk, err := c.gvkFor(o)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		stored, err := c.toStored(o, gvk)
		if err != nil {
			return nil, fmt.Errorf("%w: %T %s: %w", ErrInvalidOptions, o, o.GetName(), err)
		}
		m, err := meta.Accessor(stored)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		key := c.key(gvk, m.GetNamespace(), m.GetName())
		if key.Name == "" {
			return nil, fmt.Errorf("%w: %s without a name", ErrInvalidOptions, gvk.Kind)
		}
		if key.Namespace == "" && !c.clusterScoped[gvk.GroupKind()] {
			return nil, fmt.Errorf("%w: %s %s without a namespace", ErrInvalidOptions, gvk.Kind, key.Name)
		}
		m.SetNamespace(key.Namespace)
		if _, ok := c.objects[gvk][key]; ok {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, apierrors.NewAlreadyExists(resource(gvk), key.Name))
		}
		c.revision++
		if rv := m.GetResourceVersion(); rv == "" {
			m.SetResourceVersion(strconv.FormatUint(c.revision, 10))
		} else if n, err := strconv.ParseUint(rv, 10, 64); err == nil && n > c.revision {
			// The counter goes past a seeded resourceVersion, so that no
			// later write gives another object's state the same one.
			c.revision = n
		}
		c.put(gvk, key, stored)
	}
	return c, nil
}

// restMapper maps every kind of the scheme, with its scope.
func (c *Client) restMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(c.scheme.PrioritizedVersionsAllGroups())
	for gvk := range c.scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		scope := meta.RESTScopeNamespace
		if c.clusterScoped[gvk.GroupKind()] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	return m
}

func (c *Client) put(gvk schema.GroupVersionKind, key types.NamespacedName, o runtime.Object) {
	m := c.objects[gvk]
	if m == nil {
		m = map[types.NamespacedName]runtime.Object{}
		c.objects[gvk] = m
	}
	m[key] = o
}

// key is the store's key of an object: cluster-scoped kinds have no
// namespace, whatever the caller passed (as controller-runtime's client
// drops it).
func (c *Client) key(gvk schema.GroupVersionKind, ns, name string) types.NamespacedName {
	if c.clusterScoped[gvk.GroupKind()] {
		ns = ""
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

func resource(gvk schema.GroupVersionKind) schema.GroupResource {
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.GroupResource()
}

// gvkFor is the kind of obj: from the scheme for Go types, from TypeMeta
// for unstructured objects and PartialObjectMetadata.
func (c *Client) gvkFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" {
			return gvk, fmt.Errorf("memclient: PartialObjectMetadata without apiVersion and kind")
		}
		return gvk, nil
	}
	if _, ok := obj.(*metav1.PartialObjectMetadataList); ok {
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" {
			return gvk, fmt.Errorf("memclient: PartialObjectMetadataList without apiVersion and kind")
		}
		return gvk, nil
	}
	return apiutil.GVKForObject(obj, c.scheme)
}

// newStored returns an empty object of the type the store keeps gvk as.
func (c *Client) newStored(gvk schema.GroupVersionKind) runtime.Object {
	if o, err := c.scheme.New(gvk); err == nil {
		if _, isU := o.(runtime.Unstructured); !isU {
			return o
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// toStored returns a copy of obj, of the stored type of gvk, that shares
// nothing with obj.
func (c *Client) toStored(obj runtime.Object, gvk schema.GroupVersionKind) (runtime.Object, error) {
	out := c.newStored(gvk)
	if _, err := meta.Accessor(out); err != nil {
		return nil, fmt.Errorf("memclient: %s is no kind of object (the scheme's %T has no object metadata): %w", gvk, out, err)
	}
	if err := convert(obj, out); err != nil {
		return nil, err
	}
	if u, ok := out.(*unstructured.Unstructured); ok {
		u.SetGroupVersionKind(gvk)
	} else {
		out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	return out, nil
}

// convert deep-copies src into dst, converting between a Go type and
// unstructured as needed.
func convert(src, dst runtime.Object) error {
	if p, ok := dst.(*metav1.PartialObjectMetadata); ok {
		m, err := meta.Accessor(src)
		if err != nil {
			return err
		}
		gvk := p.GroupVersionKind()
		*p = metav1.PartialObjectMetadata{}
		p.SetGroupVersionKind(gvk)
		objectMeta(m).DeepCopyInto(&p.ObjectMeta)
		return nil
	}
	su, srcU := src.(*unstructured.Unstructured)
	du, dstU := dst.(*unstructured.Unstructured)
	switch {
	case srcU && dstU:
		m, err := copyJSON(su.Object)
		if err != nil {
			return err
		}
		du.Object = m
	case dstU:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
		if err != nil {
			return err
		}
		du.Object = m // ToUnstructured copies
	case srcU:
		m, err := copyJSON(su.Object)
		if err != nil {
			return err
		}
		zero(dst)
		return runtime.DefaultUnstructuredConverter.FromUnstructured(m, dst)
	default:
		sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
		if sv.Type() != dv.Type() || sv.Kind() != reflect.Pointer || sv.IsNil() || dv.IsNil() {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
			if err != nil {
				return err
			}
			zero(dst)
			return runtime.DefaultUnstructuredConverter.FromUnstructured(m, dst)
		}
		dv.Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
	}
	return nil
}

// copyJSON deep-copies the content of an unstructured object.
// runtime.DeepCopyJSON panics on a value JSON has no type for (a Go int,
// say), which controller-runtime's client sends as JSON all the same: such
// content takes a JSON round trip instead, as it would to a real server.
func copyJSON(m map[string]any) (map[string]any, error) {
	if isJSON(m) {
		return runtime.DeepCopyJSON(m), nil
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var cp map[string]any
	if err := utiljson.Unmarshal(data, &cp); err != nil {
		return nil, err
	}
	return cp, nil
}

// isJSON reports whether v holds only the types runtime.DeepCopyJSONValue
// copies.
func isJSON(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			if !isJSON(x) {
				return false
			}
		}
		return true
	case []any:
		for _, x := range v {
			if !isJSON(x) {
				return false
			}
		}
		return true
	case string, int64, bool, float64, nil, json.Number:
		return true
	}
	return false
}

// objectMeta returns the ObjectMeta behind m (a copy for unstructured).
func objectMeta(m metav1.Object) *metav1.ObjectMeta {
	if om, ok := m.(*metav1.ObjectMeta); ok {
		return om
	}
	return &metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		Generation: m.GetGeneration(), GenerateName: m.GetGenerateName(), CreationTimestamp: m.GetCreationTimestamp(),
		DeletionTimestamp: m.GetDeletionTimestamp(), DeletionGracePeriodSeconds: m.GetDeletionGracePeriodSeconds(),
		Labels: m.GetLabels(), Annotations: m.GetAnnotations(), OwnerReferences: m.GetOwnerReferences(), Finalizers: m.GetFinalizers(),
		ManagedFields: m.GetManagedFields()}
}

func zero(x any) {
	v := reflect.ValueOf(x).Elem()
	v.Set(reflect.Zero(v.Type()))
}

// out copies stored into obj, with TypeMeta as controller-runtime's
// clients leave it.
func out(stored, obj runtime.Object, gvk schema.GroupVersionKind) error {
	if err := convert(stored, obj); err != nil {
		return err
	}
	setTypeMeta(obj, gvk)
	return nil
}

func setTypeMeta(obj runtime.Object, gvk schema.GroupVersionKind) {
	switch obj.(type) {
	case runtime.Unstructured, *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	default:
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
}

// errNoName is client-go's error for a request on an object without a
// name: it fails before any request is sent.
var errNoName = errors.New("resource name may not be empty")

// resetGVK restores the kind the caller had set on obj, as
// controller-runtime's client does after an Update or a Patch (whose
// answer, decoded into a Go type, has none).
func resetGVK(obj runtime.Object, gvk schema.GroupVersionKind) {
	if !gvk.Empty() {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
}

func (c *Client) lookup(gvk schema.GroupVersionKind, key types.NamespacedName) runtime.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objects[gvk][key]
}

// Get implements client.Reader.
func (c *Client) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	if key.Name == "" {
		return errNoName
	}
	k := c.key(gvk, key.Namespace, key.Name)
	stored := c.lookup(gvk, k)
	if stored == nil {
		return apierrors.NewNotFound(resource(gvk), key.Name)
	}
	return out(stored, obj, gvk)
}

// List implements client.Reader. Limit and Continue are ignored.
func (c *Client) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	listGVK, err := c.gvkFor(list)
	if err != nil {
		return err
	}
	gvk := listGVK
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	lo := client.ListOptions{}
	lo.ApplyOptions(opts)
	match, err := fieldMatcher(lo.FieldSelector)
	if err != nil {
		return err
	}
	c.mu.RLock()
	rev := c.revision
	var keys []types.NamespacedName
	objs := c.objects[gvk]
	for k, o := range objs {
		if lo.Namespace != "" && !c.clusterScoped[gvk.GroupKind()] && k.Namespace != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil || match != nil {
			m, err := meta.Accessor(o)
			if err != nil {
				c.mu.RUnlock()
				return err
			}
			if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(m.GetLabels())) {
				continue
			}
			if match != nil && !match(k) {
				continue
			}
		}
		keys = append(keys, k)
	}
	found := make([]runtime.Object, len(keys))
	slices.SortFunc(keys, compareKeys)
	for i, k := range keys {
		found[i] = objs[k]
	}
	c.mu.RUnlock()

	items := make([]runtime.Object, len(found))
	for i, stored := range found {
		item, err := c.listItem(list, gvk)
		if err != nil {
			return err
		}
		if err := out(stored, item, gvk); err != nil {
			return err
		}
		items[i] = item
	}
	zero(list)
	setTypeMeta(list, listGVK)
	list.SetResourceVersion(strconv.FormatUint(rev, 10))
	return meta.SetList(list, items)
}

// compareKeys orders keys as etcd does: by namespace + "/" + name.
func compareKeys(a, b types.NamespacedName) int {
	return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// listItem is an empty item of list's item type.
func (c *Client) listItem(list client.ObjectList, gvk schema.GroupVersionKind) (runtime.Object, error) {
	switch list.(type) {
	case *unstructured.UnstructuredList:
		return &unstructured.Unstructured{}, nil
	case *metav1.PartialObjectMetadataList:
		p := &metav1.PartialObjectMetadata{}
		p.SetGroupVersionKind(gvk)
		return p, nil
	}
	items, err := meta.GetItemsPtr(list)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(items).Elem().Elem() // []T or []*T
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	o, ok := reflect.New(t).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("memclient: list %T has items that are no runtime.Object", list)
	}
	return o, nil
}

// fieldMatcher supports the selectors every kind has: metadata.name and
// metadata.namespace.
func fieldMatcher(s fields.Selector) (func(types.NamespacedName) bool, error) {
	if s == nil || s.Empty() {
		return nil, nil
	}
	reqs := s.Requirements()
	for _, r := range reqs {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return func(k types.NamespacedName) bool {
		return s.Matches(fields.Set{"metadata.name": k.Name, "metadata.namespace": k.Namespace})
	}, nil
}

// Scheme implements client.Client.
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// RESTMapper implements client.Client: every kind of the scheme, with its
// scope.
func (c *Client) RESTMapper() meta.RESTMapper { return c.mapper }

// GroupVersionKindFor implements client.Client.
func (c *Client) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return c.gvkFor(obj)
}

// IsObjectNamespaced implements client.Client.
func (c *Client) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return false, err
	}
	return !c.clusterScoped[gvk.GroupKind()], nil
}

// ErrUnsupported is wrapped (with errors.ErrUnsupported) by the errors of
// what the client does not do: Watch, server-side apply, subresources
// other than status.
var ErrUnsupported = fmt.Errorf("memclient: %w", errors.ErrUnsupported)

// Watch implements client.WithWatch: it is not supported.
func (c *Client) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, fmt.Errorf("%w: watch", ErrUnsupported)
}

// Apply implements client.Writer: server-side apply is not supported.
func (c *Client) Apply(context.Context, runtime.ApplyConfiguration, ...client.ApplyOption) error {
	return fmt.Errorf("%w: server-side apply", ErrUnsupported)
}

// uid derives a creation's uid from the object's key and the revision it
// was created at.
func uid(gvk schema.GroupVersionKind, key types.NamespacedName, rev uint64) types.UID {
	sum := sha256.Sum256([]byte(gvk.String() + "/" + key.String() + "/" + strconv.FormatUint(rev, 10)))
	h := hex.EncodeToString(sum[:16])
	return types.UID(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

func (c *Client) now() *metav1.Time {
	t := metav1.NewTime(c.clock.Now()).Rfc3339Copy()
	return &t
}

// Create implements client.Writer.
func (c *Client) Create(_ context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return errors.New("cannot create using only metadata") // controller-runtime's client's error
	}
	co := client.CreateOptions{}
	co.ApplyOptions(opts)
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	if obj.GetResourceVersion() != "" {
		// What kube-apiserver answers: a 500 without a reason.
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
			Message: "resourceVersion should not be set on objects to be created"}}
	}
	if obj.GetName() == "" && obj.GetGenerateName() == "" {
		return apierrors.NewInvalid(gvk.GroupKind(), "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	stored, err := c.toStored(obj, gvk)
	if err != nil {
		return err
	}
	m, err := meta.Accessor(stored)
	if err != nil {
		return err
	}
	if !c.clusterScoped[gvk.GroupKind()] && m.GetNamespace() == "" {
		return errors.New("an empty namespace may not be set during creation") // client-go's error
	}
	if c.status[gvk] && !statusOnCreate[gvk.GroupKind()] {
		setStatus(stored, c.newStored(gvk))
	}
	dry := slices.Contains(co.DryRun, metav1.DryRunAll)

	c.mu.Lock()
	defer c.mu.Unlock()
	rev := c.revision + 1
	if m.GetName() == "" {
		m.SetName(m.GetGenerateName() + string(uid(gvk, types.NamespacedName{Namespace: m.GetNamespace()}, rev))[:5])
	}
	key := c.key(gvk, m.GetNamespace(), m.GetName())
	if _, ok := c.objects[gvk][key]; ok {
		return apierrors.NewAlreadyExists(resource(gvk), key.Name)
	}
	m.SetNamespace(key.Namespace)
	m.SetResourceVersion(strconv.FormatUint(rev, 10))
	m.SetUID(uid(gvk, key, rev))
	m.SetCreationTimestamp(*c.now())
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetManagedFields(nil)
	if dry {
		// The server answers what it would have stored, without a
		// resourceVersion.
		m.SetResourceVersion("")
		return out(stored, obj, gvk)
	}
	c.revision = rev
	c.put(gvk, key, stored)
	return out(stored, obj, gvk)
}

// statusOnCreate are the kinds with a status subresource whose status a
// Create keeps (a kubelet registers its Node with its status).
var statusOnCreate = map[schema.GroupKind]bool{{Kind: "Node"}: true}

// statusMeta is what of metadata a status write also writes.
type statusMeta struct{ ownerReferences bool }

// statusWritesMeta are the kinds whose status write also writes labels,
// annotations and finalizers, as Kubernetes' status strategies for them
// copy only spec from the stored object: Node and PodDisruptionBudget
// owner references too, Pod not (its strategy keeps the stored ones, so
// that old kubelets cannot break garbage collection). For every other
// kind (custom resources among them) a status write changes status only.
var statusWritesMeta = map[schema.GroupKind]statusMeta{
	{Kind: "Node"}: {ownerReferences: true},
	{Kind: "Pod"}:  {},
	{Group: "policy", Kind: "PodDisruptionBudget"}: {ownerReferences: true},
}

// Update implements client.Writer.
func (c *Client) Update(_ context.Context, obj client.Object, opts ...client.UpdateOption) error {
	defer resetGVK(obj, obj.GetObjectKind().GroupVersionKind())
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return errors.New("cannot update using only metadata -- did you mean to patch?") // controller-runtime's client's error
	}
	uo := client.UpdateOptions{}
	uo.ApplyOptions(opts)
	return c.update(obj, false, slices.Contains(uo.DryRun, metav1.DryRunAll))
}

func (c *Client) update(obj client.Object, isStatus, dry bool) error {
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	if obj.GetName() == "" {
		return errNoName
	}
	if isStatus && !c.status[gvk] {
		return apierrors.NewNotFound(resource(gvk), obj.GetName())
	}
	in, err := c.toStored(obj, gvk)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := c.key(gvk, obj.GetNamespace(), obj.GetName())
	old := c.objects[gvk][key]
	if old == nil {
		return apierrors.NewNotFound(resource(gvk), key.Name)
	}
	im, err := meta.Accessor(in)
	if err != nil {
		return err
	}
	if im.GetResourceVersion() == "" && !unconditional(gvk) {
		return apierrors.NewInvalid(gvk.GroupKind(), key.Name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), 0, "must be specified for an update")})
	}
	stored, err := c.write(gvk, key, old, in, isStatus, dry)
	if err != nil {
		return err
	}
	return out(stored, obj, gvk)
}

// write stores in over old (both of the stored type; in is the client's
// and may be changed): checks preconditions, applies the status
// subresource's rules, bumps resourceVersion unless nothing changed.
// Called with c.mu held. It returns what is stored now (old when nothing
// changed, the deleted object when the last finalizer went).
func (c *Client) write(gvk schema.GroupVersionKind, key types.NamespacedName, old, in runtime.Object, isStatus, dry bool) (runtime.Object, error) {
	om, err := meta.Accessor(old)
	if err != nil {
		return nil, err
	}
	im, err := meta.Accessor(in)
	if err != nil {
		return nil, err
	}
	if rv := im.GetResourceVersion(); rv != "" && rv != om.GetResourceVersion() {
		return nil, conflict(gvk, key.Name)
	}
	if u := im.GetUID(); u != "" && u != om.GetUID() {
		return nil, apierrors.NewConflict(resource(gvk), key.Name,
			fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", u, om.GetUID()))
	}
	var next runtime.Object
	switch {
	case isStatus:
		next = shallowCopy(old)
		setStatus(next, in)
		if sm, ok := statusWritesMeta[gvk.GroupKind()]; ok {
			nm, err := meta.Accessor(next)
			if err != nil {
				return nil, err
			}
			nm.SetLabels(im.GetLabels())
			nm.SetAnnotations(im.GetAnnotations())
			nm.SetFinalizers(im.GetFinalizers())
			if sm.ownerReferences {
				nm.SetOwnerReferences(im.GetOwnerReferences())
			}
		}
	case c.status[gvk]:
		setStatus(in, old)
		next = in
	default:
		next = in
	}
	nm, err := meta.Accessor(next)
	if err != nil {
		return nil, err
	}
	nm.SetNamespace(key.Namespace)
	nm.SetUID(om.GetUID())
	nm.SetCreationTimestamp(om.GetCreationTimestamp())
	nm.SetDeletionTimestamp(om.GetDeletionTimestamp())
	nm.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
	nm.SetGeneration(om.GetGeneration())
	nm.SetManagedFields(nil)
	nm.SetResourceVersion(om.GetResourceVersion())
	if u, ok := next.(*unstructured.Unstructured); ok {
		u.SetGroupVersionKind(gvk)
	} else {
		next.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	if om.GetDeletionTimestamp() != nil {
		var added []string
		for _, f := range nm.GetFinalizers() {
			if !slices.Contains(om.GetFinalizers(), f) {
				added = append(added, f)
			}
		}
		if len(added) > 0 {
			return nil, apierrors.NewInvalid(gvk.GroupKind(), key.Name, field.ErrorList{field.Forbidden(field.NewPath("metadata", "finalizers"),
				fmt.Sprintf("no new finalizers can be added if the object is being deleted, found new finalizers %#v", added))})
		}
	}
	if equality.Semantic.DeepEqual(old, next) {
		return old, nil
	}
	if dry {
		return next, nil
	}
	c.revision++
	nm.SetResourceVersion(strconv.FormatUint(c.revision, 10))
	if nm.GetDeletionTimestamp() != nil && len(nm.GetFinalizers()) == 0 {
		delete(c.objects[gvk], key)
		return next, nil
	}
	c.put(gvk, key, next)
	return next, nil
}

func conflict(gvk schema.GroupVersionKind, name string) error {
	return apierrors.NewConflict(resource(gvk), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// unconditional reports whether gvk is one of Kubernetes' own kinds, not a
// custom resource: an Update without resourceVersion and a strategic merge
// patch are allowed for them only.
func unconditional(gvk schema.GroupVersionKind) bool {
	return clientgoscheme.Scheme.Recognizes(gvk)
}

// setStatus sets dst's status to src's, sharing what is under it. That is
// safe because the store never changes an object in place: a write stores
// a new one (the client's private copy, or a copy of the old one), so two
// stored objects may share parts, and what a caller gets is always a deep
// copy (out).
func setStatus(dst, src runtime.Object) {
	if du, ok := dst.(*unstructured.Unstructured); ok {
		su, _ := src.(*unstructured.Unstructured)
		if st, ok := su.Object["status"]; ok {
			du.Object["status"] = st
		} else {
			delete(du.Object, "status")
		}
		return
	}
	dv := reflect.ValueOf(dst).Elem().FieldByName("Status")
	sv := reflect.ValueOf(src).Elem().FieldByName("Status")
	if !dv.IsValid() || !sv.IsValid() || !dv.CanSet() || dv.Type() != sv.Type() {
		return
	}
	dv.Set(sv)
}

// shallowCopy copies the struct behind o (a stored object of a Go type),
// sharing its maps, slices and pointers: see setStatus for why that is
// safe. Unstructured objects, whose metadata is a map the setters change
// in place, are deep-copied.
func shallowCopy(o runtime.Object) runtime.Object {
	v := reflect.ValueOf(o)
	if _, isU := o.(*unstructured.Unstructured); isU || v.Kind() != reflect.Pointer || v.IsNil() {
		return o.DeepCopyObject()
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	if r, ok := cp.Interface().(runtime.Object); ok {
		return r
	}
	return o.DeepCopyObject()
}

// Patch implements client.Writer: merge, JSON and strategic merge
// patches.
func (c *Client) Patch(_ context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	defer resetGVK(obj, obj.GetObjectKind().GroupVersionKind())
	po := client.PatchOptions{}
	po.ApplyOptions(opts)
	return c.patch(obj, patch, false, slices.Contains(po.DryRun, metav1.DryRunAll))
}

func (c *Client) patch(obj client.Object, patch client.Patch, isStatus, dry bool) error {
	if patch == nil {
		return apierrors.NewBadRequest("no patch")
	}
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	if obj.GetName() == "" {
		return errNoName
	}
	if patch.Type() == types.ApplyPatchType || patch.Type() == types.ApplyCBORPatchType {
		return fmt.Errorf("%w: server-side apply", ErrUnsupported)
	}
	if isStatus && !c.status[gvk] {
		return apierrors.NewNotFound(resource(gvk), obj.GetName())
	}
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := c.key(gvk, obj.GetNamespace(), obj.GetName())
	old := c.objects[gvk][key]
	if old == nil {
		return apierrors.NewNotFound(resource(gvk), key.Name)
	}
	cur := old.DeepCopyObject()
	if u, ok := cur.(*unstructured.Unstructured); ok {
		u.SetGroupVersionKind(gvk)
	} else {
		cur.GetObjectKind().SetGroupVersionKind(gvk)
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	var patched []byte
	switch patch.Type() {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(orig, data)
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(data); err == nil {
			patched, err = p.Apply(orig)
		}
	case types.StrategicMergePatchType:
		if _, isU := old.(*unstructured.Unstructured); isU || !unconditional(gvk) {
			return apierrors.NewGenericServerResponse(415, "patch", resource(gvk), key.Name,
				fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
					types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType), 0, false)
		}
		patched, err = strategicpatch.StrategicMergePatch(orig, data, c.newStored(gvk))
	default:
		return apierrors.NewGenericServerResponse(415, "patch", resource(gvk), key.Name, fmt.Sprintf("unsupported patch type %q", patch.Type()), 0, false)
	}
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the patch could not be applied: %v", err))
	}
	in := c.newStored(gvk)
	decode := json.Unmarshal // *unstructured.Unstructured decodes itself
	if _, isU := in.(*unstructured.Unstructured); !isU {
		// Field names are case-sensitive, as to kube-apiserver's decoder
		// ("Labels" is an unknown field, not labels).
		decode = sigsjson.UnmarshalCaseSensitivePreserveInts
	}
	if err := decode(patched, in); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the patched object does not decode: %v", err))
	}
	if err := c.checkPatched(gvk, key, patched, in); err != nil {
		return err
	}
	stored, err := c.write(gvk, key, old, in, isStatus, dry)
	if err != nil {
		return err
	}
	return out(stored, obj, gvk)
}

// checkPatched refuses what a patch may not do, as kube-apiserver does:
// change the object's apiVersion or kind (Invalid; checked on the patched
// JSON, as a Go type's decoding drops them), its name, or its namespace
// (BadRequest: they must match the request's).
func (c *Client) checkPatched(gvk schema.GroupVersionKind, key types.NamespacedName, patched []byte, in runtime.Object) error {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(patched, &tm); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the patched object does not decode: %v", err))
	}
	if av := gvk.GroupVersion().String(); tm.APIVersion != av {
		return apierrors.NewInvalid(gvk.GroupKind(), key.Name, field.ErrorList{field.Invalid(field.NewPath("apiVersion"), tm.APIVersion, "must be "+av)})
	}
	if tm.Kind != gvk.Kind {
		return apierrors.NewInvalid(gvk.GroupKind(), key.Name, field.ErrorList{field.Invalid(field.NewPath("kind"), tm.Kind, "must be "+gvk.Kind)})
	}
	m, err := meta.Accessor(in)
	if err != nil {
		return err
	}
	if m.GetName() != key.Name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), key.Name))
	}
	if ns := m.GetNamespace(); !c.clusterScoped[gvk.GroupKind()] && ns != "" && ns != key.Namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the request (%s)", ns, key.Namespace))
	}
	return nil
}

// Delete implements client.Writer. An object with finalizers gets a
// deletionTimestamp; any other goes at once.
func (c *Client) Delete(_ context.Context, obj client.Object, opts ...client.DeleteOption) error {
	do := client.DeleteOptions{}
	do.ApplyOptions(opts)
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	if obj.GetName() == "" {
		return errNoName
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleteLocked(gvk, c.key(gvk, obj.GetNamespace(), obj.GetName()), do)
}

func (c *Client) deleteLocked(gvk schema.GroupVersionKind, key types.NamespacedName, do client.DeleteOptions) error {
	old := c.objects[gvk][key]
	if old == nil {
		return apierrors.NewNotFound(resource(gvk), key.Name)
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return err
	}
	if p := do.Preconditions; p != nil {
		if p.UID != nil && *p.UID != om.GetUID() {
			return apierrors.NewConflict(resource(gvk), key.Name,
				fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, om.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != om.GetResourceVersion() {
			return apierrors.NewConflict(resource(gvk), key.Name,
				fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, om.GetResourceVersion()))
		}
	}
	if slices.Contains(do.DryRun, metav1.DryRunAll) {
		return nil
	}
	if len(om.GetFinalizers()) == 0 {
		delete(c.objects[gvk], key)
		c.revision++
		return nil
	}
	if om.GetDeletionTimestamp() != nil {
		return nil
	}
	next := old.DeepCopyObject()
	nm, err := meta.Accessor(next)
	if err != nil {
		return err
	}
	nm.SetDeletionTimestamp(c.now())
	nm.SetDeletionGracePeriodSeconds(new(int64))
	c.revision++
	nm.SetResourceVersion(strconv.FormatUint(c.revision, 10))
	c.put(gvk, key, next)
	return nil
}

// DeleteAllOf implements client.Writer.
func (c *Client) DeleteAllOf(_ context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	do := client.DeleteAllOfOptions{}
	do.ApplyOptions(opts)
	gvk, err := c.gvkFor(obj)
	if err != nil {
		return err
	}
	match, err := fieldMatcher(do.FieldSelector)
	if err != nil {
		return err
	}
	if do.Namespace == "" && !c.clusterScoped[gvk.GroupKind()] {
		// kube-apiserver has no collection of a namespaced kind across
		// namespaces to delete.
		return apierrors.NewMethodNotSupported(resource(gvk), "deletecollection")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	objs := c.objects[gvk]
	keys := slices.SortedFunc(maps.Keys(objs), compareKeys)
	for _, k := range keys {
		o := objs[k]
		if !c.clusterScoped[gvk.GroupKind()] && k.Namespace != do.Namespace {
			continue
		}
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		if do.LabelSelector != nil && !do.LabelSelector.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		if match != nil && !match(k) {
			continue
		}
		if err := c.deleteLocked(gvk, k, do.DeleteOptions); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// Status implements client.StatusClient.
func (c *Client) Status() client.SubResourceWriter { return &subResource{c: c, name: "status"} }

// SubResource implements client.SubResourceClientConstructor: only
// "status" is supported.
func (c *Client) SubResource(name string) client.SubResourceClient {
	return &subResource{c: c, name: name}
}

type subResource struct {
	c    *Client
	name string
}

func (s *subResource) unsupported(verb string) error {
	return fmt.Errorf("%w: %s of subresource %q", ErrUnsupported, verb, s.name)
}

func (s *subResource) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	return s.unsupported("get")
}

func (s *subResource) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return s.unsupported("create")
}

func (s *subResource) Update(_ context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if s.name != "status" {
		return s.unsupported("update")
	}
	defer resetGVK(obj, obj.GetObjectKind().GroupVersionKind())
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return errors.New("cannot update status using only metadata -- did you mean to patch?") // controller-runtime's client's error
	}
	uo := client.SubResourceUpdateOptions{}
	uo.ApplyOptions(opts)
	body := obj
	if uo.SubResourceBody != nil {
		body = uo.SubResourceBody
	}
	return s.c.update(body, true, slices.Contains(uo.DryRun, metav1.DryRunAll))
}

func (s *subResource) Patch(_ context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if s.name != "status" {
		return s.unsupported("patch")
	}
	defer resetGVK(obj, obj.GetObjectKind().GroupVersionKind())
	po := client.SubResourcePatchOptions{}
	po.ApplyOptions(opts)
	body := obj
	if po.SubResourceBody != nil {
		body = po.SubResourceBody
	}
	return s.c.patch(body, patch, true, slices.Contains(po.DryRun, metav1.DryRunAll))
}

func (s *subResource) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return s.unsupported("apply")
}
