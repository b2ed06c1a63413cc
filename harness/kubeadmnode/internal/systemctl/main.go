// Command systemctl stands in for systemd's systemctl on the nodes of
// package nodetest, where PID 1 is not systemd. It sends its arguments to
// the harness's supervisor over the unix socket SocketPath and exits with
// the code the supervisor answers, printing what it says: the supervisor
// runs containerd and the kubelet as processes of the harness, outside
// the caller's cgroups and capabilities, as systemd would run them.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"
)

// SocketPath is where the supervisor listens, inside the node.
const SocketPath = "/run/upgradekit-node/systemctl.sock"

type reply struct {
	Code   int    `json:"code"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

func main() {
	conn, err := net.DialTimeout("unix", SocketPath, 10*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "systemctl (upgradekit node stand-in): %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "systemctl (upgradekit node stand-in): %v\n", err)
		os.Exit(1)
	}
	var r reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&r); err != nil {
		fmt.Fprintf(os.Stderr, "systemctl (upgradekit node stand-in): %v\n", err)
		os.Exit(1)
	}
	fmt.Fprint(os.Stdout, r.Stdout)
	fmt.Fprint(os.Stderr, r.Stderr)
	os.Exit(r.Code)
}
