package clusterapi

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// Harness is everything Cluster API needs to drive machines, running for
// one test: a real API server (Env), Cluster API's own managers
// (Managers) and the harness's infrastructure provider with a simulated
// kubelet per machine (Provider).
type Harness struct {
	Env      *apiserver.Env
	Managers *Managers
	Provider *Provider
}

// NewForTest starts a Harness for t and stops it in t.Cleanup: envtest
// (fake/apiserver.StartForTest, which skips t when the assets are missing,
// unless apiserver.RequireEnvVar is set), the infrastructure CRDs, the three
// managers with DefaultFeatureGates (StartForTest) and the provider with
// WithEtcd (envtest's etcd binary, for stacked etcd control planes) and
// opts. When t fails, the provider's errors and the end of each
// manager's log are logged.
func NewForTest(t testing.TB, opts ...ProviderOption) *Harness {
	t.Helper()
	env := apiserver.StartForTest(t)
	if err := InstallInfrastructure(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	m := StartForTest(t, env)
	p, err := StartProvider(env.Client, append([]ProviderOption{WithEtcd(filepath.Join(env.AssetsDir, "etcd"))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, err := range p.Errors() {
				t.Logf("provider: %v", err)
			}
		}
		if err := p.Stop(); err != nil {
			t.Errorf("stopping the provider: %v", err)
		}
	})
	return &Harness{Env: env, Managers: m, Provider: p}
}

// InstallInfrastructure installs InfrastructureCRDs in env and waits
// until they are served.
func InstallInfrastructure(ctx context.Context, env *apiserver.Env) error {
	_, err := crenvtest.InstallCRDs(env.Config, crenvtest.CRDInstallOptions{CRDs: InfrastructureCRDs(), MaxTime: time.Minute})
	if err != nil {
		return fmt.Errorf("capitest: installing the infrastructure CRDs: %w", err)
	}
	return ctx.Err()
}

// registrySettle is how long RegisterExtension waits after discovery for
// every manager's registry to hold the handlers (they requeue each second).
const registrySettle = 3 * time.Second

// RegisterOption configures the ExtensionConfig RegisterExtension creates.
type RegisterOption func(*registration)

type registration struct {
	settings map[string]string
}

// WithExtensionSettings sets the ExtensionConfig's spec.settings, which
// Cluster API sends with every call to the extension's hooks. They are in
// the ExtensionConfig from its creation: a change made later reaches each
// manager's registry only when its ExtensionConfig controller next
// reconciles, so a rollout started meanwhile may be asked with the old
// ones.
func WithExtensionSettings(settings map[string]string) RegisterOption {
	return func(r *registration) { r.settings = settings }
}

// RegisterExtension registers a runtime extension the way a user does:
// an ExtensionConfig named name whose client config is url and the CA
// bundle that signed the extension's serving certificate. It returns once
// Cluster API's ExtensionConfig controller has discovered the extension's
// handlers (their names, "<handler>.<name>") and the other managers have
// had time to load them (3 seconds), or with an error naming
// the ExtensionConfig's conditions when ctx ends first.
func RegisterExtension(ctx context.Context, c client.Client, name, url string, caBundle []byte, opts ...RegisterOption) ([]string, error) {
	var r registration
	for _, o := range opts {
		if o != nil {
			o(&r)
		}
	}
	spec := map[string]any{"clientConfig": map[string]any{"url": url, "caBundle": caBundle}}
	if len(r.settings) > 0 {
		settings := map[string]any{}
		for k, v := range r.settings {
			settings[k] = v
		}
		spec["settings"] = settings
	}
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	if err := c.Create(ctx, ec); err != nil {
		return nil, fmt.Errorf("capitest: creating ExtensionConfig %s: %w", name, err)
	}
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ec), ec); err != nil {
			return nil, fmt.Errorf("capitest: ExtensionConfig %s: %w", name, err)
		}
		hs, _, _ := unstructured.NestedSlice(ec.Object, "status", "handlers")
		if len(hs) > 0 {
			// Every other manager's ExtensionConfig controller retries each
			// second until it sees the Discovered condition, and only then
			// puts the handlers in its own registry; a change made before
			// that is rolled out as if there were no extension (found with
			// KubeadmControlPlane, which scaled a machine down instead).
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("capitest: ExtensionConfig %s: %w", name, ctx.Err())
			case <-time.After(registrySettle):
			}
			var names []string
			for _, h := range hs {
				if m, ok := h.(map[string]any); ok {
					n, _ := m["name"].(string)
					names = append(names, n)
				}
			}
			return names, nil
		}
		select {
		case <-ctx.Done():
			conds, _, _ := unstructured.NestedSlice(ec.Object, "status", "conditions")
			return nil, fmt.Errorf("capitest: ExtensionConfig %s: no handlers discovered (conditions: %v): %w", name, conds, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitForRollout waits until Cluster API reports the MachineDeployment
// namespace/name rolled out at version: its status caught up with its
// spec, every replica up to date and available, and each of its Machines
// running at version with a Node, up to date by Cluster API's own
// condition and not being updated. It returns those Machines by name, or
// an error saying what was still missing when ctx ended.
func WaitForRollout(ctx context.Context, c client.Reader, namespace, name, version string) (map[string]clusterv1.Machine, error) {
	for {
		ms, why, err := rolledOut(ctx, c, namespace, name, version)
		if err != nil {
			return nil, err
		}
		if why == "" {
			return ms, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("capitest: MachineDeployment %s/%s at %s: %s: %w", namespace, name, version, why, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rolledOut says why the rollout is not done yet ("" when it is).
func rolledOut(ctx context.Context, c client.Reader, namespace, name, version string) (map[string]clusterv1.Machine, string, error) {
	var md clusterv1.MachineDeployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &md); err != nil {
		return nil, "", fmt.Errorf("capitest: MachineDeployment %s/%s: %w", namespace, name, err)
	}
	want := ptr.Deref(md.Spec.Replicas, 1)
	st := md.Status
	if st.ObservedGeneration != md.Generation {
		return nil, "status not observed yet", nil
	}
	if ptr.Deref(st.Replicas, -1) != want || ptr.Deref(st.UpToDateReplicas, -1) != want || ptr.Deref(st.AvailableReplicas, -1) != want {
		return nil, fmt.Sprintf("replicas %d, up to date %d, available %d of %d", ptr.Deref(st.Replicas, 0), ptr.Deref(st.UpToDateReplicas, 0), ptr.Deref(st.AvailableReplicas, 0), want), nil
	}
	var list clusterv1.MachineList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: name}); err != nil {
		return nil, "", fmt.Errorf("capitest: Machines of %s/%s: %w", namespace, name, err)
	}
	if int32(len(list.Items)) != want {
		return nil, fmt.Sprintf("%d Machines, want %d", len(list.Items), want), nil
	}
	ms := map[string]clusterv1.Machine{}
	for _, m := range list.Items {
		switch {
		case m.DeletionTimestamp != nil:
			return nil, "Machine " + m.Name + " is being deleted", nil
		case m.Spec.Version != version:
			return nil, "Machine " + m.Name + " is at " + m.Spec.Version, nil
		case !m.Status.NodeRef.IsDefined() || m.Status.Phase != string(clusterv1.MachinePhaseRunning):
			return nil, "Machine " + m.Name + " is " + m.Status.Phase, nil
		case !conditions.IsTrue(&m, clusterv1.MachineUpToDateCondition) || conditions.IsTrue(&m, clusterv1.MachineUpdatingCondition):
			return nil, "Machine " + m.Name + " is not up to date yet", nil
		}
		if _, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]; updating {
			return nil, "Machine " + m.Name + " is being updated", nil
		}
		ms[m.Name] = m
	}
	return ms, "", nil
}
