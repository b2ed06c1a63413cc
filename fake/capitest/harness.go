package capitest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/upgradekit/upgradekit/fake/envtest"
)

// Harness is everything Cluster API needs to drive machines, running for
// one test: a real API server (Env), Cluster API's own managers
// (Managers) and the harness's infrastructure provider with a simulated
// kubelet per machine (Provider).
type Harness struct {
	Env      *envtest.Env
	Managers *Managers
	Provider *Provider
}

// NewForTest starts a Harness for t and stops it in t.Cleanup: envtest
// (fake/envtest.StartForTest, which skips t when the assets are missing
// and envtest.SkipEnvVar is set), the infrastructure CRDs, the three
// managers with DefaultFeatureGates (StartForTest) and the provider with
// opts. When t fails, the provider's errors and the end of each
// manager's log are logged.
func NewForTest(t testing.TB, opts ...ProviderOption) *Harness {
	t.Helper()
	env := envtest.StartForTest(t)
	if err := InstallInfrastructure(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	m := StartForTest(t, env)
	p, err := StartProvider(env.Client, opts...)
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
func InstallInfrastructure(ctx context.Context, env *envtest.Env) error {
	_, err := crenvtest.InstallCRDs(env.Config, crenvtest.CRDInstallOptions{CRDs: InfrastructureCRDs(), MaxTime: time.Minute})
	if err != nil {
		return fmt.Errorf("capitest: installing the infrastructure CRDs: %w", err)
	}
	return ctx.Err()
}

// RegisterExtension registers a runtime extension the way a user does:
// an ExtensionConfig named name whose client config is url and the CA
// bundle that signed the extension's serving certificate. It returns once
// Cluster API's ExtensionConfig controller has discovered the extension's
// handlers (their names, "<handler>.<name>"), or with an error naming
// the ExtensionConfig's conditions when ctx ends first.
func RegisterExtension(ctx context.Context, c client.Client, name, url string, caBundle []byte) ([]string, error) {
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"clientConfig": map[string]any{"url": url, "caBundle": caBundle}},
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
