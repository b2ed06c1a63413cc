// Command pause is the sandbox process of the node images harness/kubeadmnode
// assembles. Like Kubernetes' pause (build/pause/linux/pause.c), it prints
// its version and exits for -v (kubeadm's upgrade health check runs a Job
// of `pause -v` and waits for it to complete), and otherwise blocks until
// SIGINT or SIGTERM, reaping, as PID 1 of a pod sandbox, the children
// re-parented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is what -v prints, in pause.c's form.
const version = "pause.c upgradekit-nodetest"

func main() {
	if len(os.Args) > 1 && strings.EqualFold(os.Args[1], "-v") {
		fmt.Println(version)
		return
	}
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
