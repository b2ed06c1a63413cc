package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// lines is a logr sink's output, safe for concurrent writers.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, prefix+" "+args)
}

func (l *lines) find(sub ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.all {
		ok := true
		for _, p := range sub {
			ok = ok && strings.Contains(s, p)
		}
		if ok {
			return s
		}
	}
	return ""
}

// TestClusterAPIReplacesWhenTheProviderRefusesAnIgnoredChange: a
// MachineDeployment (2) whose ExtensionConfig ignores
// infrastructure.spec.flavour gets a new infrastructure template with
// another flavour, under Cluster API v1.14's own managers, while the
// provider makes spec.flavour immutable (a validating admission policy
// here, a webhook in a real provider). Cluster API's MachineSet controller
// writes an accepted template change to each infrastructure machine after
// moving it to the new MachineSet, without a dry run: had the extension
// accepted, the write would fail on every retry and the Machines would
// wait for ever, neither updated nor replaced. The extension dry-runs
// that write first and declines, naming the provider's refusal, and
// Cluster API replaces the machines: new names, the new flavour, none
// left updating.
func TestClusterAPIReplacesWhenTheProviderRefusesAnIgnoredChange(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", e2eFrom)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	md := clusterapi.MachineDeploymentObjects("default", "demo", "md", 2, e2eFrom)
	tmpl := md[1].(*unstructured.Unstructured)
	require.NoError(t, unstructured.SetNestedField(tmpl.Object, "small", "spec", "template", "spec", "flavour"))
	require.NoError(t, clusterapi.Create(ctx, c, md...))
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	var before map[string]clusterv1.Machine
	waitUntil(t, 4*time.Minute, "machines provisioned", func() (bool, string, error) {
		var err error
		before, err = machinesBy(t, c, mdLabel)
		return err == nil && settled(before, 2, e2eFrom), fmt.Sprintf("machines %v; provider %v", slices.Sorted(maps.Keys(before)), h.Provider.Errors()), err
	})

	// The provider's rule: spec.flavour never changes on a machine.
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "flavour-immutable"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: new(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{clusterapi.InfraGroup}, APIVersions: []string{"*"}, Resources: []string{"testmachines"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `(has(object.spec.flavour) ? object.spec.flavour : "") == (has(oldObject.spec.flavour) ? oldObject.spec.flavour : "")`,
				Message:    "spec.flavour is immutable",
			}},
		},
	}
	require.NoError(t, c.Create(ctx, policy))
	require.NoError(t, c.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flavour-immutable"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}))
	some := before[slices.Sorted(maps.Keys(before))[0]]
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(clusterapi.InfraMachineGVK)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: some.Spec.InfrastructureRef.Name}, probe))
	flavour, _, _ := unstructured.NestedString(probe.Object, "spec", "flavour")
	require.Equal(t, "small", flavour, "the machines run the template's flavour")
	require.NoError(t, unstructured.SetNestedField(probe.Object, "large", "spec", "flavour"))
	waitUntil(t, 2*time.Minute, "the policy takes effect", func() (bool, string, error) {
		err := c.Update(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprintf("dry-run update: %v", err), nil
	})

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	logs := &lines{}
	e2eExtensionServe(t, h, dir, testcerts.FreePort(t), reg, events.NewFakeRecorder(1000), e2eTo+"="+e2eImage, true,
		e2eExtras{log: funcr.New(logs.add, funcr.Options{}),
			regOpts: []clusterapi.RegisterOption{clusterapi.WithExtensionSettings(map[string]string{capi.SettingIgnore: "infrastructure.spec.flavour"})}})

	// A new template with the large flavour; the MachineDeployment uses it.
	large := tmpl.DeepCopy()
	large.SetName("md-1")
	large.SetResourceVersion("")
	large.SetUID("")
	require.NoError(t, unstructured.SetNestedField(large.Object, "large", "spec", "template", "spec", "flavour"))
	require.NoError(t, c.Create(ctx, large))
	var cur clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &cur))
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Template.Spec.InfrastructureRef.Name = "md-1"
	require.NoError(t, c.Patch(ctx, &cur, patch))

	var after map[string]clusterv1.Machine
	waitUntil(t, 6*time.Minute, "machines replaced", func() (bool, string, error) {
		var err error
		if after, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		for n := range after {
			if _, old := before[n]; old {
				return false, fmt.Sprintf("old machine %s still there; machines %v; provider %v", n, slices.Sorted(maps.Keys(after)), h.Provider.Errors()), nil
			}
		}
		return settled(after, 2, e2eFrom) && mdSettled(t, c, "md", 2), fmt.Sprintf("machines %v", slices.Sorted(maps.Keys(after))), nil
	})
	for n, m := range after {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(clusterapi.InfraMachineGVK)
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: m.Spec.InfrastructureRef.Name}, u))
		f, _, _ := unstructured.NestedString(u.Object, "spec", "flavour")
		require.Equal(t, "large", f, "%s runs the new template", n)
	}
	d := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	require.GreaterOrEqual(t, d["CanUpdateMachineSet/decline"], 1.0, "%v", d)
	require.Zero(t, d["CanUpdateMachineSet/accept"], "%v", d)
	require.NotEmpty(t, logs.find("declined", "would be refused (dry run)", "spec.flavour is immutable"), "the decline says why: %v", logs.all)
	require.Empty(t, h.Provider.Errors())
}
