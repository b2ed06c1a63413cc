package simulator

import (
	"fmt"
	"github.com/upgradekit/upgradekit/strategy"
	"sync"
)

// Fleet is one simulated Host per node of a Cluster, sharing the cluster's
// kubeadm state: `kubeadm upgrade node` on any host follows the version
// `kubeadm upgrade apply` last set on a control plane host, and fails
// before that, as kubeadm does. It is safe for concurrent use.
type Fleet struct {
	mu     sync.Mutex
	hosts  []*Host
	byName map[string]*Host
	state  *kubeadmState
	opts   []HostOption
}

// NewFleet builds a Host for every node of cl (Cluster.Nodes), at its
// pool's version, with opts applied to each. Pass WithNodeClient with a
// client holding cl's objects so kubelet restarts show on the Nodes.
func NewFleet(cl *Cluster, opts ...HostOption) (*Fleet, error) {
	if cl == nil {
		return nil, errNilCluster
	}
	if cl.err != nil {
		return nil, cl.err
	}
	nodes := cl.Nodes()
	version := ""
	if cl.cp != nil {
		version = cl.cp.version
	} else if len(nodes) > 0 {
		version = nodes[0].Version
	}
	f := &Fleet{byName: map[string]*Host{}, state: &kubeadmState{version: version}, opts: opts}
	for _, n := range nodes {
		h, err := newHost(n.Name, n.Role, n.Version, f.state, opts)
		if err != nil {
			return nil, err
		}
		h.notReady = !n.Ready
		f.hosts = append(f.hosts, h)
		f.byName[n.Name] = h
	}
	return f, nil
}

// NewEmptyFleet returns a Fleet with no hosts, for nodes that appear one
// by one (Add): a provisioner that boots machines as they are created.
// opts apply to every host Add builds.
func NewEmptyFleet(opts ...HostOption) *Fleet {
	return &Fleet{byName: map[string]*Host{}, state: &kubeadmState{}, opts: opts}
}

// Add boots a new node: a Host for node at version with the fleet's
// options, then opts. The first control plane host of a fleet whose
// kubeadm configuration has no version yet sets it, as `kubeadm init`
// does; a worker joining such a fleet leaves it unset. A name already in
// the fleet is an error wrapping ErrInvalidCluster.
func (f *Fleet) Add(node string, role strategy.Role, version string, opts ...HostOption) (*Host, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byName[node]; ok {
		return nil, fmt.Errorf("simulator: %w: Fleet.Add: node %q is already in the fleet", ErrInvalidCluster, node)
	}
	h, err := newHost(node, role, version, f.state, append(append([]HostOption(nil), f.opts...), opts...))
	if err != nil {
		return nil, err
	}
	if role == strategy.RoleControlPlane {
		f.state.mu.Lock()
		if f.state.version == "" {
			f.state.version = version
		}
		f.state.mu.Unlock()
	}
	f.hosts = append(f.hosts, h)
	f.byName[node] = h
	return h, nil
}

// Remove takes a node's host out of the fleet (the machine is gone). It
// reports whether the node was there.
func (f *Fleet) Remove(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.byName[node]
	if !ok {
		return false
	}
	delete(f.byName, node)
	for i, o := range f.hosts {
		if o == h {
			f.hosts = append(f.hosts[:i], f.hosts[i+1:]...)
			break
		}
	}
	return true
}

// Host returns the host of the named node, or nil.
func (f *Fleet) Host(node string) *Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[node]
}

// Hosts returns every host, in Cluster.Nodes order, then in the order Add
// booted them.
func (f *Fleet) Hosts() []*Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Host(nil), f.hosts...)
}

// ClusterVersion returns the version kubeadm's cluster configuration is at
// ("" before a control plane host joined an empty fleet).
func (f *Fleet) ClusterVersion() string {
	if f.state == nil {
		return ""
	}
	return f.state.get()
}
