package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestKustomizeBase builds deploy/ as a kustomize base, with kustomize's
// own library: alone it gives exactly extension.yaml's objects, and an
// overlay like the one its kustomization.yaml shows sets the images (by
// digest), the upgrader bundle and its checksums ConfigMap to flags the
// extension accepts.
func TestKustomizeBase(t *testing.T) {
	fs := inMemory(t, "deploy", "/base", "kustomization.yaml", "extension.yaml")
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
  digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: upgradekit-extension, namespace: upgradekit-system}
    spec:
      template:
        spec:
          containers:
          - name: extension
            env:
            - name: UPGRADER_IMAGE
              value: registry.mycorp/upgradekit-upgrader@sha256:2222222222222222222222222222222222222222222222222222222222222222
configMapGenerator:
- name: upgradekit-bundle-checksums
  namespace: upgradekit-system
  files:
  - v1.37.0=bundles/v1.37.0/SHA256SUMS
`)))
	require.NoError(t, fs.WriteFile("/overlay/bundles/v1.37.0/SHA256SUMS", []byte(strings.Repeat("3", 64)+"  kubernetes/kubeadm\n")))
	overlay, err := k.Run(fs, "/overlay")
	require.NoError(t, err)
	var dep appsv1.Deployment
	var sums corev1.ConfigMap
	for _, r := range overlay.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		switch r.GetKind() {
		case "Deployment":
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &dep))
		case "ConfigMap":
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &sums))
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(t, "registry.mycorp/upgradekit-inplace-extension@sha256:1111111111111111111111111111111111111111111111111111111111111111", c.Image)
	o, err := parseFlags(containerArgs(c), io.Discard)
	require.NoError(t, err, "the overlay's args parse")
	require.Equal(t, "registry.mycorp/upgradekit-upgrader@sha256:2222222222222222222222222222222222222222222222222222222222222222", o.upgraderImage,
		"the env UPGRADER_IMAGE, which the overlay example sets by name, is -upgrader-image")
	// The generated ConfigMap (its name has kustomize's hash suffix) is
	// the one the Deployment mounts where -bundle-checksums-dir reads.
	require.True(t, strings.HasPrefix(sums.Name, "upgradekit-bundle-checksums-"), sums.Name)
	require.Contains(t, sums.Data, "v1.37.0")
	var mounted string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			mounted = v.ConfigMap.Name
		}
	}
	require.Equal(t, sums.Name, mounted)
}

// inMemory copies the named files of srcDir into a new in-memory file
// system under dir, for kustomize's library to build.
func inMemory(t *testing.T, srcDir, dir string, names ...string) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(srcDir, name))
		require.NoError(t, err)
		require.NoError(t, fs.WriteFile(dir+"/"+name, b))
	}
	return fs
}
