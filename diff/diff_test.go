package diff_test

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// view is what tests compare: everything a caller sees of a change.
type view struct {
	Field    string
	Path     string
	Op       diff.Op
	Old, New any
	Category diff.Category
}

func views(cs diff.ChangeSet) []view {
	var out []view
	for _, c := range cs.Changes {
		out = append(out, view{c.Field, c.Path, c.Op, c.Old, c.New, c.Category})
	}
	return out
}

func toUnstructured(t *testing.T, v any) *unstructured.Unstructured {
	t.Helper()
	if m, ok := v.(map[string]any); ok {
		return &unstructured.Unstructured{Object: runtime.DeepCopyJSON(m)}
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: m}
}

func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

func TestChangesNamedByPathCategoryAndOp(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*clusterv1.Machine, *bootstrapv1.KubeadmConfig, *unstructured.Unstructured)
		want   []view
	}{
		{
			name: "kubernetes version",
			mutate: func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				m.Spec.Version = "v1.31.0"
			},
			want: []view{{"machine.spec.version", "/spec/version", diff.OpReplace, "v1.30.4", "v1.31.0", diff.CategoryKubernetesVersion}},
		},
		{
			name: "one file inserted in the middle is one added file",
			mutate: func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				f := bootstrapv1.File{Path: "/etc/new", Permissions: "0644"}
				c.Spec.Files = append(c.Spec.Files[:1], append([]bootstrapv1.File{f}, c.Spec.Files[1:]...)...)
			},
			want: []view{{"bootstrap.spec.files[path=/etc/new]", "/spec/files/1", diff.OpAdd, nil,
				map[string]any{"path": "/etc/new", "permissions": "0644"}, diff.CategoryFiles}},
		},
		{
			name: "a file removed",
			mutate: func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				c.Spec.Files = c.Spec.Files[1:]
			},
			want: []view{{"bootstrap.spec.files[path=/etc/motd]", "/spec/files/0", diff.OpRemove,
				map[string]any{"path": "/etc/motd", "content": "managed by upgradekit", "permissions": "0644", "owner": "root:root"}, nil, diff.CategoryFiles}},
		},
		{
			name: "files reordered are not a change by default",
			mutate: func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				c.Spec.Files[0], c.Spec.Files[3] = c.Spec.Files[3], c.Spec.Files[0]
			},
		},
		{
			name: "kubelet argument by name",
			mutate: func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[1].Value = ptr.To("pool=md-1")
			},
			want: []view{{"bootstrap.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs[name=node-labels].value",
				"/spec/joinConfiguration/nodeRegistration/kubeletExtraArgs/1/value", diff.OpReplace, "pool=md-0", "pool=md-1", diff.CategoryKubeletConfig}},
		},
		{
			name: "user by name, command by index",
			mutate: func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				c.Spec.Users[1].Shell = "/bin/zsh"
				c.Spec.PreKubeadmCommands[1] = "sysctl -p"
			},
			want: []view{
				{"bootstrap.spec.preKubeadmCommands[1]", "/spec/preKubeadmCommands/1", diff.OpReplace, "sysctl --system", "sysctl -p", diff.CategoryCommands},
				{"bootstrap.spec.users[name=audit].shell", "/spec/users/1/shell", diff.OpReplace, "/bin/bash", "/bin/zsh", diff.CategoryUsers},
			},
		},
		{
			name: "ntp, failure domain, image and size",
			mutate: func(m *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, u *unstructured.Unstructured) {
				c.Spec.NTP.Enabled = ptr.To(false)
				m.Spec.FailureDomain = "us-east-1b"
				require.NoError(t, unstructured.SetNestedField(u.Object, "ami-0bbbbbbbbbbbbbbbb", "spec", "ami", "id"))
				require.NoError(t, unstructured.SetNestedField(u.Object, "m6i.xlarge", "spec", "instanceType"))
			},
			want: []view{
				{"machine.spec.failureDomain", "/spec/failureDomain", diff.OpReplace, "us-east-1a", "us-east-1b", diff.CategoryFailureDomain},
				{"bootstrap.spec.ntp.enabled", "/spec/ntp/enabled", diff.OpReplace, true, false, diff.CategoryNTP},
				{"infrastructure.spec.ami.id", "/spec/ami/id", diff.OpReplace, "ami-0aaaaaaaaaaaaaaaa", "ami-0bbbbbbbbbbbbbbbb", diff.CategoryImage},
				{"infrastructure.spec.instanceType", "/spec/instanceType", diff.OpReplace, "m6i.large", "m6i.xlarge", diff.CategoryInstanceType},
			},
		},
		{
			name: "labels and annotations are metadata; status and other metadata are never compared",
			mutate: func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, u *unstructured.Unstructured) {
				m.Labels["tier"] = "gold"
				delete(m.Annotations, "owner")
				m.ResourceVersion = "42"
				m.Status.Phase = "Running"
				require.NoError(t, unstructured.SetNestedField(u.Object, "ready", "status", "phase"))
			},
			want: []view{
				{"machine.metadata.annotations.owner", "/metadata/annotations/owner", diff.OpRemove, "platform", nil, diff.CategoryMetadata},
				{"machine.metadata.labels.tier", "/metadata/labels/tier", diff.OpAdd, nil, "gold", diff.CategoryMetadata},
			},
		},
		{
			name: "a label key with dots and slashes reads as [\"key\"]",
			mutate: func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				m.Labels[clusterv1.ClusterNameLabel] = "other"
			},
			want: []view{{`machine.metadata.labels["cluster.x-k8s.io/cluster-name"]`, "/metadata/labels/cluster.x-k8s.io~1cluster-name",
				diff.OpReplace, "demo", "other", diff.CategoryMetadata}},
		},
		{
			name: "nil and empty lists, maps and strings are the same",
			mutate: func(m *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				c.Spec.BootCommands = []string{}
				c.Spec.ClusterConfiguration.FeatureGates = map[string]bool{}
				c.Spec.DiskSetup.Partitions = []bootstrapv1.Partition{}
				m.Spec.Deletion.NodeDeletionTimeoutSeconds = nil
				m.Spec.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](600)
			},
		},
		{
			name: "a pointer to zero is a value, not absence",
			mutate: func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				m.Spec.MinReadySeconds = ptr.To[int32](0)
			},
			want: []view{{"machine.spec.minReadySeconds", "/spec/minReadySeconds", diff.OpReplace, int64(10), int64(0), diff.CategoryOther}},
		},
		{
			name: "taints by key and effect",
			mutate: func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
				m.Spec.Taints = append(m.Spec.Taints, clusterv1.MachineTaint{Key: "dedicated", Effect: "NoExecute", Propagation: "Always"})
			},
			want: []view{{"machine.spec.taints[key=dedicated,effect=NoExecute]", "/spec/taints/1", diff.OpAdd, nil,
				map[string]any{"key": "dedicated", "effect": "NoExecute", "propagation": "Always"}, diff.CategoryOther}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, c, u := fixture()
			tc.mutate(m, c, u)
			cs, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(tc.want, views(cs), cmpopts.EquateEmpty()), "got:\n%s", cs)
		})
	}
}

// TestEveryInputFormGivesTheSameChanges: typed, unstructured, map, raw JSON
// and RawExtension inputs, and mixtures, produce identical change sets.
func TestEveryInputFormGivesTheSameChanges(t *testing.T) {
	m, c, u := fixture()
	m2, c2, u2 := fixture()
	m2.Spec.Version = "v1.31.0"
	c2.Spec.Files[2].Content = "x"
	c2.Spec.Users = c2.Spec.Users[:1]
	c2.Spec.NTP = bootstrapv1.NTP{}
	require.NoError(t, unstructured.SetNestedField(u2.Object, int64(120), "spec", "rootVolume", "size"))

	typed, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.State{Machine: m2, Bootstrap: c2, Infrastructure: u2})
	require.NoError(t, err)
	require.Equal(t, 6, typed.Len(), "%s", typed)

	forms := map[string]func(v any) any{
		"unstructured": func(v any) any { return toUnstructured(t, v) },
		"map":          func(v any) any { return toUnstructured(t, v).Object },
		"json":         func(v any) any { return toJSON(t, v) },
		"rawextension": func(v any) any { return runtime.RawExtension{Raw: toJSON(t, v)} },
		"value":        func(v any) any { return *(v.(*clusterv1.Machine)) },
	}
	for name, conv := range forms {
		t.Run(name, func(t *testing.T) {
			var cur, des diff.State
			if name == "value" {
				cur, des = diff.State{Machine: conv(m), Bootstrap: c, Infrastructure: u}, diff.State{Machine: conv(m2), Bootstrap: c2, Infrastructure: u2}
			} else {
				cur = diff.State{Machine: conv(m), Bootstrap: conv(c), Infrastructure: conv(u.Object)}
				des = diff.State{Machine: m2, Bootstrap: conv(c2), Infrastructure: conv(u2.Object)} // typed against the other form
			}
			got, err := diff.Machines(cur, des)
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(views(typed), views(got)))
		})
	}
}

func TestListOptions(t *testing.T) {
	m, c, u := fixture()
	_, c2, _ := fixture()
	c2.Spec.Files[0], c2.Spec.Files[1] = c2.Spec.Files[1], c2.Spec.Files[0]
	cur := diff.State{Machine: m, Bootstrap: c, Infrastructure: u}
	des := diff.State{Machine: m, Bootstrap: c2, Infrastructure: u}

	cs, err := diff.Machines(cur, des)
	require.NoError(t, err)
	require.True(t, cs.Empty(), "keyed lists ignore order by default: %s", cs)

	cs, err = diff.Machines(cur, des, diff.OrderedLists("bootstrap.spec.files"))
	require.NoError(t, err)
	require.Equal(t, []string{"bootstrap.spec.files"}, fieldsOf(cs))
	require.Equal(t, diff.OpReplace, cs.Changes[0].Op)

	cs, err = diff.Machines(cur, des, diff.ListIndex("bootstrap.spec.files"))
	require.NoError(t, err)
	require.Len(t, cs.Changes, 8, "by index, every field of the two swapped files differs: %s", cs)

	// Duplicate keys fall back to index matching instead of guessing.
	_, c3, _ := fixture()
	c3.Spec.Files[1].Path = c3.Spec.Files[0].Path
	cs, err = diff.Machines(cur, diff.State{Machine: m, Bootstrap: c3, Infrastructure: u})
	require.NoError(t, err)
	require.Equal(t, []string{"bootstrap.spec.files[1].path"}, fieldsOf(cs))

	// A custom key for a provider's list.
	a := map[string]any{"kind": "AWSMachine", "spec": map[string]any{"additionalSecurityGroups": []any{
		map[string]any{"id": "sg-1", "note": "a"}, map[string]any{"id": "sg-2", "note": "b"}}}}
	b := map[string]any{"kind": "AWSMachine", "spec": map[string]any{"additionalSecurityGroups": []any{
		map[string]any{"id": "sg-0", "note": "new"}, map[string]any{"id": "sg-1", "note": "a"}, map[string]any{"id": "sg-2", "note": "b"}}}}
	cs, err = diff.Objects(diff.ObjectInfrastructure, a, b, diff.ListKey("infrastructure(AWSMachine).spec.additionalSecurityGroups", "id"))
	require.NoError(t, err)
	require.Equal(t, []string{"infrastructure.spec.additionalSecurityGroups[id=sg-0]"}, fieldsOf(cs))
	cs, err = diff.Objects(diff.ObjectInfrastructure, a, b)
	require.NoError(t, err)
	require.Len(t, cs.Changes, 5, "without the key the list is compared by index: %s", cs)

	// A set of scalars.
	cs, err = diff.Objects(diff.ObjectBootstrap,
		map[string]any{"spec": map[string]any{"ntp": map[string]any{"servers": []any{"a", "b"}}}},
		map[string]any{"spec": map[string]any{"ntp": map[string]any{"servers": []any{"b", "a", "c"}}}},
		diff.ListKey("bootstrap.spec.ntp.servers"))
	require.NoError(t, err)
	require.Equal(t, []view{{"bootstrap.spec.ntp.servers[2]", "/spec/ntp/servers/2", diff.OpAdd, nil, "c", diff.CategoryNTP}}, views(cs))
}

func TestRuleOptions(t *testing.T) {
	m, c, u := fixture()
	m2, c2, u2 := fixture()
	m2.Spec.Version = "v1.31.0"
	c2.Spec.Format = ""
	c2.Spec.Files[0].Content = "new motd"
	u2.Object["spec"].(map[string]any)["additionalTags"] = map[string]any{}
	cur := diff.State{Machine: m, Bootstrap: c, Infrastructure: u}
	des := diff.State{Machine: m2, Bootstrap: c2, Infrastructure: u2}

	cs, err := diff.Machines(cur, des)
	require.NoError(t, err)
	require.Equal(t, []string{"machine.spec.version", "bootstrap.spec.files[path=/etc/motd].content", "bootstrap.spec.format",
		"infrastructure.spec.additionalTags.team"}, fieldsOf(cs))

	cs, err = diff.Machines(cur, des,
		diff.Ignore("machine.spec.version", "bootstrap.spec.files[*].content"),
		diff.Default("bootstrap.spec.format", "cloud-config"),
		diff.Ignore(`infrastructure.spec.**.team`))
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)

	// StrictEmpty: [] differs from absent.
	a := map[string]any{"spec": map[string]any{"joinConfiguration": map[string]any{"nodeRegistration": map[string]any{}}}}
	b := map[string]any{"spec": map[string]any{"joinConfiguration": map[string]any{"nodeRegistration": map[string]any{"taints": []any{}}}}}
	cs, err = diff.Objects(diff.ObjectBootstrap, a, b)
	require.NoError(t, err)
	require.True(t, cs.Empty())
	cs, err = diff.Objects(diff.ObjectBootstrap, a, b, diff.StrictEmpty("bootstrap.spec.joinConfiguration.nodeRegistration.taints"))
	require.NoError(t, err)
	require.Equal(t, []view{{"bootstrap.spec.joinConfiguration.nodeRegistration.taints", "/spec/joinConfiguration/nodeRegistration/taints",
		diff.OpAdd, nil, []any{}, diff.CategoryKubeletConfig}}, views(cs))

	// Categories: a user rule wins over the built-in table; kinds are honoured.
	cs, err = diff.Machines(cur, des, diff.Categorize("Motd", "bootstrap.spec.files[*].content"),
		diff.Categorize("Tags", "infrastructure(DockerMachine).spec.additionalTags"))
	require.NoError(t, err)
	require.Equal(t, diff.Category("Motd"), cs.Changes[1].Category)
	require.Equal(t, diff.CategoryOther, cs.Changes[3].Category, "the rule was for another kind")
}

func TestSecretsAreRedacted(t *testing.T) {
	const secret = "super-secret-encryption-key"
	m, c, u := fixture()
	_, c2, _ := fixture()
	c2.Spec.Files = append(c2.Spec.Files, bootstrapv1.File{Path: "/etc/kubernetes/enc.yaml", Content: secret})
	c2.Spec.Users[0].Passwd = secret
	cs, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.State{Machine: m, Bootstrap: c2, Infrastructure: u})
	require.NoError(t, err)
	require.Len(t, cs.Changes, 2)
	out := cs.String()
	js, err := json.Marshal(cs)
	require.NoError(t, err)
	for _, s := range []string{out, string(js)} {
		require.NotContains(t, s, secret)
		require.Contains(t, s, "redacted sha256:")
	}
	require.Contains(t, out, "/etc/kubernetes/enc.yaml", "non-secret parts of an added file stay readable")
	for _, ch := range cs.Changes {
		require.True(t, ch.Sensitive)
	}
	// The values themselves are intact for patches.
	require.Equal(t, secret, cs.Changes[1].New)

	revealed, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.State{Machine: m, Bootstrap: c2, Infrastructure: u}, diff.ShowSecrets())
	require.NoError(t, err)
	require.Contains(t, revealed.String(), secret)

	// Equal secrets give equal digests, different ones differ.
	require.Equal(t, diff.Redact("a"), diff.Redact("a"))
	require.NotEqual(t, diff.Redact("a"), diff.Redact("b"))
}

func TestBadInput(t *testing.T) {
	m, c, u := fixture()
	cyclic := map[string]any{"spec": map[string]any{}}
	cyclic["spec"].(map[string]any)["self"] = cyclic
	deep := map[string]any{}
	cur := deep
	for range 200 {
		next := map[string]any{}
		cur["a"] = next
		cur = next
	}
	ms := &clusterv1.MachineSet{}
	ms.Kind = "MachineSet"
	ch := make(chan int)
	var deepTyped deepNode
	for range 200 {
		deepTyped = deepNode{A: &deepNode{A: deepTyped.A}}
	}
	cases := []struct {
		name     string
		cur, des diff.State
		err      error
		path     string
	}{
		{"bootstrap on one side only", diff.State{Machine: m, Bootstrap: c}, diff.State{Machine: m}, diff.ErrNilObject, ""},
		{"machine against a machine set", diff.State{Machine: m}, diff.State{Machine: ms}, diff.ErrWrongKind, ""},
		{"infrastructure kinds differ", diff.State{Infrastructure: u}, diff.State{Infrastructure: map[string]any{"kind": "DockerMachine"}}, diff.ErrKindMismatch, ""},
		{"channel in unstructured content", diff.State{Infrastructure: u}, diff.State{Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{"x": make(chan int)}}}, diff.ErrUnsupportedValue, ""},
		{"NaN in unstructured content", diff.State{Infrastructure: map[string]any{"spec": map[string]any{"f": 1.0}}}, diff.State{Infrastructure: map[string]any{"spec": map[string]any{"f": math.NaN()}}}, diff.ErrUnsupportedValue, ""},
		{"cyclic value", diff.State{Infrastructure: cyclic}, diff.State{Infrastructure: cyclic}, diff.ErrTooDeep, ""}, // MaxDepth's promise: a cycle is too deep, and says so in a bounded message,
		{"absurdly deep value", diff.State{Infrastructure: map[string]any{"spec": deep}}, diff.State{Infrastructure: map[string]any{"spec": map[string]any{}}}, diff.ErrTooDeep, "infrastructure.spec.a.a"},
		{"invalid JSON", diff.State{Bootstrap: []byte(`{"spec":`)}, diff.State{Bootstrap: []byte(`{}`)}, diff.ErrInvalidJSON, ""},
		{"JSON that is not an object", diff.State{Bootstrap: []byte(`[1]`)}, diff.State{Bootstrap: []byte(`{}`)}, diff.ErrInvalidJSON, ""},
		{"trailing data after the object", diff.State{Bootstrap: []byte(`{"spec":{}}}}x`)}, diff.State{Bootstrap: []byte(`{}`)}, diff.ErrInvalidJSON, ""},
		{"not an object at all", diff.State{Bootstrap: 42}, diff.State{Bootstrap: 43}, diff.ErrUnsupportedValue, ""},
		{"typed infinity", diff.State{Infrastructure: &floatMachine{}}, diff.State{Infrastructure: &floatMachine{Spec: floatSpec{F: math.Inf(1)}}}, diff.ErrUnsupportedValue, "infrastructure.spec.f"},
		{"typed channel", diff.State{Infrastructure: &chanMachine{}}, diff.State{Infrastructure: &chanMachine{Spec: chanSpec{C: make(chan int)}}}, diff.ErrUnsupportedValue, "infrastructure.spec.c"},
		// Identical values on both sides are skipped without a walk, but
		// never when the walk would fail.
		{"the same NaN on both sides", diff.State{Infrastructure: &floatMachine{Spec: floatSpec{F: math.NaN()}}}, diff.State{Infrastructure: &floatMachine{Spec: floatSpec{F: math.NaN()}}}, diff.ErrUnsupportedValue, "infrastructure.spec.f"},
		{"the same channel on both sides", diff.State{Infrastructure: &chanMachine{Spec: chanSpec{C: ch}}}, diff.State{Infrastructure: &chanMachine{Spec: chanSpec{C: ch}}}, diff.ErrUnsupportedValue, "infrastructure.spec.c"},
		{"the same absurdly deep typed value on both sides", diff.State{Infrastructure: &deepMachine{Spec: deepTyped}}, diff.State{Infrastructure: &deepMachine{Spec: deepTyped}}, diff.ErrTooDeep, "infrastructure.spec.a.a"},
		// 101 levels: spec, then a 100 times.
		{"the same string one level too deep on both sides", diff.State{Infrastructure: map[string]any{"spec": nestedA(100)}}, diff.State{Infrastructure: map[string]any{"spec": nestedA(100)}}, diff.ErrTooDeep, "infrastructure.spec.a.a"},
		// 101 levels: spec, l, [0], then l and [0] 49 times.
		{"the same value one level too deep in a list on both sides", diff.State{Infrastructure: &deepListMachine{Spec: deepList{L: []deepList{deepLists(49)}}}}, diff.State{Infrastructure: &deepListMachine{Spec: deepList{L: []deepList{deepLists(49)}}}}, diff.ErrTooDeep, "infrastructure.spec.l[0].l[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NotPanics(t, func() {
				_, err := diff.Machines(tc.cur, tc.des)
				require.ErrorIs(t, err, tc.err)
				var de *diff.Error
				require.True(t, errors.As(err, &de))
				require.Less(t, len(err.Error()), 1024, "a bounded message")
				if tc.path != "" {
					require.True(t, strings.HasPrefix(de.Path, tc.path), "path %q", de.Path)
				}
			})
		})
	}

	_, err := diff.New(diff.Ignore("pod.spec"))
	require.ErrorIs(t, err, diff.ErrInvalidOption)
	_, err = diff.New(diff.Ignore(`machine.metadata.labels["unterminated`))
	require.ErrorIs(t, err, diff.ErrInvalidOption)
	_, err = diff.New(diff.Default("machine.spec.x", make(chan int)))
	require.ErrorIs(t, err, diff.ErrInvalidOption)
	_, err = diff.New(diff.MaxDepth(0))
	require.ErrorIs(t, err, diff.ErrInvalidOption)
}

func TestTemplates(t *testing.T) {
	ms := &clusterv1.MachineSet{Spec: clusterv1.MachineSetSpec{Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.30.4"}}}}
	ms.Kind = "MachineSet"
	md := &clusterv1.MachineDeployment{Spec: clusterv1.MachineDeploymentSpec{Replicas: ptr.To[int32](9), Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.31.0"}}}}
	md.Kind = "MachineDeployment"
	bt := func(content string) *bootstrapv1.KubeadmConfigTemplate {
		t := &bootstrapv1.KubeadmConfigTemplate{Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/a", Content: content}}}}}}
		t.Kind = "KubeadmConfigTemplate"
		return t
	}
	cs, err := diff.Templates(diff.State{Machine: ms, Bootstrap: bt("1")}, diff.State{Machine: md, Bootstrap: bt("2")}, diff.ShowSecrets())
	require.NoError(t, err)
	require.Equal(t, []view{
		{"machine.spec.template.spec.version", "/spec/template/spec/version", diff.OpReplace, "v1.30.4", "v1.31.0", diff.CategoryKubernetesVersion},
		{"bootstrap.spec.template.spec.files[path=/a].content", "/spec/template/spec/files/0/content", diff.OpReplace, "1", "2", diff.CategoryFiles},
	}, views(cs), "replicas are not part of the template; rules apply below spec.template")
	patch, err := cs.JSONPatch(diff.ObjectMachine)
	require.NoError(t, err)
	require.JSONEq(t, `[{"op":"replace","path":"/spec/template/spec/version","value":"v1.31.0"}]`, string(patch))

	_, err = diff.Templates(diff.State{Machine: &clusterv1.Machine{TypeMeta: ms.TypeMeta}}, diff.State{Machine: md})
	require.NoError(t, err, "a typed Machine with Kind MachineSet is accepted by kind")
	m, _, _ := fixture()
	_, err = diff.Templates(diff.State{Machine: m}, diff.State{Machine: m})
	require.ErrorIs(t, err, diff.ErrWrongKind)
}

func TestDeterministic(t *testing.T) {
	m, c, u := fixture()
	m2, c2, u2 := fixture()
	m2.Labels = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}
	c2.Spec.ClusterConfiguration.FeatureGates = map[string]bool{"A": true, "B": true, "C": false}
	u2.Object["spec"] = map[string]any{"x": 1, "y": 2, "z": 3, "w": 4}
	first, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.State{Machine: m2, Bootstrap: c2, Infrastructure: u2})
	require.NoError(t, err)
	for range 50 {
		again, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.State{Machine: m2, Bootstrap: c2, Infrastructure: u2})
		require.NoError(t, err)
		require.Equal(t, first.String(), again.String())
	}
}

func TestEqual(t *testing.T) {
	eq, err := diff.Equal(state(), state())
	require.NoError(t, err)
	require.True(t, eq)
	m, c, u := fixture()
	c.Spec.Users[0].Sudo = ""
	eq, err = diff.Equal(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
	require.NoError(t, err)
	require.False(t, eq)
}

func TestChangeSetHelpers(t *testing.T) {
	m, c, u := fixture()
	m.Spec.Version = "v1.31.0"
	c.Spec.Files[0].Permissions = "0600"
	cs, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
	require.NoError(t, err)
	require.Equal(t, []diff.Category{diff.CategoryKubernetesVersion, diff.CategoryFiles}, cs.Categories())
	files := cs.Filter(func(c diff.Change) bool { return c.Category == diff.CategoryFiles })
	require.Equal(t, 1, files.Len())
	require.Equal(t, `machine.spec.version: replace "v1.30.4" -> "v1.31.0" (KubernetesVersion)`, cs.Changes[0].String())
	var back struct {
		Changes []map[string]any `json:"changes"`
	}
	raw, err := json.Marshal(cs)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, "machine", back.Changes[0]["object"])
	require.Equal(t, "v1.31.0", back.Changes[0]["new"])
	require.Equal(t, "no changes", diff.ChangeSet{}.String())
}

type floatSpec struct {
	F float64 `json:"f"`
}

type floatMachine struct {
	Spec floatSpec `json:"spec"`
}

type chanSpec struct {
	C chan int `json:"c,omitempty"`
}

type chanMachine struct {
	Spec chanSpec `json:"spec"`
}

type deepNode struct {
	A *deepNode `json:"a,omitempty"`
}

type deepList struct {
	L []deepList `json:"l,omitempty"`
}

// nestedA nests n objects {"a": ...} around "x".
func nestedA(n int) any {
	var v any = "x"
	for range n {
		v = map[string]any{"a": v}
	}
	return v
}

// deepLists nests n lists of one element.
func deepLists(n int) deepList {
	v := deepList{}
	for range n {
		v = deepList{L: []deepList{v}}
	}
	return v
}

type deepListMachine struct {
	Spec deepList `json:"spec"`
}

type deepMachine struct {
	Spec deepNode `json:"spec"`
}

type listSpec struct {
	L []string `json:"l"`
	S string   `json:"s"`
}

type listMachine struct {
	Spec listSpec `json:"spec"`
}

// TestIdenticalTypedValues: typed values identical on both sides are
// skipped without a walk; nil against empty is not identical, so the
// rules that tell them apart still see them.
func TestIdenticalTypedValues(t *testing.T) {
	same := &listMachine{Spec: listSpec{L: []string{"a", "b"}, S: "x"}}
	cs, err := diff.Objects(diff.ObjectInfrastructure, same, &listMachine{Spec: listSpec{L: []string{"a", "b"}, S: "x"}})
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)

	cur, des := &listMachine{Spec: listSpec{L: nil}}, &listMachine{Spec: listSpec{L: []string{}}}
	cs, err = diff.Objects(diff.ObjectInfrastructure, cur, des)
	require.NoError(t, err)
	require.True(t, cs.Empty(), "folded: nil and empty are the same; got %s", cs)

	cs, err = diff.Objects(diff.ObjectInfrastructure, cur, des, diff.StrictEmpty("infrastructure.spec.l"))
	require.NoError(t, err)
	require.Equal(t, []string{"infrastructure.spec.l: add [] (Other)"}, strings.Split(cs.String(), "\n"))

	eq, err := diff.Equal(diff.State{Infrastructure: same}, diff.State{Infrastructure: same})
	require.NoError(t, err)
	require.True(t, eq)
}

// TestChangeStringShowsLittleOfHugeValues: a change's String shows at most
// ~120 bytes of each value, and walks no more of a list or map than it
// shows, so a cyclic or huge value in a hand-built change (the diff itself
// refuses cycles) costs the same as a small one; 10,000 such changes print
// at once (the entry point test found this taking more than 20 s).
func TestChangeStringShowsLittleOfHugeValues(t *testing.T) {
	cyclic := []any{nil}
	cyclic[0] = cyclic
	huge := make([]any, 1_000_000)
	for i := range huge {
		huge[i] = map[string]any{"i": i, "s": "é"}
	}
	c := diff.Change{Field: "infrastructure.spec.x", Op: diff.OpReplace, Old: cyclic, New: huge, Category: diff.CategoryOther}
	s := c.String()
	require.Less(t, len(s), 400, s)
	require.True(t, strings.HasPrefix(s, `infrastructure.spec.x: replace [[[[`), s)
	require.Contains(t, s, `-> [{"i":0,"s":"é"},{"i":1,`)
	require.True(t, utf8.ValidString(s))

	cs := diff.ChangeSet{Changes: slices.Repeat([]diff.Change{c}, 10_000)}
	require.Equal(t, 10_000, strings.Count(cs.String(), "\n")+1)

	small := diff.Change{Field: "machine.spec.version", Op: diff.OpReplace, Old: "v1.30.4", New: "<b>", Category: diff.CategoryKubernetesVersion}
	require.Equal(t, `machine.spec.version: replace "v1.30.4" -> "<b>" (KubernetesVersion)`, small.String(), "HTML is not escaped")
}

// TestRedactCyclicValue: a cyclic value is redacted at once, not after
// encoding/json has descended 1,000 levels into it.
func TestRedactCyclicValue(t *testing.T) {
	cyclic := []any{"a", nil}
	cyclic[1] = map[string]any{"back": cyclic}
	require.Equal(t, "<redacted cyclic value>", diff.Redact(cyclic))
	shared := []any{"x"}
	require.NotEqual(t, "<redacted cyclic value>", diff.Redact([]any{shared, shared}), "a value seen twice is no cycle")
	c := diff.Change{Field: "bootstrap.spec.files", Op: diff.OpReplace, Old: cyclic, New: "x", Sensitive: true, Category: diff.CategoryFiles}
	cs := diff.ChangeSet{Changes: slices.Repeat([]diff.Change{c}, 10_000)}
	require.Contains(t, cs.String(), "<redacted cyclic value> -> <redacted sha256:")
}

// TestObjectsWithoutSpecAreRefused: two objects without a spec (a
// ConfigMap) used to compare as "no changes" whatever differed; now the
// diff says it does not compare them. One side with a spec is compared.
func TestObjectsWithoutSpecAreRefused(t *testing.T) {
	cur := map[string]any{"kind": "ConfigMap", "data": map[string]any{"a": "1"}}
	des := map[string]any{"kind": "ConfigMap", "data": map[string]any{"a": "2"}}
	_, err := diff.Objects(diff.ObjectInfrastructure, cur, des)
	require.ErrorIs(t, err, diff.ErrWrongKind)
	var de *diff.Error
	require.ErrorAs(t, err, &de)
	require.Equal(t, "spec", de.Path)
	require.Contains(t, err.Error(), "neither object has a spec")

	_, err = diff.Objects(diff.ObjectInfrastructure, &corev1.ConfigMap{Data: map[string]string{"a": "1"}}, &corev1.ConfigMap{Data: map[string]string{"a": "2"}})
	require.ErrorIs(t, err, diff.ErrWrongKind, "typed objects without a Spec field too")

	cs, err := diff.Objects(diff.ObjectInfrastructure, map[string]any{"kind": "X"}, map[string]any{"kind": "X", "spec": map[string]any{"size": 2}})
	require.NoError(t, err)
	require.Equal(t, 1, cs.Len(), "a spec on one side is compared")
}

// TestEqualTemplates: templates have an Equal of their own, agreeing with
// Templates(...).Empty().
func TestEqualTemplates(t *testing.T) {
	ms := func(v string) *clusterv1.MachineSet {
		return &clusterv1.MachineSet{Spec: clusterv1.MachineSetSpec{Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: v}}}}
	}
	for _, tc := range []struct {
		from, to string
		equal    bool
	}{{"v1.30.4", "v1.30.4", true}, {"v1.30.4", "v1.31.1", false}} {
		cur, des := diff.State{Machine: ms(tc.from)}, diff.State{Machine: ms(tc.to)}
		eq, err := diff.EqualTemplates(cur, des)
		require.NoError(t, err)
		require.Equal(t, tc.equal, eq)
		cs, err := diff.Templates(cur, des)
		require.NoError(t, err)
		require.Equal(t, cs.Empty(), eq)
	}
}

// TestUnderPrefixesPatterns: options under a prefix name fields relative
// to it, nesting joins prefixes, and an empty prefix is an error.
func TestUnderPrefixesPatterns(t *testing.T) {
	cur := map[string]any{"kind": "X", "spec": map[string]any{"template": map[string]any{"size": 1, "zone": "a"}}}
	des := map[string]any{"kind": "X", "spec": map[string]any{"template": map[string]any{"size": 2, "zone": "b"}}}
	for _, opt := range []diff.Option{
		diff.Under("infrastructure.spec", diff.Ignore("template.zone")),
		diff.Under("infrastructure", diff.Under("spec.template", diff.Ignore("zone"))),
		diff.Ignore("infrastructure.spec.template.zone"),
		diff.Under("infrastructure(X).spec", diff.Ignore("template.zone")), // a prefix with a kind
	} {
		cs, err := diff.Objects(diff.ObjectInfrastructure, cur, des, opt)
		require.NoError(t, err)
		require.Equal(t, []string{"infrastructure.spec.template.size"}, fields(cs))
	}
	_, err := diff.New(diff.Under("", diff.Ignore("x")))
	require.ErrorIs(t, err, diff.ErrInvalidOption)
}

func fields(cs diff.ChangeSet) []string {
	var out []string
	for _, c := range cs.Changes {
		out = append(out, c.Field)
	}
	return out
}

type namedStrings map[string]string

type namedMapMachine struct {
	Spec struct {
		M namedStrings `json:"m,omitempty"`
	} `json:"spec"`
}

// TestNamedMapType: a field of a named map[string]string type is compared
// like a plain one; it used to panic (a type assertion to
// map[string]string).
func TestNamedMapType(t *testing.T) {
	cur, des, same := &namedMapMachine{}, &namedMapMachine{}, &namedMapMachine{}
	cur.Spec.M = namedStrings{"a": "1", "b": "2"}
	des.Spec.M = namedStrings{"a": "1", "b": "3"}
	same.Spec.M = namedStrings{"a": "1", "b": "2"}
	var cs diff.ChangeSet
	var err error
	require.NotPanics(t, func() { cs, err = diff.Objects(diff.ObjectInfrastructure, cur, des) })
	require.NoError(t, err)
	require.Equal(t, []string{`infrastructure.spec.m.b: replace "2" -> "3" (Other)`}, strings.Split(cs.String(), "\n"))
	require.NotPanics(t, func() { cs, err = diff.Objects(diff.ObjectInfrastructure, cur, same) })
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)
	var eq bool
	require.NotPanics(t, func() { eq, err = diff.Equal(diff.State{Infrastructure: cur}, diff.State{Infrastructure: des}) })
	require.NoError(t, err)
	require.False(t, eq)
}
