package diff_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/diff"
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
		{"a capitalised Password", diff.Bootstrap,
			spec(map[string]any{"users": []any{map[string]any{"name": "ops", "Password": "old"}}}),
			spec(map[string]any{"users": []any{map[string]any{"name": "ops", "Password": secret}}}), nil, ""},
		{"adminPassword, WithoutDefaults", diff.Bootstrap,
			spec(map[string]any{"adminPassword": "old"}), spec(map[string]any{"adminPassword": secret}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"file content, WithoutDefaults", diff.Bootstrap,
			spec(map[string]any{"files": []any{map[string]any{"path": "/etc/x", "content": "old"}}}),
			spec(map[string]any{"files": []any{map[string]any{"path": "/etc/x", "content": secret}}}),
			[]diff.Option{diff.WithoutDefaults()}, ""},
		{"files as a map (schema-invalid)", diff.Bootstrap,
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/x", "content": "old"}}}),
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/x", "content": secret}}}), nil, ""},
		{"a whole files map added", diff.Bootstrap,
			spec(map[string]any{}),
			spec(map[string]any{"files": map[string]any{"x": map[string]any{"path": "/etc/added", "content": secret}}}), nil, "/etc/added"},
		{"apiserver extraArgs as a list", diff.Bootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "oidc-client-secret", "value": "old"}}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "oidc-client-secret", "value": secret}}}}}), nil, ""},
		{"apiserver extraArgs list added whole", diff.Bootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": []any{
				map[string]any{"name": "audit-log-path", "value": "/var/log/audit.log"},
				map[string]any{"name": "oidc-client-secret", "value": secret}}}}}), nil, "/var/log/audit.log"},
		{"apiserver extraArgs as a map (v1beta1)", diff.Bootstrap,
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{"oidc-client-secret": "old"}}}}),
			spec(map[string]any{"clusterConfiguration": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{"oidc-client-secret": secret}}}}), nil, ""},
		{"infrastructure userData, WithoutDefaults", diff.Infrastructure,
			map[string]any{"kind": "AWSMachine", "spec": map[string]any{"UserData": "old"}},
			map[string]any{"kind": "AWSMachine", "spec": map[string]any{"UserData": secret}},
			[]diff.Option{diff.WithoutDefaults()}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Objects(tc.obj, tc.cur, tc.des, tc.opts...)
			require.NoError(t, err)
			require.NotEmpty(t, cs.Changes)
			js, err := json.Marshal(cs)
			require.NoError(t, err)
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
	cs, err := diff.Objects(diff.Bootstrap, cur, des, diff.WithoutDefaults())
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
