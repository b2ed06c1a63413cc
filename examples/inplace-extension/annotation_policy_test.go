package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/simulator"
)

// annotationPolicy builds deploy/annotation-policy with kustomize.
func annotationPolicy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	fs := inMemory(t, "deploy/annotation-policy", "/policy", "kustomization.yaml", "policy.yaml")
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/policy")
	require.NoError(t, err)
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// TestAnnotationPolicy applies deploy/annotation-policy on a real API
// server: a user who may patch Machines, KubeadmConfigs and infrastructure
// machines (RBAC) but is not Cluster API is denied setting or changing the
// update-in-progress and pending-hooks annotations on each, and allowed
// other annotations and removing them; Cluster API's service accounts are
// allowed.
func TestAnnotationPolicy(t *testing.T) {
	ctx := t.Context()
	cl := simulator.NewCluster("demo")
	env := apiserver.StartForTest(t, apiserver.WithCRDs(cl.InfrastructureCRD()))
	admin := env.Client

	// The objects, as they are before an in-place update.
	infraGVK := cl.InfrastructureCRD().Spec.Group
	objs := map[string]func() client.Object{
		"Machine": func() client.Object {
			return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m-0"},
				Spec: clusterv1.MachineSpec{ClusterName: "demo", Bootstrap: clusterv1.Bootstrap{DataSecretName: new("s")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGVK, Kind: simulator.DockerMachine.Kind, Name: "m-0"}}}
		},
		"KubeadmConfig": func() client.Object {
			return &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m-0"}}
		},
		simulator.DockerMachine.Kind: func() client.Object {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(simulator.DockerMachine.APIVersion)
			u.SetKind(simulator.DockerMachine.Kind)
			u.SetNamespace("default")
			u.SetName("m-0")
			return u
		},
	}
	for _, o := range objs {
		require.NoError(t, admin.Create(ctx, o()))
	}

	// RBAC lets both identities patch all three: what decides is the policy.
	const mallory = "mallory"
	capiManagers := []string{"system:serviceaccount:capi-system:capi-manager",
		"system:serviceaccount:capi-kubeadm-control-plane-system:capi-kubeadm-control-plane-manager"}
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "patch-machines"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"cluster.x-k8s.io"}, Resources: []string{"machines"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{"bootstrap.cluster.x-k8s.io"}, Resources: []string{"kubeadmconfigs"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{infraGVK}, Resources: []string{cl.InfrastructureCRD().Spec.Names.Plural}, Verbs: []string{"get", "patch", "update"}},
	}}))
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory},
		{Kind: rbacv1.ServiceAccountKind, Namespace: "capi-system", Name: "capi-manager"},
		{Kind: rbacv1.ServiceAccountKind, Namespace: "capi-kubeadm-control-plane-system", Name: "capi-kubeadm-control-plane-manager"}}
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "patch-machines"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "patch-machines"}}))
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		require.NoError(t, err)
		return c
	}
	annotate := func(c client.Client, kind, key string, value *string) error {
		obj := objs[kind]()
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		if value == nil {
			delete(a, key)
		} else {
			a[key] = *value
		}
		obj.SetAnnotations(a)
		return c.Patch(ctx, obj, patch)
	}

	for _, o := range annotationPolicy(t) {
		require.NoError(t, admin.Create(ctx, o), "%s %s", o.GetKind(), o.GetName())
	}
	m := as(mallory)
	// The API server loads the policy asynchronously.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := annotate(m, "Machine", clusterv1.UpdateInProgressAnnotation, new(""))
		if err != nil {
			require.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%v", err)
			break
		}
		require.NoError(t, annotate(admin, "Machine", clusterv1.UpdateInProgressAnnotation, nil)) // not yet enforced: undo
		require.True(t, time.Now().Before(deadline), "the policy is not enforced")
		time.Sleep(200 * time.Millisecond)
	}

	for kind := range objs {
		for _, key := range []string{clusterv1.UpdateInProgressAnnotation, runtimev1.PendingHooksAnnotation} {
			t.Run(kind+" "+key, func(t *testing.T) {
				err := annotate(m, kind, key, new("UpdateMachine"))
				require.Error(t, err, "a user who is not Cluster API sets %s", key)
				require.Contains(t, err.Error(), "only Cluster API may set or change "+key+" (upgradekit in-place updates): mallory may not")
				require.NoError(t, annotate(m, kind, "team", new("ops")), "other annotations stay the user's")

				for _, sa := range capiManagers {
					require.NoError(t, annotate(as(sa), kind, key, new(sa[strings.LastIndex(sa, ":")+1:])), "%s sets %s", sa, key)
				}
				require.Error(t, annotate(m, kind, key, new("UpdateMachine")), "nor changed")
				require.NoError(t, annotate(m, kind, "team", new("dev")), "other annotations beside it stay the user's")
				require.NoError(t, annotate(m, kind, key, nil), "removing it is allowed")
				require.Error(t, annotate(admin, kind, key, new("")), "not even a cluster admin, while the binding is there")
			})
		}
	}
}
