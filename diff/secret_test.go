package diff_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestSecretsByNameWhateverTheOptions: values named like secrets are
// redacted in String and JSON whatever the schema, the case of the name
// or the options (WithoutDefaults included); ShowSecrets alone shows them.
// Each case failed on the main before this test: the patterns matched
// exact names on the schema's shape only.
func TestSecretsByNameWhateverTheOptions(t *testing.T) {
	const secret = "s3cr3t-value-0123456789"
	spec := func(s map[string]any) map[string]any { return map[string]any{"kind": "KubeadmConfig", "spec": s} }
	cases := []struct {
		name     string
		obj      diff.Object
		cur, des map[string]any
		opts     []diff.Option
		shown    string // a non-secret part that stays readable, if any
	}{
		{"a capitalised Password", diff.ObjectBootstrap,
			spec(map[string]any{"users": []any{map[string]any{"name": "ops", "Password": "old"}}}),
			spec(map[string]any{"users": []any{map[string]any{"name": "ops", "Password": secret}}}), nil, ""},
		{"adminPassword, WithoutDefaults", diff.ObjectBootstrap,
			spec(map[string]any{"adminPassword": "old"}), spec(map[string]any{"adminPassword": secret}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"file content, WithoutDefaults", diff.ObjectBootstrap,
			spec(map[string]any{"files": []any{map[string]any{"path": "/etc/x", "content": "old"}}}),
			spec(map[string]any{"files": []any{map[string]any{"path": "/etc/x", "content": secret}}}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"files as a map (schema-invalid)", diff.ObjectBootstrap,
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/x", "content": "old"}}}),
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/x", "content": secret}}}), nil, ""},
		{"a whole files map added", diff.ObjectBootstrap,
			spec(map[string]any{}),
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/added", "content": secret}}}), nil, "/etc/added"},
		{"apiserver extraArgs as a list", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "oidc-client-secret", "value": "old"}}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "oidc-client-secret", "value": secret}}}}}), nil, ""},
		{"apiserver extraArgs list added whole", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "audit-log-path", "value": "/var/log/audit.log"},
				map[string]any{"name": "oidc-client-secret", "value": secret}}}}}), nil, "/var/log/audit.log"},
		{"apiserver extraArgs as a map (v1beta1)", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{"oidc-client-secret": "old"}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{"oidc-client-secret": secret}}}}), nil, ""},
		{"apiserver extraEnvs by name", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "AWS_SECRET_ACCESS_KEY", "value": "old"}}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "AWS_SECRET_ACCESS_KEY", "value": secret}}}}}), nil, ""},
		{"etcd extraEnvs added whole", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"etcd": map[string]any{"local": map[string]any{}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"etcd": map[string]any{"local": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "GOMAXPROCS", "value": "4"},
				map[string]any{"name": "ETCD_PEER_CLIENT_PASSWORD", "value": secret}}}}}}), nil, "GOMAXPROCS"},
		{"extraEnvs by index, WithoutDefaults", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"scheduler": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "AWS_SECRET_ACCESS_KEY", "value": "old"}}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"scheduler": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "AWS_SECRET_ACCESS_KEY", "value": secret}}}}}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"an extraEnvs entry added by index, WithoutDefaults", diff.ObjectBootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"scheduler": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "GOMAXPROCS", "value": "2"}}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"scheduler": map[string]any{"extraEnvs": []any{
				map[string]any{"name": "GOMAXPROCS", "value": "2"},
				map[string]any{"name": "API_SECRET", "value": secret}}}}}),
			[]diff.Option{diff.WithoutDefaults()}, "API_SECRET"},
		{"a preKubeadmCommand with a secret assignment", diff.ObjectBootstrap,
			spec(map[string]any{"preKubeadmCommands": []any{"echo hi"}}),
			spec(map[string]any{"preKubeadmCommands": []any{"echo hi", "export AWS_SECRET_ACCESS_KEY=" + secret}}), nil, ""},
		{"a postKubeadmCommand with a credential no name finds", diff.ObjectBootstrap,
			spec(map[string]any{"postKubeadmCommands": []any{"curl -u ops:old https://example/ready"}}),
			spec(map[string]any{"postKubeadmCommands": []any{"curl -u ops:" + secret + " https://example/ready"}}), nil, ""},
		{"commands added whole, WithoutDefaults", diff.ObjectBootstrap,
			spec(map[string]any{}),
			spec(map[string]any{"bootCommands": []any{"echo " + secret + " | docker login --password-stdin"}}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"commands under a spec added whole", diff.ObjectBootstrap,
			map[string]any{"kind": "KubeadmConfig"},
			spec(map[string]any{"preKubeadmCommands": []any{"echo " + secret}, "format": "cloud-config"}), nil, "cloud-config"},
		{"infrastructure userData, WithoutDefaults", diff.ObjectInfrastructure,
			map[string]any{"kind": "AWSMachine", "spec": map[string]any{"UserData": "old"}},
			map[string]any{"kind": "AWSMachine", "spec": map[string]any{"UserData": secret}},
			[]diff.Option{diff.WithoutDefaults()}, ""},
	}
	// One Differ reused by every case without options: what it caches per
	// path (classification, rendered paths, secretPath's answer) must
	// give what a fresh Differ gives.
	shared, err := diff.New()
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Objects(tc.obj, tc.cur, tc.des, tc.opts...)
			require.NoError(t, err)
			require.NotEmpty(t, cs.Changes)
			js, err := json.Marshal(cs)
			require.NoError(t, err)
			if tc.opts == nil {
				for range 2 {
					again, err := shared.Objects(tc.obj, tc.cur, tc.des)
					require.NoError(t, err)
					require.Equal(t, cs.String(), again.String())
					require.Equal(t, string(js), mustJSON(t, again))
				}
			}
			for _, out := range []string{cs.String(), string(js)} {
				require.NotContains(t, out, secret)
				require.Contains(t, out, "redacted sha256:")
				if tc.shown != "" {
					require.Contains(t, out, tc.shown, "what is not secret stays readable")
				}
			}
			for _, c := range cs.Changes {
				old, new := c.Shown()
				require.NotContains(t, mustJSON(t, old)+mustJSON(t, new), secret)
			}
			revealed, err := diff.Objects(tc.obj, tc.cur, tc.des, append(tc.opts, diff.ShowSecrets())...)
			require.NoError(t, err)
			require.Contains(t, revealed.String(), secret, "ShowSecrets shows them")
		})
	}
}

// TestReferencesToSecretsStayReadable: the name of a Secret, a secretRef
// or a path to a token file is not the secret.
func TestReferencesToSecretsStayReadable(t *testing.T) {
	cur := map[string]any{"kind": "KubeadmConfig", "spec": map[string]any{
		"files":                []any{map[string]any{"path": "/etc/x", "contentFrom": map[string]any{"secret": map[string]any{"name": "old-secret", "key": "k"}}}},
		"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{map[string]any{"name": "token-auth-file", "value": "/etc/old"}}}},
		"credentialsSecretRef": "old-ref",
	}}
	des := map[string]any{"kind": "KubeadmConfig", "spec": map[string]any{
		"files":                []any{map[string]any{"path": "/etc/x", "contentFrom": map[string]any{"secret": map[string]any{"name": "new-secret", "key": "k"}}}},
		"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{map[string]any{"name": "token-auth-file", "value": "/etc/new"}}}},
		"credentialsSecretRef": "new-ref",
	}}
	cs, err := diff.Objects(diff.ObjectBootstrap, cur, des, diff.WithoutDefaults())
	require.NoError(t, err)
	out := cs.String()
	for _, s := range []string{"new-secret", "/etc/new", "new-ref"} {
		require.Contains(t, out, s)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestSecretsInEnvsAndCommands: a KubeadmConfig's secret-named extraEnvs
// values and its commands are not printed, with the typed objects, with
// the defaults or without (entries compared by index), through String,
// JSON and Shown, and through the drift reason path (strategy.DriftDiffer's
// FieldChange values, which drift's explanations print); what is not
// secret stays readable, and ShowSecrets shows everything. It failed
// before the fix: extraEnvs[name=AWS_SECRET_ACCESS_KEY].value and the
// commands were printed in clear.
func TestSecretsInEnvsAndCommands(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	cfg := func(key, cmd string) *bootstrapv1.KubeadmConfig {
		c := &bootstrapv1.KubeadmConfig{}
		c.Kind = "KubeadmConfig"
		envs := []bootstrapv1.EnvVar{
			{EnvVar: corev1.EnvVar{Name: "GOMAXPROCS", Value: "4"}},
			{EnvVar: corev1.EnvVar{Name: "AWS_SECRET_ACCESS_KEY", Value: key}},
		}
		c.Spec.ClusterConfiguration.ControllerManager.ExtraEnvs = &envs
		c.Spec.PreKubeadmCommands = []string{"sysctl --system", cmd}
		return c
	}
	cur := cfg("old-key", "echo old | docker login -u ops --password-stdin")
	des := cfg(secret, "echo "+secret+" | docker login -u ops --password-stdin")
	for name, opts := range map[string][]diff.Option{"defaults": nil, "WithoutDefaults": {diff.WithoutDefaults()}} {
		t.Run(name, func(t *testing.T) {
			cs, err := diff.Objects(diff.ObjectBootstrap, cur, des, opts...)
			require.NoError(t, err)
			require.Len(t, cs.Changes, 2, cs.String())
			js, err := json.Marshal(cs)
			require.NoError(t, err)
			for _, out := range []string{cs.String(), string(js)} {
				require.NotContains(t, out, secret)
				require.Contains(t, out, "preKubeadmCommands[1]", "which command changed is said")
			}
			for _, c := range cs.Changes {
				old, new := c.Shown()
				require.NotContains(t, mustJSON(t, old)+mustJSON(t, new), secret)
			}
			revealed, err := diff.Objects(diff.ObjectBootstrap, cur, des, append(opts, diff.ShowSecrets())...)
			require.NoError(t, err)
			require.Equal(t, 2, strings.Count(revealed.String(), secret), "ShowSecrets shows them")
		})
	}
	t.Run("an entry added whole keeps its name readable", func(t *testing.T) {
		c := cfg("k", "true")
		envs := (*c.Spec.ClusterConfiguration.ControllerManager.ExtraEnvs)[:1]
		c.Spec.ClusterConfiguration.ControllerManager.ExtraEnvs = &envs
		cs, err := diff.Objects(diff.ObjectBootstrap, c, des, diff.WithoutDefaults())
		require.NoError(t, err)
		require.NotContains(t, cs.String(), secret)
		require.Contains(t, cs.String(), "AWS_SECRET_ACCESS_KEY")
	})
	t.Run("the drift reason path", func(t *testing.T) {
		d, err := strategy.DriftDiffer()
		require.NoError(t, err)
		spec := func(key, cmd string) map[string]any {
			return map[string]any{"extraEnvs": []any{map[string]any{"name": "AWS_SECRET_ACCESS_KEY", "value": key}},
				"preKubeadmCommands": []any{cmd}, "instanceType": "m6i.large"}
		}
		changes, err := d.Diff(t.Context(), spec("old", "echo old"), spec(secret, "export TOKEN="+secret))
		require.NoError(t, err)
		require.Len(t, changes, 2)
		out := fmt.Sprintf("%+v", changes) + mustJSON(t, changes)
		require.NotContains(t, out, secret)
		require.Contains(t, out, "extraEnvs[0].value")
	})
}

// TestSecretsBehindACachedPath: a Differ remembers per path (list indices
// left out) how it classified it; whether a value is secret may still
// depend on the element, so an argument named like a secret is redacted
// after one that is not, and the other way round, at the same place.
func TestSecretsBehindACachedPath(t *testing.T) {
	const secret = "s3cr3t-value-0123456789"
	args := func(name, value string) map[string]any {
		return map[string]any{"kind": "KubeadmConfig", "spec": map[string]any{"clusterConfiguration": map[string]any{
			"apiServer": map[string]any{"extraArgs": []any{map[string]any{"name": name, "value": value}}}}}}
	}
	for _, unkeyed := range []bool{false, true} {
		var opts []diff.Option
		if unkeyed {
			opts = append(opts, diff.ListKey("bootstrap.spec.clusterConfiguration.apiServer.extraArgs"))
		}
		d, err := diff.New(opts...)
		require.NoError(t, err)
		for range 2 {
			plain, err := d.Objects(diff.ObjectBootstrap, args("audit-log-path", "/a"), args("audit-log-path", "/b"))
			require.NoError(t, err)
			require.Contains(t, plain.String(), "/b", "unkeyed %v: not a secret", unkeyed)
			hidden, err := d.Objects(diff.ObjectBootstrap, args("oidc-client-secret", "old"), args("oidc-client-secret", secret))
			require.NoError(t, err)
			require.NotEmpty(t, hidden.Changes)
			require.NotContains(t, hidden.String(), secret, "unkeyed %v", unkeyed)
			require.NotContains(t, mustJSON(t, hidden), secret, "unkeyed %v", unkeyed)
		}
	}
}
