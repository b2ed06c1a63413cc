package capi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestInfrastructureDryRun: a MachineSet's infrastructure template change
// accepted without being applied (upgradekit.io/ignore) is tried on the
// MachineSet's infrastructure machines, on a real API server, before the
// answer. A validating admission policy makes spec.flavour immutable, as
// a provider's webhook would: without the dry run the change is accepted
// and Cluster API's MachineSet controller would then fail to write it on
// every retry, leaving the Machine stuck between its MachineSets (issue
// 34 item 7); with it, the answer is a decline naming the machine and the
// server's message. Nothing is written by the dry runs. A role without
// patch on the kind is a Failure matching ErrDryRunForbidden, and an API
// server that answers 503 a Failure, not a decline.
func TestInfrastructureDryRun(t *testing.T) {
	ctx := t.Context()
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.36.1").MachineDeployment("md", 2, "v1.36.1")
	env := apiserver.StartForTest(t, apiserver.WithCRDs(cl.InfrastructureCRD()))
	admin := env.Client
	require.NoError(t, cl.Apply(ctx, admin))

	var sets clusterv1.MachineSetList
	require.NoError(t, admin.List(ctx, &sets, client.InNamespace(cl.Namespace())))
	require.Len(t, sets.Items, 1)
	ms := sets.Items[0]
	var machines clusterv1.MachineList
	require.NoError(t, admin.List(ctx, &machines, client.InNamespace(cl.Namespace()), client.MatchingLabels{clusterv1.MachineSetNameLabel: ms.Name}))
	require.Len(t, machines.Items, 2)
	infraGVK := schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Kind: "DockerMachine"}
	infraOf := func(m clusterv1.Machine) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(infraGVK)
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, u))
		return u
	}
	// The machines run flavour "small", as their template said.
	image, _, _ := unstructured.NestedString(infraOf(machines.Items[0]).Object, "spec", "customImage")
	require.NotEmpty(t, image)
	for _, m := range machines.Items {
		u := infraOf(m)
		require.NoError(t, unstructured.SetNestedField(u.Object, "small", "spec", "flavour"))
		require.NoError(t, admin.Update(ctx, u))
	}

	template := func(flavour string) runtime.RawExtension {
		b, err := json.Marshal(map[string]any{"apiVersion": infraGVK.GroupVersion().String(), "kind": "DockerMachineTemplate",
			"metadata": map[string]any{"name": "md-" + flavour, "namespace": ms.Namespace},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"customImage": image, "flavour": flavour}}}})
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	desiredMS := ms.DeepCopy()
	desiredMS.Spec.Template.Spec.InfrastructureRef.Name = "md-large"
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: map[string]string{capi.SettingIgnore: "infrastructure.spec.flavour"}},
		Current:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms, InfrastructureMachineTemplate: template("small")},
		Desired:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *desiredMS, InfrastructureMachineTemplate: template("large")},
	}
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	answer := func(t *testing.T, opts ...extOpt) (capi.Answer, error) {
		t.Helper()
		ext, err := capi.NewExtension(strategy.Updaters(kubeadm), extensionOpts(opts...))
		require.NoError(t, err)
		return ext.AnswerCanUpdateMachineSet(ctx, req)
	}
	versions := func() map[string]string {
		out := map[string]string{}
		for _, m := range machines.Items {
			u := infraOf(m)
			f, _, _ := unstructured.NestedString(u.Object, "spec", "flavour")
			out[u.GetName()] = u.GetResourceVersion() + "/" + f
		}
		return out
	}
	before := versions()

	t.Run("the provider takes the write: accepted", func(t *testing.T) {
		a, err := answer(t, withInfrastructureDryRun(admin))
		require.NoError(t, err)
		require.True(t, a.Accept, a.Message)
		require.JSONEq(t, `[{"op":"replace","path":"/spec/template/spec/flavour","value":"large"}]`, string(a.InfrastructurePatch.Patch))
		require.Equal(t, before, versions(), "a dry run writes nothing")
	})

	// The provider makes spec.flavour immutable, as its webhook would.
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "flavour-immutable"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: new(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{infraGVK.Group}, APIVersions: []string{"*"}, Resources: []string{"dockermachines"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `(has(object.spec.flavour) ? object.spec.flavour : "") == (has(oldObject.spec.flavour) ? oldObject.spec.flavour : "")`,
				Message:    "spec.flavour is immutable",
			}},
		},
	}
	require.NoError(t, admin.Create(ctx, policy))
	require.NoError(t, admin.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flavour-immutable"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}))
	// The API server loads policies asynchronously: wait until it refuses.
	probe := infraOf(machines.Items[0])
	require.NoError(t, unstructured.SetNestedField(probe.Object, "huge", "spec", "flavour"))
	require.Eventually(t, func() bool {
		return apierrors.IsInvalid(admin.Update(ctx, probe.DeepCopy(), client.DryRunAll))
	}, 2*time.Minute, 200*time.Millisecond, "the policy takes effect")

	t.Run("without the dry run: accepted, and Cluster API's write would fail", func(t *testing.T) {
		a, err := answer(t)
		require.NoError(t, err)
		require.True(t, a.Accept, "what main answered before WithInfrastructureDryRun: %s", a.Message)
	})

	t.Run("the provider refuses the write: declined", func(t *testing.T) {
		a, err := answer(t, withInfrastructureDryRun(admin))
		require.NoError(t, err)
		require.False(t, a.Accept)
		// Either machine's refusal may come first; the others are stopped.
		require.Regexp(t, `^cannot update in place: Cluster API's write of the new template to DockerMachine default/demo-md-[01] would be refused \(dry run\): `, a.Message)
		require.Contains(t, a.Message, "spec.flavour is immutable")
		require.Equal(t, []string{"infrastructure.spec.template.spec.flavour (Other)"}, a.Declined)
		require.Equal(t, before, versions(), "a dry run writes nothing")
	})

	t.Run("an unrelated change still passes the policy", func(t *testing.T) {
		same := *req
		same.Desired.InfrastructureMachineTemplate = template("small")
		same.Desired.MachineSet.Spec.Template.Spec.InfrastructureRef.Name = "md-small-2"
		ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{InfrastructureDryRun: admin})
		require.NoError(t, err)
		a, err := ext.AnswerCanUpdateMachineSet(ctx, &same)
		require.NoError(t, err)
		require.True(t, a.Accept, a.Message)
	})

	t.Run("no permission to patch the kind: Failure, not a decline", func(t *testing.T) {
		const user = "upgradekit-dryrun-test"
		require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{clusterv1.GroupVersion.Group}, Resources: []string{"machines"}, Verbs: []string{"list"}}}}))
		require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		limited, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		require.NoError(t, err)
		require.Eventually(t, func() bool { // the authorizer learns the binding
			return limited.List(ctx, &clusterv1.MachineList{}, client.InNamespace("default")) == nil
		}, 2*time.Minute, 200*time.Millisecond)
		_, err = answer(t, withInfrastructureDryRun(limited))
		require.ErrorIs(t, err, capi.ErrDryRunForbidden)
		require.ErrorContains(t, err, "grant patch on DockerMachine.infrastructure.cluster.x-k8s.io")
	})

	t.Run("the API server is unavailable: Failure, not a decline", func(t *testing.T) {
		ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		require.NoError(t, err)
		down := interceptor.NewClient(ww, interceptor.Funcs{Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return apierrors.NewServiceUnavailable("etcd is down")
		}})
		_, err = answer(t, withInfrastructureDryRun(down))
		require.Error(t, err)
		require.False(t, errors.Is(err, capi.ErrDryRunForbidden))
		require.ErrorContains(t, err, "transient: Cluster API asks again")
		require.True(t, apierrors.IsServiceUnavailable(errors.Unwrap(err)) || apierrors.IsServiceUnavailable(err), "%v", err)
	})
}
