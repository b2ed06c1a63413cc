package memclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/simulator/internal/memclient"
)

// outcome is what a case observed: each step's error, by API status
// reason, and facts about the objects (resourceVersion changes, not
// values: each server counts its own).
type outcome struct {
	Errs  []string
	Facts map[string]string
}

type recorder struct {
	t *testing.T
	o outcome
}

// err records err's API reason and HTTP status code ("" for none, "error"
// for an error that is no API status: so an API error without a reason
// cannot match any other error).
func (r *recorder) err(err error) {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		r.o.Errs = append(r.o.Errs, "")
	case errors.As(err, &status):
		r.o.Errs = append(r.o.Errs, fmt.Sprintf("%s %d", status.Status().Reason, status.Status().Code))
	default:
		r.o.Errs = append(r.o.Errs, "error")
	}
}

func (r *recorder) fact(k string, v any) {
	if r.o.Facts == nil {
		r.o.Facts = map[string]string{}
	}
	r.o.Facts[k] = fmt.Sprint(v)
}

// must fails the case on a step that every server must accept.
func (r *recorder) must(err error) {
	r.t.Helper()
	require.NoError(r.t, err)
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "x"}}, Data: data}
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a"}},
		Spec:   corev1.NodeSpec{ProviderID: "docker:////" + name},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.0"}}}
}

func machine(ns, name string) *clusterv1.Machine {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	m.Spec = clusterv1.MachineSpec{ClusterName: "c", Version: "v1.35.0",
		Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap")},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: name}}
	m.Status.Phase = "Running"
	return m
}

type conformanceCase struct {
	name string
	run  func(ctx context.Context, r *recorder, c client.Client, ns string)
	// fakeDiffers says why controller-runtime's fake client (as the
	// simulator configured it before) does not agree with the real API
	// server here; empty: it agrees.
	fakeDiffers string
}

func conformanceCases() []conformanceCase {
	return []conformanceCase{
		{name: "get missing", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nope"}, &corev1.ConfigMap{}))
			r.err(c.Get(ctx, client.ObjectKey{Name: ns + "-nope"}, &corev1.Node{}))
		}},
		{name: "create sets uid, resourceVersion, creationTimestamp; twice is AlreadyExists", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "a", map[string]string{"k": "v"})
			r.err(c.Create(ctx, cm))
			r.fact("uid set", cm.UID != "")
			r.fact("rv set", cm.ResourceVersion != "")
			r.fact("created set", !cm.CreationTimestamp.IsZero())
			r.fact("typemeta", cm.APIVersion+"/"+cm.Kind)
			r.err(c.Create(ctx, configMap(ns, "a", nil)))
		}, fakeDiffers: "no uid and no creationTimestamp on create"},
		{name: "create with resourceVersion or without name", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "b", nil)
			cm.ResourceVersion = "5"
			r.err(c.Create(ctx, cm))
			r.err(c.Create(ctx, configMap(ns, "", nil)))
		}, fakeDiffers: "a Create with resourceVersion is a BadRequest, not kube-apiserver's 500 without a reason"},
		{name: "update: stale resourceVersion is a conflict, no-op keeps it, change bumps it", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "c", map[string]string{"k": "v"})
			r.must(c.Create(ctx, cm))
			rv0 := cm.ResourceVersion
			stale := cm.DeepCopy()
			r.err(c.Update(ctx, cm))
			r.fact("no-op update keeps rv", cm.ResourceVersion == rv0)
			cm.Data["k"] = "w"
			r.err(c.Update(ctx, cm))
			r.fact("update bumps rv", cm.ResourceVersion != rv0)
			stale.Data["k"] = "stale"
			r.err(c.Update(ctx, stale))
			var got corev1.ConfigMap
			r.must(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
			r.fact("stored", got.Data["k"])
			r.fact("get rv equals update's", got.ResourceVersion == cm.ResourceVersion)
			r.fact("typemeta", got.APIVersion+"/"+got.Kind)
		}, fakeDiffers: "a no-op update bumps resourceVersion"},
		{name: "update without resourceVersion: built-in yes, custom resource no; missing is NotFound", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "d", map[string]string{"k": "v"})
			r.must(c.Create(ctx, cm))
			cm.ResourceVersion = ""
			cm.Data["k"] = "w"
			r.err(c.Update(ctx, cm))
			m := machine(ns, "d")
			r.must(c.Create(ctx, m))
			m.ResourceVersion = ""
			m.Spec.Version = "v1.36.0"
			r.err(c.Update(ctx, m))
			r.err(c.Update(ctx, configMap(ns, "missing", nil)))
		}, fakeDiffers: "a custom resource's update without resourceVersion is a Conflict, not Invalid"},
		{name: "status subresource of a built-in kind (Node)", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			n := node(ns + "-n")
			r.must(c.Create(ctx, n))
			r.fact("create keeps a Node's status", n.Status.NodeInfo.KubeletVersion)
			n.Spec.Unschedulable = true
			n.Status.NodeInfo.KubeletVersion = "v9.9.9"
			r.err(c.Update(ctx, n))
			r.fact("update: spec", n.Spec.Unschedulable)
			r.fact("update: status kept", n.Status.NodeInfo.KubeletVersion)
			rv := n.ResourceVersion
			n.Labels["pool"] = "b"
			n.Spec.Unschedulable = false
			n.Status.NodeInfo.KubeletVersion = "v1.36.0"
			r.err(c.Status().Update(ctx, n))
			r.fact("status update: labels (a Node's legacy strategy writes them)", n.Labels["pool"])
			r.fact("status update: spec kept", n.Spec.Unschedulable)
			r.fact("status update: status", n.Status.NodeInfo.KubeletVersion)
			r.fact("status update bumps rv", n.ResourceVersion != rv)
			var got corev1.Node
			r.must(c.Get(ctx, client.ObjectKey{Name: n.Name}, &got))
			r.fact("stored", fmt.Sprint(got.Labels["pool"], got.Spec.Unschedulable, got.Status.NodeInfo.KubeletVersion))
			r.err(c.Status().Update(ctx, node(ns+"-missing")))
		}, fakeDiffers: "a Node's status update does not write its labels"},
		{name: "status subresource of a custom resource (Machine); none on a ConfigMap", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			m := machine(ns, "e")
			r.must(c.Create(ctx, m))
			r.fact("create drops status", m.Status.Phase)
			m.Status.Phase = "Provisioned"
			m.Labels = map[string]string{"a": "b"}
			r.err(c.Status().Update(ctx, m))
			r.fact("status update: labels", m.Labels)
			m.Spec.Version = "v1.36.0"
			m.Status.Phase = "Deleting"
			r.err(c.Update(ctx, m))
			r.fact("machine", m.Spec.Version+" "+m.Status.Phase)
			cm := configMap(ns, "e", nil)
			r.must(c.Create(ctx, cm))
			r.err(c.Status().Update(ctx, cm))
		}, fakeDiffers: "create keeps the status of a custom resource"},
		{name: "patches: merge, JSON, strategic; optimistic lock", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			n := node(ns + "-p")
			r.must(c.Create(ctx, n))
			rv := n.ResourceVersion
			r.err(c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"1"}}}`))))
			var got corev1.Node
			r.must(c.Get(ctx, client.ObjectKey{Name: n.Name}, &got))
			r.fact("merge", got.Annotations["a"])
			r.fact("merge bumps rv", got.ResourceVersion != rv)
			r.err(c.Patch(ctx, &got, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/annotations/b","value":"2"}]`))))
			r.fact("json", got.Annotations["b"])
			r.err(c.Status().Patch(ctx, &got, client.RawPatch(types.StrategicMergePatchType,
				[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]},"metadata":{"labels":{"pool":"z"}}}`))))
			r.fact("strategic status", fmt.Sprint(len(got.Status.Conditions), got.Labels["pool"]))
			stale := got.DeepCopy()
			stale.ResourceVersion = rv
			base := stale.DeepCopy()
			stale.Annotations["c"] = "3"
			r.err(c.Patch(ctx, stale, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})))
			r.err(c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-missing"}}, client.RawPatch(types.MergePatchType, []byte(`{}`))))
			m := machine(ns, "p")
			r.must(c.Create(ctx, m))
			r.err(c.Patch(ctx, m, client.RawPatch(types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`))))
			r.err(c.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`))))
			r.fact("machine labels", m.Labels["a"])
		}, fakeDiffers: "a strategic merge patch of a custom resource is applied, not refused with 415"},
		{name: "delete: preconditions, missing, finalizers", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
			r.must(c.Create(ctx, pod))
			r.err(c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: new(types.UID("not-it"))}))
			r.err(c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}))
			r.err(c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
			r.err(c.Delete(ctx, pod))
			cm := configMap(ns, "f", nil)
			cm.Finalizers = []string{"example.com/keep"}
			r.must(c.Create(ctx, cm))
			r.err(c.Delete(ctx, cm, client.Preconditions{ResourceVersion: new("1")}))
			r.err(c.Delete(ctx, cm))
			var got corev1.ConfigMap
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
			r.fact("deletionTimestamp set", got.DeletionTimestamp != nil)
			got.Finalizers = nil
			r.err(c.Update(ctx, &got))
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
		}, fakeDiffers: "a Delete's uid precondition is not checked"},
		{name: "list: namespace, labels, order, TypeMeta", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			for _, name := range []string{"m-10", "m-2", "m-1"} {
				r.must(c.Create(ctx, configMap(ns, name, nil)))
			}
			other := configMap(ns, "z", nil)
			other.Labels = map[string]string{"app": "y"}
			r.must(c.Create(ctx, other))
			var l corev1.ConfigMapList
			r.err(c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": "x"}))
			var names []string
			for _, cm := range l.Items {
				names = append(names, cm.Name+"|"+cm.APIVersion+cm.Kind)
			}
			r.fact("names", names)
			r.fact("list typemeta", l.APIVersion+"/"+l.Kind)
			var u unstructured.UnstructuredList
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMapList")
			r.err(c.List(ctx, &u, client.InNamespace(ns), client.HasLabels{"app"}))
			names = nil
			for _, cm := range u.Items {
				names = append(names, cm.GetName()+"|"+cm.GetAPIVersion()+"/"+cm.GetKind())
			}
			r.fact("unstructured names", names)
		}},
		{name: "field selectors, cluster scope, metadata-only reads", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			for _, name := range []string{"f-1", "f-2"} {
				r.must(c.Create(ctx, configMap(ns, name, nil)))
			}
			var l corev1.ConfigMapList
			r.err(c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{"metadata.name": "f-2"}))
			var names []string
			for _, cm := range l.Items {
				names = append(names, cm.Name)
			}
			r.fact("by name", names)
			n := node(ns + "-scope")
			n.Namespace = ns
			r.err(c.Create(ctx, n))
			r.fact("a Node has no namespace", n.Namespace == "")
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n.Name}, &corev1.Node{}))
			var nodes corev1.NodeList
			r.err(c.List(ctx, &nodes, client.InNamespace(ns), client.MatchingFields{"metadata.name": n.Name}))
			r.fact("nodes listed in a namespace", len(nodes.Items))
			p := &metav1.PartialObjectMetadata{}
			p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "f-1"}, p))
			r.fact("metadata", p.Name+" "+p.Labels["app"]+" "+p.APIVersion+"/"+p.Kind)
		}, fakeDiffers: "field selectors need an index, and a Node created with a namespace keeps it"},
		{name: "unstructured and typed reads of one object", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			m := machine(ns, "u")
			r.must(c.Create(ctx, m))
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(clusterv1.GroupVersion.String())
			u.SetKind("Machine")
			r.err(c.Get(ctx, client.ObjectKeyFromObject(m), u))
			v, _, _ := unstructured.NestedString(u.Object, "spec", "version")
			r.fact("unstructured", v+" "+u.GetAPIVersion()+"/"+u.GetKind())
			r.must(unstructured.SetNestedField(u.Object, "v1.36.0", "spec", "version"))
			r.err(c.Update(ctx, u))
			var typed clusterv1.Machine
			r.err(c.Get(ctx, client.ObjectKeyFromObject(m), &typed))
			r.fact("typed", typed.Spec.Version+" "+typed.APIVersion+"/"+typed.Kind)
			r.fact("same rv", typed.ResourceVersion == u.GetResourceVersion())
		}},
		{name: "dry run writes nothing", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "g", map[string]string{"k": "v"})
			r.err(c.Create(ctx, cm.DeepCopy(), client.DryRunAll))
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}))
			r.must(c.Create(ctx, cm))
			r.err(c.Create(ctx, configMap(ns, "g", nil), client.DryRunAll))
			changed := cm.DeepCopy()
			changed.Data["k"] = "w"
			r.err(c.Update(ctx, changed, client.DryRunAll))
			r.err(c.Delete(ctx, cm.DeepCopy(), client.DryRunAll))
			var got corev1.ConfigMap
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
			r.fact("stored", got.Data["k"])
			r.fact("rv kept", got.ResourceVersion == cm.ResourceVersion)
		}, fakeDiffers: "a dry-run Create of an existing object succeeds"},
		{name: "a patch cannot rename an object or move it to another namespace, apiVersion or kind", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "h", map[string]string{"k": "v"})
			r.must(c.Create(ctx, cm))
			for _, p := range []client.Patch{
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"name":"h2"}}`)),
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"namespace":"default"}}`)),
				client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/name"}]`)),
				client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata","value":null}]`)),
				client.RawPatch(types.MergePatchType, []byte(`{"kind":"Secret"}`)),
				client.RawPatch(types.MergePatchType, []byte(`{"apiVersion":"v2"}`)),
			} {
				r.err(c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h"}}, p))
			}
			var got corev1.ConfigMap
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
			r.fact("stored", got.Name+" "+got.Namespace+" "+got.Data["k"])
			r.fact("rv kept", got.ResourceVersion == cm.ResourceVersion)
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "h2"}, &corev1.ConfigMap{}))
			m := machine(ns, "h")
			r.must(c.Create(ctx, m))
			r.err(c.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"kind":"MachineSet"}`))))
			r.err(c.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"name":"h2"}}`))))
			r.fact("machine", m.Name)
			n := node(ns + "-h")
			r.must(c.Create(ctx, n))
			r.err(c.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"name":"`+ns+`-h2"}}`))))
			r.err(c.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"namespace":"`+ns+`"}}`))))
			r.fact("node", fmt.Sprint(n.Name == ns+"-h", n.Namespace))
		}, fakeDiffers: "a patch may rename an object"},
		{name: "unstructured objects holding Go ints are sent as JSON", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
				"metadata": map[string]any{"namespace": ns, "name": "i", "labels": map[string]any{"a": "b"}},
				"spec": map[string]any{"terminationGracePeriodSeconds": 7, "containers": []any{
					map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}}}
			r.err(c.Create(ctx, u))
			u.Object["spec"].(map[string]any)["activeDeadlineSeconds"] = int32(9)
			r.err(c.Update(ctx, u))
			var got corev1.Pod
			r.err(c.Get(ctx, client.ObjectKeyFromObject(u), &got))
			r.fact("grace", *got.Spec.TerminationGracePeriodSeconds)
			r.fact("deadline", *got.Spec.ActiveDeadlineSeconds)
			m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": clusterv1.GroupVersion.String(), "kind": "Machine",
				"metadata": map[string]any{"namespace": ns, "name": "i"},
				"spec": map[string]any{"clusterName": "c", "minReadySeconds": 3,
					"bootstrap":         map[string]any{"dataSecretName": "b"},
					"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "i"}}}}
			r.err(c.Create(ctx, m))
			var gotM clusterv1.Machine
			r.err(c.Get(ctx, client.ObjectKeyFromObject(m), &gotM))
			if gotM.Spec.MinReadySeconds != nil {
				r.fact("minReadySeconds", *gotM.Spec.MinReadySeconds)
			}
		}},
		{name: "what of metadata a status write writes, per kind (Node, Pod, PodDisruptionBudget, Machine)", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "1234"}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}
			for _, o := range []client.Object{node(ns + "-s"), pod, pdb, machine(ns, "s")} {
				kind := fmt.Sprintf("%T", o)
				r.must(c.Create(ctx, o))
				key := client.ObjectKeyFromObject(o)
				o.SetLabels(map[string]string{"l": "update"})
				o.SetAnnotations(map[string]string{"a": "update"})
				o.SetFinalizers([]string{"example.com/update"})
				o.SetOwnerReferences(owner)
				r.err(c.Status().Update(ctx, o))
				r.fact(kind+" status update", fmt.Sprint(o.GetLabels(), o.GetAnnotations(), o.GetFinalizers(), len(o.GetOwnerReferences())))
				r.must(c.Get(ctx, key, o))
				r.err(c.Status().Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(
					`{"metadata":{"labels":{"l":"patch"},"annotations":{"a":"patch"},"finalizers":["example.com/patch"],"ownerReferences":null}}`))))
				r.fact(kind+" status patch", fmt.Sprint(o.GetLabels(), o.GetAnnotations(), o.GetFinalizers(), len(o.GetOwnerReferences())))
				r.must(c.Get(ctx, key, o))
				r.fact(kind+" stored", fmt.Sprint(o.GetLabels(), o.GetAnnotations(), o.GetFinalizers(), len(o.GetOwnerReferences())))
			}
		}, fakeDiffers: "a status write writes status only, whatever the kind"},
		{name: "PartialObjectMetadata cannot create or update", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			r.must(c.Create(ctx, configMap(ns, "pm", map[string]string{"k": "v"})))
			n := node(ns + "-pm")
			r.must(c.Create(ctx, n))
			p := &metav1.PartialObjectMetadata{}
			p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			r.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pm"}, p))
			p.Labels["new"] = "1"
			r.err(c.Update(ctx, p))
			pn := &metav1.PartialObjectMetadata{}
			pn.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
			r.must(c.Get(ctx, client.ObjectKey{Name: n.Name}, pn))
			r.err(c.Status().Update(ctx, pn))
			p.Name, p.ResourceVersion = "pm2", ""
			r.err(c.Create(ctx, p))
			var got corev1.ConfigMap
			r.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pm"}, &got))
			r.fact("stored", fmt.Sprint(got.Data, got.Labels))
			var gotN corev1.Node
			r.must(c.Get(ctx, client.ObjectKey{Name: n.Name}, &gotN))
			r.fact("node", gotN.Spec.ProviderID != "" && gotN.Status.NodeInfo.KubeletVersion != "")
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pm2"}, &got))
		}, fakeDiffers: "the fake client's errors are its own"},
		{name: "DeleteAllOf: in one namespace, in etcd's order; across namespaces is 405", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			for _, name := range []string{"d-2", "d-1", "keep"} {
				cm := configMap(ns, name, nil)
				if name == "keep" {
					cm.Labels["app"] = "y"
				}
				r.must(c.Create(ctx, cm))
			}
			r.err(c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.MatchingLabels{"app": "x"}))
			r.err(c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{"app": "x"}))
			var l corev1.ConfigMapList
			r.must(c.List(ctx, &l, client.InNamespace(ns)))
			var names []string
			for _, cm := range l.Items {
				names = append(names, cm.Name)
			}
			r.fact("left", names)
			n := node(ns + "-d")
			n.Labels["case"] = ns
			r.must(c.Create(ctx, n))
			r.err(c.DeleteAllOf(ctx, &corev1.Node{}, client.MatchingLabels{"case": ns}))
			r.err(c.Get(ctx, client.ObjectKeyFromObject(n), &corev1.Node{}))
		}, fakeDiffers: "DeleteAllOf without a namespace deletes across namespaces"},
		{name: "Update and Patch keep the TypeMeta the caller set", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "t", map[string]string{"k": "v"})
			r.must(c.Create(ctx, cm))
			cm.APIVersion, cm.Kind = "v1", "ConfigMap"
			cm.Data["k"] = "w"
			r.err(c.Update(ctx, cm))
			r.fact("update", cm.APIVersion+"/"+cm.Kind)
			r.err(c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"x"}}`))))
			r.fact("patch", cm.APIVersion+"/"+cm.Kind)
			n := node(ns + "-t")
			r.must(c.Create(ctx, n))
			n.APIVersion, n.Kind = "v1", "Node"
			n.Status.NodeInfo.KubeletVersion = "v1.36.0"
			r.err(c.Status().Update(ctx, n))
			r.fact("status update", n.APIVersion+"/"+n.Kind)
			r.err(c.Status().Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`))))
			r.fact("status patch", n.APIVersion+"/"+n.Kind)
			cm.APIVersion, cm.Kind = "", ""
			r.err(c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"y"}}`))))
			r.fact("patch without", cm.APIVersion+"/"+cm.Kind)
		}, fakeDiffers: "Update and Patch clear a typed object's TypeMeta"},
		{name: "dry-run Create answers what it would store", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "g-"}}
			r.err(c.Create(ctx, cm, client.DryRunAll))
			r.fact("name", len(cm.Name) > len("g-"))
			r.fact("uid", cm.UID != "")
			r.fact("created", !cm.CreationTimestamp.IsZero())
			r.fact("rv", cm.ResourceVersion)
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}))
			var l corev1.ConfigMapList
			r.must(c.List(ctx, &l, client.InNamespace(ns)))
			r.fact("stored", len(l.Items))
		}, fakeDiffers: "a dry-run Create fills in nothing"},
		{name: "no finalizer can be added to an object being deleted", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "fin", nil)
			cm.Finalizers = []string{"example.com/a"}
			r.must(c.Create(ctx, cm))
			r.must(c.Delete(ctx, cm))
			r.must(c.Get(ctx, client.ObjectKeyFromObject(cm), cm))
			cm.Finalizers = append(cm.Finalizers, "example.com/b")
			r.err(c.Update(ctx, cm))
			r.err(c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fin"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/c"]}}`))))
			var got corev1.ConfigMap
			r.must(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
			r.fact("finalizers", got.Finalizers)
			got.Finalizers = nil
			r.err(c.Update(ctx, &got))
			r.err(c.Get(ctx, client.ObjectKeyFromObject(cm), &got))
		}, fakeDiffers: "a finalizer can be added to an object being deleted"},
		{name: "list in etcd's key order across namespaces that prefix each other", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			r.must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-x"}}))
			for _, n := range []string{ns, ns + "-x"} {
				cm := configMap(n, "o", nil)
				cm.Labels["case"] = ns
				r.must(c.Create(ctx, cm))
			}
			var l corev1.ConfigMapList
			r.err(c.List(ctx, &l, client.MatchingLabels{"case": ns}))
			var names []string
			for _, cm := range l.Items {
				names = append(names, strings.TrimPrefix(cm.Namespace, ns)+"/"+cm.Name)
			}
			r.fact("order", names)
		}, fakeDiffers: "the fake client lists by namespace, then name"},
		{name: "a patch's field names are case-sensitive", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			cm := configMap(ns, "cs", nil)
			r.must(c.Create(ctx, cm))
			r.err(c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"Labels":{"x":"1"}},"Data":{"k":"v"}}`))))
			r.fact("labels", cm.Labels)
			r.fact("data", cm.Data)
		}},
		{name: "no name, or a namespaced kind without namespace, fails in the client", run: func(ctx context.Context, r *recorder, c client.Client, ns string) {
			r.err(c.Get(ctx, client.ObjectKey{Namespace: ns}, &corev1.ConfigMap{}))
			r.err(c.Update(ctx, configMap(ns, "", nil)))
			r.err(c.Status().Update(ctx, node("")))
			r.err(c.Delete(ctx, configMap(ns, "", nil)))
			r.err(c.Patch(ctx, configMap(ns, "", nil), client.RawPatch(types.MergePatchType, []byte(`{}`))))
			r.err(c.Create(ctx, configMap("", "no-namespace-"+ns, nil)))
		}, fakeDiffers: "the fake client's errors are its own"},
	}
}

// backend makes a client holding nothing but what the cases create.
type backend struct {
	name string
	c    client.Client
}

func TestConformance(t *testing.T) {
	env := apiserver.StartForTest(t)
	s := env.Scheme
	status := []client.Object{&corev1.Node{}, &corev1.Pod{}, &policyv1.PodDisruptionBudget{}, &clusterv1.Machine{}}
	mem, err := memclient.New(memclient.Options{Scheme: s, StatusSubresource: status})
	require.NoError(t, err)
	fake := crfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(status...).
		WithObjectTracker(clienttesting.NewObjectTracker(s, serializer.NewCodecFactory(s).UniversalDecoder())).Build()
	backends := []backend{{"kube-apiserver", env.Client}, {"memclient", mem}, {"crfake", fake}}

	ctx := context.Background()
	for i, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("conformance-%d", i)
			got := map[string]outcome{}
			for _, b := range backends {
				r := &recorder{t: t}
				require.NoError(t, b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}), b.name)
				tc.run(ctx, r, b.c, ns)
				got[b.name] = r.o
			}
			want := got["kube-apiserver"]
			require.Empty(t, cmp.Diff(want, got["memclient"]), "memclient (+) against kube-apiserver (-)")
			fakeDiff := cmp.Diff(want, got["crfake"])
			if tc.fakeDiffers == "" {
				require.Empty(t, fakeDiff, "controller-runtime's fake client (+) against kube-apiserver (-)")
			} else {
				require.NotEmpty(t, fakeDiff, "the fake client now agrees with the API server: %s no longer holds", tc.fakeDiffers)
			}
		})
	}
}

// TestNoAliasing: what a caller holds never aliases what is stored, in
// either direction.
func TestNoAliasing(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	seed := configMap("ns", "a", map[string]string{"k": "v"})
	c, err := memclient.New(memclient.Options{Scheme: s}, seed)
	require.NoError(t, err)
	ctx := context.Background()
	seed.Data["k"] = "changed after New"

	var got corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(seed), &got))
	require.Equal(t, "v", got.Data["k"])
	got.Data["k"] = "changed after Get"
	got.Labels["app"] = "changed after Get"

	var again corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(seed), &again))
	require.Equal(t, "v", again.Data["k"])
	require.Equal(t, "x", again.Labels["app"])

	again.Data["k"] = "w"
	require.NoError(t, c.Update(ctx, &again))
	again.Data["k"] = "changed after Update"
	var l corev1.ConfigMapList
	require.NoError(t, c.List(ctx, &l))
	require.Len(t, l.Items, 1)
	require.Equal(t, "w", l.Items[0].Data["k"])
	l.Items[0].Data["k"] = "changed after List"
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(seed), &got))
	require.Equal(t, "w", got.Data["k"])
}

// TestNoAliasingStatus: the status subresource's writes, which share
// parts between stored objects, hand out nothing shared.
func TestNoAliasingStatus(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	seed := node("n")
	seed.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	c, err := memclient.New(memclient.Options{Scheme: s, StatusSubresource: []client.Object{&corev1.Node{}}}, seed)
	require.NoError(t, err)
	ctx := context.Background()
	key := client.ObjectKey{Name: "n"}
	stored := func() *corev1.Node {
		var n corev1.Node
		require.NoError(t, c.Get(ctx, key, &n))
		return &n
	}

	n := stored()
	n.Status.Conditions[0].Status = corev1.ConditionFalse
	require.NoError(t, c.Status().Update(ctx, n))
	n.Status.Conditions[0].Reason = "changed after Status().Update"
	n.Labels["pool"] = "changed after Status().Update"
	require.Equal(t, corev1.ConditionFalse, stored().Status.Conditions[0].Status)
	require.Empty(t, stored().Status.Conditions[0].Reason)
	require.Equal(t, "a", stored().Labels["pool"])

	n = stored()
	n.Spec.Unschedulable = true
	n.Status.Conditions[0].Reason = "ignored by Update"
	require.NoError(t, c.Update(ctx, n))
	require.Empty(t, n.Status.Conditions[0].Reason, "Update answers with the stored status")
	n.Status.Conditions[0].Reason = "changed after Update"
	got := stored()
	require.True(t, got.Spec.Unschedulable)
	require.Empty(t, got.Status.Conditions[0].Reason)

	// The next status write must not reach into the object before it.
	before := stored()
	n = stored()
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "Other", Status: corev1.ConditionTrue})
	require.NoError(t, c.Status().Update(ctx, n))
	require.Len(t, stored().Status.Conditions, 2)
	require.Len(t, before.Status.Conditions, 1)
}

func TestErrors(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	_, err := memclient.New(memclient.Options{})
	require.ErrorIs(t, err, memclient.ErrInvalidOptions)
	_, err = memclient.New(memclient.Options{Scheme: s}, configMap("", "no-namespace", nil))
	require.ErrorIs(t, err, memclient.ErrInvalidOptions)
	_, err = memclient.New(memclient.Options{Scheme: s}, configMap("ns", "a", nil), configMap("ns", "a", nil))
	require.ErrorIs(t, err, memclient.ErrInvalidOptions)
	require.True(t, apierrors.IsAlreadyExists(err), "%v", err)

	c, err := memclient.New(memclient.Options{Scheme: s})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Watch(ctx, &corev1.ConfigMapList{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorIs(t, c.SubResource("eviction").Create(ctx, &corev1.Pod{}, &corev1.Pod{}), memclient.ErrUnsupported)
	require.ErrorIs(t, c.Patch(ctx, configMap("ns", "a", nil), client.RawPatch(types.ApplyPatchType, []byte(`{}`))), errors.ErrUnsupported)
	// A type the scheme does not know is an error, not a panic.
	type unknown struct{ corev1.ConfigMap }
	require.Error(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, &unknown{}))
}

// TestSeededResourceVersion: the revision counter moves past a seeded
// resourceVersion, so a stale copy holding it conflicts however many
// writes follow.
func TestSeededResourceVersion(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	seed := configMap("ns", "a", map[string]string{"k": "v"})
	seed.ResourceVersion = "3"
	c, err := memclient.New(memclient.Options{Scheme: s}, seed, configMap("ns", "b", nil))
	require.NoError(t, err)
	ctx := context.Background()
	var b corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "b"}, &b))
	require.Equal(t, "4", b.ResourceVersion)
	stale := seed.DeepCopy()
	var cur corev1.ConfigMap
	for _, v := range []string{"1", "2"} {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(seed), &cur))
		cur.Data["k"] = v
		require.NoError(t, c.Update(ctx, &cur))
	}
	stale.Data["k"] = "stale"
	require.True(t, apierrors.IsConflict(c.Update(ctx, stale)))
}
