package fake

// Fleet is one simulated Host per node of a Cluster, sharing the cluster's
// kubeadm state: `kubeadm upgrade node` on any host follows the version
// `kubeadm upgrade apply` last set on a control plane host, and fails
// before that, as kubeadm does.
type Fleet struct {
	hosts  []*Host
	byName map[string]*Host
}

// NewFleet builds a Host for every node of cl (Cluster.Nodes), at its
// pool's version, with opts applied to each. Pass WithNodeClient with a
// client holding cl's objects so kubelet restarts show on the Nodes.
func NewFleet(cl *Cluster, opts ...HostOption) (*Fleet, error) {
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
	ks := &kubeadmState{version: version}
	f := &Fleet{byName: map[string]*Host{}}
	for _, n := range nodes {
		h, err := newHost(n.Name, n.Role, n.Version, ks, opts)
		if err != nil {
			return nil, err
		}
		h.notReady = !n.Ready
		f.hosts = append(f.hosts, h)
		f.byName[n.Name] = h
	}
	return f, nil
}

// Host returns the host of the named node, or nil.
func (f *Fleet) Host(node string) *Host { return f.byName[node] }

// Hosts returns every host, in Cluster.Nodes order.
func (f *Fleet) Hosts() []*Host { return append([]*Host(nil), f.hosts...) }

// ClusterVersion returns the version kubeadm's cluster configuration is at.
func (f *Fleet) ClusterVersion() string {
	if len(f.hosts) == 0 {
		return ""
	}
	return f.hosts[0].kubeadm.get()
}
