package kubeadmnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
)

// Subnet is the network every Network uses inside its own namespaces:
// 198.18.0.0/24, from the range RFC 2544 sets aside for testing network
// devices. It is reachable only from the namespaces a Network creates;
// nothing routes it to or from the machine's own interfaces.
const Subnet = "198.18.0.0/24"

const gateway = "198.18.0.1"

// Network is a private layer-2 segment: a bridge inside a network
// namespace of its own, to which each Node's namespace is connected by a
// veth pair. It has no route out of the machine: the nodes reach each
// other and nothing else.
type Network struct {
	id     string
	sw     string // the switch namespace
	mu     sync.Mutex
	next   int
	closed bool
	netns  []string
}

// NewNetwork creates the switch namespace and its bridge.
func NewNetwork(ctx context.Context) (*Network, error) {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	n := &Network{id: hex.EncodeToString(b[:]), next: 11}
	n.sw = "uk-" + n.id + "-sw"
	steps := [][]string{
		{"ip", "netns", "add", n.sw},
		{"ip", "-n", n.sw, "link", "set", "lo", "up"},
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "addr", "add", gateway + "/24", "dev", "br0"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
	}
	n.netns = append(n.netns, n.sw)
	for _, argv := range steps {
		if err := run(ctx, argv...); err != nil {
			return nil, errors.Join(err, n.Close(context.WithoutCancel(ctx)))
		}
	}
	return n, nil
}

// attach creates a namespace for a node, connects it to the bridge and
// returns the namespace's name and the node's address.
func (n *Network) attach(ctx context.Context, node string) (netns, ip string, err error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return "", "", errors.New("nodetest: network is closed")
	}
	host := n.next
	n.next++
	netns = fmt.Sprintf("uk-%s-%d", n.id, host)
	n.netns = append(n.netns, netns)
	n.mu.Unlock()
	if host > 250 {
		return "", "", errors.New("nodetest: network is full")
	}
	ip = fmt.Sprintf("198.18.0.%d", host)
	// Interface names are at most 15 bytes.
	outer, inner := fmt.Sprintf("uk%s%d", n.id, host), "eth0"
	steps := [][]string{
		{"ip", "netns", "add", netns},
		{"ip", "-n", netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.sw, "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", netns},
		{"ip", "-n", n.sw, "link", "set", outer, "master", "br0", "up"},
		{"ip", "-n", netns, "addr", "add", ip + "/24", "dev", inner},
		{"ip", "-n", netns, "link", "set", inner, "up"},
		// A default route, so that kubeadm and the kubelet find an
		// interface; it leads to the bridge and no further.
		{"ip", "-n", netns, "route", "add", "default", "via", gateway},
		{"ip", "netns", "exec", netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, argv := range steps {
		if err := run(ctx, argv...); err != nil {
			return "", "", err
		}
	}
	return netns, ip, nil
}

// Close deletes every namespace of the network (and with them their
// interfaces, routes and iptables rules). Nodes must be stopped first.
func (n *Network) Close(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	names := n.netns
	n.netns = nil
	n.mu.Unlock()
	var errs []error
	for i := len(names) - 1; i >= 0; i-- {
		if err := run(ctx, "ip", "netns", "del", names[i]); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run runs argv (never through a shell) and returns its output in the
// error when it fails.
func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
