package kubeadmnode_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/upgradekit/upgradekit/harness/kubeadmnode"
)

// WriteImages turns static binaries into images a node's containerd
// imports (`ctr images import`), named as kubeadm names them.
func ExampleWriteImages() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	etcd := filepath.Join(dir, "etcd")
	_ = os.WriteFile(etcd, []byte("a static binary"), 0o755)

	var archive bytes.Buffer
	err := kubeadmnode.WriteImages(&archive, kubeadmnode.Image{
		Name:  "registry.k8s.io/etcd:3.6.8-0",
		Files: map[string]string{"/usr/local/bin/etcd": etcd},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := tar.NewReader(&archive)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Name == "manifest.json" {
			var m []struct{ RepoTags []string }
			data, _ := io.ReadAll(tr)
			_ = json.Unmarshal(data, &m)
			fmt.Println(m[0].RepoTags[0])
		}
	}
	// Output: registry.k8s.io/etcd:3.6.8-0
}
