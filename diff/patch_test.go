package diff_test

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

var objects = []diff.Object{diff.ObjectMachine, diff.ObjectBootstrap, diff.ObjectInfrastructure}

type mutation struct {
	name string
	fn   func(*clusterv1.Machine, *bootstrapv1.KubeadmConfig, *unstructured.Unstructured)
}

var mutations = []mutation{
	{"version", func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		m.Spec.Version = "v1.31.2"
	}},
	{"file content", func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.Files[1].Content = "x"
	}},
	{"file added and removed", func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.Files = append(c.Spec.Files[1:], bootstrapv1.File{Path: "/new", Content: "n"})
	}},
	{"files reordered", func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.Files[0], c.Spec.Files[2] = c.Spec.Files[2], c.Spec.Files[0]
	}},
	{"new nested struct", func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.5.16-0"
		c.Spec.ClusterConfiguration.FeatureGates = map[string]bool{"X": true}
	}},
	{"fields cleared", func(m *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.NTP = bootstrapv1.NTP{}
		c.Spec.PostKubeadmCommands = nil
		m.Spec.MinReadySeconds = nil
		m.Spec.Taints = nil
	}},
	{"user key rotated", func(_ *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, _ *unstructured.Unstructured) {
		c.Spec.Users[0].SSHAuthorizedKeys = []string{"ssh-ed25519 AAAAnew"}
		c.Spec.Users[1].LockPassword = ptr.To(false)
	}},
	{"infra image and map entries", func(_ *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, u *unstructured.Unstructured) {
		spec := u.Object["spec"].(map[string]any)
		spec["ami"] = map[string]any{"id": "ami-new"}
		spec["additionalTags"] = map[string]any{"team": "core", "cost-center": "42"}
		delete(spec, "sshKeyName")
		spec["rootVolume"].(map[string]any)["size"] = int64(100)
	}},
	{"metadata and status only", func(m *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig, u *unstructured.Unstructured) {
		m.Labels["x"] = "y"
		m.Status.Phase = "Running"
		u.Object["status"] = map[string]any{"ready": true}
	}},
	{"everything", func(m *clusterv1.Machine, c *bootstrapv1.KubeadmConfig, u *unstructured.Unstructured) {
		m.Spec.Version = "v1.32.0"
		m.Spec.FailureDomain = ""
		c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = c.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[1:]
		c.Spec.JoinConfiguration.NodeRegistration.Taints = &[]corev1.Taint{}
		c.Spec.Format = bootstrapv1.Ignition
		u.Object["spec"].(map[string]any)["instanceType"] = "c7i.large"
	}},
}

func docOf(t *testing.T, v any) []byte {
	t.Helper()
	if u, ok := v.(*unstructured.Unstructured); ok {
		v = u.Object
	}
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

func objectOf(s diff.State, o diff.Object) any {
	switch o {
	case diff.ObjectMachine:
		return s.Machine
	case diff.ObjectBootstrap:
		return s.Bootstrap
	}
	return s.Infrastructure
}

func specOnly(cs diff.ChangeSet) diff.ChangeSet {
	return cs.Filter(func(c diff.Change) bool { return len(c.Path) >= 5 && c.Path[:5] == "/spec" })
}

// TestPatchRoundTrip: applying the JSON patch (or the merge patch) to the
// current object with evanphx/json-patch, the library Kubernetes and CAPI
// use, yields desired on every spec path and leaves metadata and status as
// they were.
func TestPatchRoundTrip(t *testing.T) {
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			cur := state()
			m, c, u := fixture()
			mu.fn(m, c, u)
			des := diff.State{Machine: m, Bootstrap: c, Infrastructure: u}
			cs, err := diff.Machines(cur, des)
			require.NoError(t, err)
			for _, o := range objects {
				curDoc, desDoc := docOf(t, objectOf(cur, o)), docOf(t, objectOf(des, o))
				jp, err := cs.JSONPatch(o)
				require.NoError(t, err)
				patch, err := jsonpatch.DecodePatch(jp)
				require.NoError(t, err)
				viaJSONPatch, err := patch.Apply(curDoc)
				require.NoError(t, err, "patch %s", jp)
				mp, err := cs.MergePatch(o)
				require.NoError(t, err)
				viaMerge, err := jsonpatch.MergePatch(curDoc, mp)
				require.NoError(t, err)

				for name, patched := range map[string][]byte{"json patch": viaJSONPatch, "merge patch": viaMerge} {
					after, err := diff.Objects(o, patched, desDoc)
					require.NoError(t, err)
					require.True(t, specOnly(after).Empty(), "%s %s left spec changes:\n%s\npatch: %s", o, name, specOnly(after), jp)
					var before, now map[string]any
					require.NoError(t, json.Unmarshal(curDoc, &before))
					require.NoError(t, json.Unmarshal(patched, &now))
					require.Equal(t, before["metadata"], now["metadata"], "%s %s touched metadata", o, name)
					require.Equal(t, before["status"], now["status"], "%s %s touched status", o, name)
				}
			}
		})
	}
}

// TestPatchSubset: a patch built from the changes a strategy accepted moves
// only those paths.
func TestPatchSubset(t *testing.T) {
	m, c, u := fixture()
	c.Spec.Files[0].Content = "new"
	c.Spec.Users[0].Sudo = "ALL=(ALL) ALL"
	c.Spec.PreKubeadmCommands = append(c.Spec.PreKubeadmCommands, "echo hi")
	des := diff.State{Machine: m, Bootstrap: c, Infrastructure: u}
	cs, err := diff.Machines(state(), des)
	require.NoError(t, err)
	require.Len(t, cs.Changes, 3)
	accepted := cs.Filter(func(c diff.Change) bool { return c.Category == diff.CategoryFiles })
	jp, err := accepted.JSONPatch(diff.ObjectBootstrap)
	require.NoError(t, err)
	patch, err := jsonpatch.DecodePatch(jp)
	require.NoError(t, err)
	_, curCfg, _ := fixture()
	patched, err := patch.Apply(docOf(t, curCfg))
	require.NoError(t, err)

	left, err := diff.Objects(diff.ObjectBootstrap, patched, c)
	require.NoError(t, err)
	require.ElementsMatch(t, []diff.Category{diff.CategoryUsers, diff.CategoryCommands}, left.Categories())
	moved, err := diff.Objects(diff.ObjectBootstrap, curCfg, patched)
	require.NoError(t, err)
	require.Equal(t, []diff.Category{diff.CategoryFiles}, moved.Categories())
}

// TestInPlaceLoop plays CAPI's CanUpdateMachine loop: the extension answers
// with patches, CAPI applies them to current (copying back spec only) and
// diffs again with its own rules; nothing may be left.
func TestInPlaceLoop(t *testing.T) {
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			m, c, u := fixture()
			mu.fn(m, c, u)
			cs, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.InPlaceUpdate())
			require.NoError(t, err)
			var patched diff.State
			for _, o := range objects {
				jp, err := cs.JSONPatch(o)
				require.NoError(t, err)
				p, err := jsonpatch.DecodePatch(jp)
				require.NoError(t, err)
				cur := docOf(t, objectOf(state(), o))
				out, err := p.Apply(cur)
				require.NoError(t, err)
				switch o {
				case diff.ObjectMachine:
					patched.Machine = out
				case diff.ObjectBootstrap:
					patched.Bootstrap = out
				default:
					patched.Infrastructure = out
				}
			}
			again, err := diff.Machines(patched, diff.State{Machine: m, Bootstrap: c, Infrastructure: u}, diff.InPlaceUpdate())
			require.NoError(t, err)
			require.True(t, again.Empty(), "CAPI would still see:\n%s", again)
		})
	}
}

func TestEmptyPatches(t *testing.T) {
	cs, err := diff.Machines(state(), state())
	require.NoError(t, err)
	for _, o := range objects {
		jp, err := cs.JSONPatch(o)
		require.NoError(t, err)
		require.Equal(t, "[]", string(jp), "CAPI rejects an empty JSONPatch body; [] is a no-op")
		mp, err := cs.MergePatch(o)
		require.NoError(t, err)
		require.Equal(t, "{}", string(mp))
	}
	_, err = diff.ChangeSet{Changes: []diff.Change{{Object: diff.ObjectMachine, Path: "/spec/version"}}}.JSONPatch(diff.ObjectMachine)
	require.ErrorIs(t, err, diff.ErrNoDocument)
}

// TestPatchesOfOneSetConcurrently: copies of a change set share the
// documents their patches are built from, loaded on the first patch; many
// goroutines patching at once get the same patches (run under -race).
func TestPatchesOfOneSetConcurrently(t *testing.T) {
	m, c, u := fixture()
	mutations[0].fn(m, c, u)
	cs, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
	require.NoError(t, err)
	require.False(t, cs.Empty())
	fresh, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
	require.NoError(t, err)
	want := map[diff.Object]string{}
	for _, o := range objects {
		p, err := fresh.JSONPatch(o)
		require.NoError(t, err)
		want[o] = string(p)
	}
	const workers = 8
	got := make([]map[diff.Object]string, workers)
	done := make(chan struct{})
	for i := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			got[i] = map[diff.Object]string{}
			set := cs // a copy sharing the documents
			for _, o := range objects {
				if p, err := set.JSONPatch(o); err == nil {
					got[i][o] = string(p)
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	for i := range workers {
		require.Equal(t, want, got[i], "goroutine %d", i)
	}
}
