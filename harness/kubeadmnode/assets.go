package kubeadmnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrAssetsMissing is wrapped when a version's binaries are not where
// they were said to be (build them with hack/node-assets.sh VERSION).
var ErrAssetsMissing = errors.New("node assets missing")

// AssetsEnvVar names the environment variable that maps versions to
// asset directories, as `make e2e-node` sets it:
// "v1.36.3=/path/a,v1.37.2=/path/b".
const AssetsEnvVar = "UPGRADEKIT_NODE_ASSETS"

// assetBinaries are the files hack/node-assets.sh puts in a version's
// directory.
var assetBinaries = []string{
	"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"etcd", "etcdctl", "etcdutl", "pause", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap",
}

// Assets are one Kubernetes version's binaries, as hack/node-assets.sh
// builds them, and the image tags kubeadm of that version deploys.
type Assets struct {
	// Dir holds the binaries.
	Dir string
	// Version is the Kubernetes version ("v1.36.3").
	Version string
	// EtcdImageTag is the etcd image tag kubeadm of Version deploys
	// ("3.6.8-0"); PauseVersion the pause image tag ("3.10.2").
	EtcdImageTag, PauseVersion string
}

// Bin returns the path of one of the version's binaries ("kubeadm",
// "cni/bridge").
func (a Assets) Bin(name string) string { return filepath.Join(a.Dir, filepath.FromSlash(name)) }

var versionRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// LoadAssets reads a directory written by hack/node-assets.sh: its
// versions.env and every binary.
func LoadAssets(dir string) (Assets, error) {
	f, err := os.Open(filepath.Join(dir, "versions.env"))
	if err != nil {
		return Assets{}, fmt.Errorf("nodetest: %w: %v", ErrAssetsMissing, err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok {
			vars[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return Assets{}, fmt.Errorf("nodetest: %s: %w", f.Name(), err)
	}
	a := Assets{Dir: dir, Version: vars["KUBERNETES_VERSION"], EtcdImageTag: vars["ETCD_IMAGE_TAG"], PauseVersion: vars["PAUSE_VERSION"]}
	if !versionRE.MatchString(a.Version) || a.EtcdImageTag == "" || a.PauseVersion == "" {
		return Assets{}, fmt.Errorf("nodetest: %s: want KUBERNETES_VERSION, ETCD_IMAGE_TAG and PAUSE_VERSION, got %v", f.Name(), vars)
	}
	for _, b := range assetBinaries {
		st, err := os.Stat(a.Bin(b))
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return Assets{}, fmt.Errorf("nodetest: %w: %s has no executable %s", ErrAssetsMissing, dir, b)
		}
	}
	return a, nil
}

// AssetsFromEnv returns the assets AssetsEnvVar names for version.
func AssetsFromEnv(version string) (Assets, error) {
	v := os.Getenv(AssetsEnvVar)
	for _, kv := range strings.Split(v, ",") {
		k, dir, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == version {
			a, err := LoadAssets(dir)
			if err != nil {
				return Assets{}, err
			}
			if a.Version != version {
				return Assets{}, fmt.Errorf("nodetest: %s=%s holds %s, not %s", AssetsEnvVar, dir, a.Version, version)
			}
			return a, nil
		}
	}
	return Assets{}, fmt.Errorf("nodetest: %w: %s=%q names no directory for %s (hack/node-assets.sh %s prints one)", ErrAssetsMissing, AssetsEnvVar, v, version, version)
}

// ControlPlaneImages returns the images a kubeadm control plane of the
// assets' version runs with stacked etcd: kube-apiserver,
// kube-controller-manager, kube-scheduler, etcd and pause, named as
// kubeadm names them under registry.k8s.io. kube-proxy and CoreDNS are
// not among them: nodes of this package skip both addons.
func (a Assets) ControlPlaneImages() []Image {
	img := func(name, tag, bin string) Image {
		return Image{Name: "registry.k8s.io/" + name + ":" + tag, Files: map[string]string{"/usr/local/bin/" + bin: a.Bin(bin)}}
	}
	return []Image{
		img("kube-apiserver", a.Version, "kube-apiserver"),
		img("kube-controller-manager", a.Version, "kube-controller-manager"),
		img("kube-scheduler", a.Version, "kube-scheduler"),
		img("etcd", a.EtcdImageTag, "etcd"),
		a.PauseImage(),
	}
}

// PauseImage returns the pod sandbox image (every node needs it).
func (a Assets) PauseImage() Image {
	return Image{Name: "registry.k8s.io/pause:" + a.PauseVersion, Files: map[string]string{"/pause": a.Bin("pause")}, Entrypoint: []string{"/pause"}}
}
