package main

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeBase builds deploy/ as a kustomize base, with kustomize's
// own library: alone it gives exactly extension.yaml's objects, and an
// overlay like the one its kustomization.yaml shows sets the image and
// the upgrader bundle to flags the extension accepts.
func TestKustomizeBase(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	for _, name := range []string{"kustomization.yaml", "extension.yaml"} {
		b, err := os.ReadFile("deploy/" + name)
		require.NoError(t, err)
		require.NoError(t, fs.WriteFile("/base/"+name, b))
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())

	base, err := k.Run(fs, "/base")
	require.NoError(t, err)
	want := map[string]bool{}
	for _, obj := range deployManifests(t) {
		want[obj.GetKind()+"/"+obj.GetNamespace()+"/"+obj.GetName()] = true
	}
	got := map[string]bool{}
	for _, r := range base.Resources() {
		got[r.GetKind()+"/"+r.GetNamespace()+"/"+r.GetName()] = true
	}
	require.Equal(t, want, got, "the base is extension.yaml")

	require.NoError(t, fs.WriteFile("/overlay/kustomization.yaml", []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
images:
- name: registry.example/upgradekit-inplace-extension
  newName: registry.mycorp/upgradekit-inplace-extension
  newTag: v0.1.0
patches:
- target: {kind: Deployment, name: upgradekit-extension}
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/args/1
      value: -upgrader-image=registry.mycorp/upgradekit-upgrader:v1.32.0
`)))
	overlay, err := k.Run(fs, "/overlay")
	require.NoError(t, err)
	var dep appsv1.Deployment
	for _, r := range overlay.Resources() {
		if r.GetKind() == "Deployment" {
			m, err := r.Map()
			require.NoError(t, err)
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &dep))
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(t, "registry.mycorp/upgradekit-inplace-extension:v0.1.0", c.Image)
	o, err := parseFlags(c.Args, io.Discard)
	require.NoError(t, err, "the overlay's args parse")
	require.Equal(t, "registry.mycorp/upgradekit-upgrader:v1.32.0", o.upgraderImage, "args[1] is -upgrader-image, which the overlay example replaces")
}
