package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// CAPIModule is the module whose zip ships the Cluster API CRDs.
const CAPIModule = "sigs.k8s.io/cluster-api"

// capiCRDDirs are the CRD directories inside the cluster-api module that hold
// the kinds upgradekit works with.
var capiCRDDirs = []string{
	"core/config/crd/bases",
	"bootstrap/kubeadm/config/crd/bases",
	"controlplane/kubeadm/config/crd/bases",
}

// ErrCAPIModuleNotFound is matched (errors.Is) when the cluster-api module
// directory cannot be located.
var ErrCAPIModuleNotFound = errors.New("cluster-api module not found")

var (
	capiDirMu sync.Mutex
	capiDir   string // cached after the first success
)

// CAPICRDPaths returns the directories of the CAPI core, kubeadm bootstrap
// and kubeadm control plane CRDs inside the sigs.k8s.io/cluster-api module
// this binary was built with. The module directory comes from, in order: the
// UPGRADEKIT_CAPI_DIR environment variable, the module cache entry for the
// version recorded in the binary's build info (downloaded through the Go
// module proxy with `go mod download` if absent).
func CAPICRDPaths(ctx context.Context) ([]string, error) {
	capiDirMu.Lock()
	if capiDir == "" {
		dir, err := findCAPIModule(ctx)
		if err != nil {
			capiDirMu.Unlock()
			return nil, err
		}
		capiDir = dir
	}
	dir := capiDir
	capiDirMu.Unlock()
	paths := make([]string, 0, len(capiCRDDirs))
	for _, d := range capiCRDDirs {
		p := filepath.Join(dir, filepath.FromSlash(d))
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: %s has no %s", ErrCAPIModuleNotFound, dir, d)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func findCAPIModule(ctx context.Context) (string, error) {
	if dir := os.Getenv("UPGRADEKIT_CAPI_DIR"); dir != "" {
		return dir, nil
	}
	version, err := capiVersion()
	if err != nil {
		// Test binaries carry no dependency list in their build info; ask
		// the go command about the module the test runs in instead.
		var listErr error
		if version, listErr = capiVersionFromGoList(ctx); listErr != nil {
			return "", fmt.Errorf("%w; %w", err, listErr)
		}
	}
	// `go mod download -json` answers from the module cache when the zip is
	// there and otherwise fetches it through GOPROXY. Run it outside any
	// module or workspace so the caller's go.mod cannot interfere.
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", CAPIModule+"@"+version)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Dir == "" {
		msg := info.Error
		if msg == "" {
			msg = stderr.String()
		}
		if runErr != nil && msg == "" {
			msg = runErr.Error()
		}
		return "", fmt.Errorf("%w: go mod download %s@%s: %s (set UPGRADEKIT_CAPI_DIR to a checkout instead)",
			ErrCAPIModuleNotFound, CAPIModule, version, msg)
	}
	return info.Dir, nil
}

// capiVersion reads the cluster-api version from the build info. A binary
// that only imports CAPI's API types links sigs.k8s.io/cluster-api/api and not
// the main module; the two are released together with the same version, so
// that version names the module zip holding the matching CRDs.
func capiVersion() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("%w: binary has no build info (set UPGRADEKIT_CAPI_DIR)", ErrCAPIModuleNotFound)
	}
	for _, want := range []string{CAPIModule, CAPIModule + "/api"} {
		for _, dep := range bi.Deps {
			if dep.Path != want {
				continue
			}
			if dep.Replace == nil {
				return dep.Version, nil
			}
			if dep.Replace.Version != "" {
				return dep.Replace.Version, nil
			}
			return "", fmt.Errorf("%w: %s is replaced by the directory %s; set UPGRADEKIT_CAPI_DIR to the cluster-api checkout",
				ErrCAPIModuleNotFound, want, dep.Replace.Path)
		}
	}
	return "", fmt.Errorf("%w: neither %s nor %s/api is a dependency of this binary (set UPGRADEKIT_CAPI_DIR)",
		ErrCAPIModuleNotFound, CAPIModule, CAPIModule)
}

// capiVersionFromGoList asks `go list -m` in the working directory (a test
// runs in its package directory, inside the module under test) which version
// of cluster-api or its api module the build list holds.
func capiVersionFromGoList(ctx context.Context) (string, error) {
	for _, mod := range []string{CAPIModule, CAPIModule + "/api"} {
		cmd := exec.CommandContext(ctx, "go", "list", "-m", "-json", mod)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Run(); err != nil {
			continue
		}
		var info struct {
			Version string
			Replace *struct{ Version string }
		}
		if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
			continue
		}
		if info.Replace != nil && info.Replace.Version != "" {
			return info.Replace.Version, nil
		}
		if info.Version != "" {
			return info.Version, nil
		}
	}
	return "", fmt.Errorf("`go list -m %s` found no version in the current module", CAPIModule+"/api")
}

// capiCRDs reads the Cluster API CRDs (CAPICRDPaths) and labels the
// kubeadm bootstrap and control plane ones with the contract versions they
// follow, as Cluster API's kustomizations do when it is installed
// (bootstrap/kubeadm/config/crd/kustomization.yaml): Cluster API's
// controllers refuse a KubeadmConfigTemplate or KubeadmControlPlane whose
// CRD lacks them.
func capiCRDs(ctx context.Context) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := CAPICRDPaths(ctx)
	if err != nil {
		return nil, err
	}
	opts := crenvtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}
	if err := crenvtest.ReadCRDFiles(&opts); err != nil {
		return nil, fmt.Errorf("reading the Cluster API CRDs: %w", err)
	}
	for _, crd := range opts.CRDs {
		switch crd.Spec.Group {
		case "bootstrap.cluster.x-k8s.io", "controlplane.cluster.x-k8s.io":
			if crd.Labels == nil {
				crd.Labels = map[string]string{}
			}
			crd.Labels["cluster.x-k8s.io/v1beta1"] = "v1beta1"
			crd.Labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
		}
	}
	return opts.CRDs, nil
}
