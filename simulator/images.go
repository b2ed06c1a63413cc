package simulator

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

var (
	imagesScriptOnce sync.Once
	imagesScript     string
)

// knownImagesScript learns the images step's script (kubeadm.StepImages,
// Config.ImportImages) from a plan the library generates.
func knownImagesScript() string {
	imagesScriptOnce.Do(func() {
		for s := range learnScripts(func() (nodeexec.Plan, error) {
			return kubeadm.NewPlan(kubeadm.Config{Node: "learn", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.30.0", ToVersion: "v1.31.0", ImportImages: true})
		}, scriptSource[bool]{kubeadm.StepImages, runArgv, true}) {
			imagesScript = s
		}
	})
	return imagesScript
}

func init() {
	planScripts = append(planScripts, func(_ context.Context, h *Host, script string, args []string, _ map[string]string) (int, string, bool) {
		if s := knownImagesScript(); s == "" || script != s {
			return 0, "", false
		}
		code, out := h.locked(func() (int, string) { return h.importImages(args) })
		return code, out, true
	})
}

// importImages interprets the images step: $1 the staged images directory,
// $2 containerd's socket. Like `ctr images import` it needs containerd
// running, and like the script it fails when the directory holds no
// *.tar archive. The host keeps no image store: importing changes nothing
// the host reports. h.mu is held.
func (h *Host) importImages(args []string) (int, string) {
	if len(args) != 2 || args[0] == "" || args[1] == "" {
		return 2, fmt.Sprintf("fake host: images script expects a directory and a socket, got %q", args)
	}
	dir := path.Clean(args[0])
	n := 0
	for _, f := range h.under(dir) {
		if path.Dir(f) == dir && strings.HasSuffix(f, ".tar") {
			if h.units["containerd"] != UnitActive {
				return 1, fmt.Sprintf("ctr: failed to dial %q: connection error: dial unix %s: connect: no such file or directory", args[1], args[1])
			}
			n++
		}
	}
	if n == 0 {
		return 1, fmt.Sprintf("images: no image archive (*.tar) in %s", args[0])
	}
	return 0, fmt.Sprintf("images: imported %d archive(s)", n)
}
