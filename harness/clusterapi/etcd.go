package clusterapi

// This file runs a stacked etcd for the harness's control planes: one real
// etcd member (the envtest etcd binary) per control plane node, and in
// front of each node a kubelet HTTPS endpoint that serves the API server's
// pods/portforward subresource, as KubeadmControlPlane reaches etcd
// through it (kube-system/etcd-<node>, port 2379).

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EtcdPort is the port of an etcd Pod the harness's kubelets forward to,
// kubeadm's etcd client port.
const EtcdPort = 2379

// etcdClusters runs the stacked etcd of every cluster whose control plane
// machines use it.
type etcdClusters struct {
	bin, dir string
	mu       sync.Mutex
	clusters map[types.NamespacedName]*etcdCluster
}

// etcdCluster is one cluster's members, named after their nodes, with TLS
// on their client URLs from the cluster's etcd CA (the <cluster>-etcd
// Secret KubeadmControlPlane generates) and plain HTTP between peers, on
// loopback ports.
type etcdCluster struct {
	key     types.NamespacedName
	dir     string
	ca      []byte
	client  *tls.Config // the harness's own client certificate
	members map[string]*etcdMember
}

// etcdMember is one etcd process.
type etcdMember struct {
	name              string
	clientURL, peerAt string
	cmd               *exec.Cmd
	exited            chan struct{}
	err               error // what Wait returned, once exited is closed
}

// etcdCA reads the cluster's etcd CA certificate and key.
func etcdCA(ctx context.Context, c client.Reader, key types.NamespacedName) (crt []byte, signer crypto.Signer, err error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-etcd"}, &s); err != nil {
		return nil, nil, fmt.Errorf("the etcd CA of cluster %s: %w", key, err)
	}
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, nil, fmt.Errorf("the etcd CA of cluster %s (Secret %s-etcd needs tls.crt and tls.key): %w", key, key.Name, err)
	}
	k, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("the etcd CA key of cluster %s is a %T", key, pair.PrivateKey)
	}
	return s.Data[corev1.TLSCertKey], k, nil
}

// issue returns a certificate and key, PEM encoded, signed by the CA: for
// 127.0.0.1 with server (and client) usage when server, else a client's.
func issue(caPEM []byte, caKey crypto.Signer, cn string, server bool) (crt, key []byte, err error) {
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return nil, nil, errors.New("etcd CA: no PEM certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return pemPair(der, k)
}

// cluster returns the cluster's etcd, its certificates written on first
// use. A cluster whose etcd CA changed was deleted and created again
// under its name: its old members are stopped and forgotten.
func (e *etcdClusters) cluster(ctx context.Context, c client.Reader, key types.NamespacedName) (*etcdCluster, error) {
	caPEM, caKey, err := etcdCA(ctx, c, key)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ec := e.clusters[key]; ec != nil {
		if bytes.Equal(ec.ca, caPEM) {
			return ec, nil
		}
		for _, m := range ec.members {
			m.stop()
		}
		delete(e.clusters, key)
	}
	dir := filepath.Join(e.dir, key.Namespace+"_"+key.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	srvCrt, srvKey, err := issue(caPEM, caKey, "etcd-server", true)
	if err != nil {
		return nil, err
	}
	cliCrt, cliKey, err := issue(caPEM, caKey, "upgradekit-capitest", false)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"ca.crt": caPEM, "server.crt": srvCrt, "server.key": srvKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	pair, err := tls.X509KeyPair(cliCrt, cliKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	ec := &etcdCluster{key: key, dir: dir, ca: caPEM, members: map[string]*etcdMember{},
		client: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}}
	e.clusters[key] = ec
	return ec, nil
}

// join starts node's member: the first of its cluster starts a new
// cluster (kubeadm init); the others are added to it first as learners,
// started with the cluster's members, and promoted once in sync (kubeadm
// join with stacked etcd, learner mode being kubeadm's default since
// v1.32). A member that runs already is left as it is. A join that fails
// removes what it added, so that a retry starts again from a whole
// cluster.
func (e *etcdClusters) join(ctx context.Context, c client.Reader, key types.NamespacedName, node string) (err error) {
	ec, err := e.cluster(ctx, c, key)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if m := ec.members[node]; m != nil && !m.done() {
		e.mu.Unlock()
		return nil
	}
	running := ec.running()
	e.mu.Unlock()
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	m := &etcdMember{name: node, clientURL: fmt.Sprintf("https://127.0.0.1:%d", ports[0]), peerAt: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	state, initial := "new", node+"="+m.peerAt
	var learner uint64
	if len(running) > 0 {
		if learner, initial, err = ec.addLearner(ctx, running, node, m.peerAt); err != nil {
			return err
		}
		state = "existing"
	}
	defer func() {
		if err == nil {
			return
		}
		m.stop()
		e.mu.Lock()
		if ec.members[node] == m {
			delete(ec.members, node)
		}
		e.mu.Unlock()
		if learner != 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if cli, derr := ec.dial(rctx, running); derr == nil {
				if _, rerr := cli.MemberRemove(rctx, learner); rerr != nil {
					err = errors.Join(err, fmt.Errorf("removing the learner added for %s: %w", node, rerr))
				}
				_ = cli.Close()
			}
		}
	}()
	logName, err := e.run(ec, key, m, state, initial)
	if err != nil {
		return err
	}
	e.mu.Lock()
	ec.members[node] = m
	e.mu.Unlock()
	// Wait until the member answers for itself, then promote it: kubeadm
	// waits for both before it goes on.
	deadline := time.Now().Add(time.Minute)
	for {
		err = ec.ready(ctx, m, learner, running)
		if err == nil {
			return nil
		}
		select {
		case <-m.exited:
			return fmt.Errorf("etcd member %s exited: %v (log %s)", node, m.err, logName)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s is not ready: %w (log %s)", node, err, logName)
		}
	}
}

// addLearner adds a learner at peerURL for node through the members at
// urls, and returns its ID and the --initial-cluster it starts with.
func (ec *etcdCluster) addLearner(ctx context.Context, urls []string, node, peerURL string) (uint64, string, error) {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cli, err := ec.dial(actx, urls)
	if err != nil {
		return 0, "", err
	}
	defer cli.Close()
	resp, err := cli.MemberAddAsLearner(actx, []string{peerURL})
	if err != nil {
		return 0, "", fmt.Errorf("etcd MemberAddAsLearner for %s: %w", node, err)
	}
	var peers []string
	for _, mem := range resp.Members {
		name := mem.Name
		switch {
		case mem.ID == resp.Member.ID:
			name = node
		case name == "":
			name = fmt.Sprintf("%x", mem.ID) // added, not started yet
		}
		for _, u := range mem.PeerURLs {
			peers = append(peers, name+"="+u)
		}
	}
	return resp.Member.ID, strings.Join(peers, ","), nil
}

// ready checks that m answers for itself and, when it joined as learner
// (not 0), promotes it through the members at urls (which fails until it
// is in sync with the leader).
func (ec *etcdCluster) ready(ctx context.Context, m *etcdMember, learner uint64, urls []string) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := ec.dial(sctx, []string{m.clientURL})
	if err != nil {
		return err
	}
	_, err = cli.Status(sctx, m.clientURL)
	_ = cli.Close()
	if err != nil || learner == 0 {
		return err
	}
	cli, err = ec.dial(sctx, urls)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.MemberPromote(sctx, learner); err != nil {
		return fmt.Errorf("promoting %s: %w", m.name, err)
	}
	return nil
}

// run starts m's process in state with initial as its cluster, and
// returns its log file's name.
func (e *etcdClusters) run(ec *etcdCluster, key types.NamespacedName, m *etcdMember, state, initial string) (string, error) {
	data := filepath.Join(ec.dir, m.name)
	if err := os.RemoveAll(data); err != nil {
		return "", err
	}
	logf, err := os.Create(filepath.Join(ec.dir, m.name+".log"))
	if err != nil {
		return "", err
	}
	m.cmd = exec.Command(e.bin, //nolint:gosec // the envtest etcd binary, with arguments the harness builds
		"--name="+m.name, "--data-dir="+data,
		"--listen-client-urls="+m.clientURL, "--advertise-client-urls="+m.clientURL,
		"--listen-peer-urls="+m.peerAt, "--initial-advertise-peer-urls="+m.peerAt,
		"--initial-cluster="+initial, "--initial-cluster-state="+state, "--initial-cluster-token="+key.String(),
		"--cert-file="+filepath.Join(ec.dir, "server.crt"), "--key-file="+filepath.Join(ec.dir, "server.key"),
		"--client-cert-auth", "--trusted-ca-file="+filepath.Join(ec.dir, "ca.crt"),
		"--unsafe-no-fsync", "--log-level=warn")
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	// Killed with the test process, even by SIGKILL, when no Stop runs.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		_ = logf.Close()
		return "", fmt.Errorf("starting etcd member %s: %w", m.name, err)
	}
	m.exited = make(chan struct{})
	go func() {
		m.err = m.cmd.Wait()
		_ = logf.Close()
		close(m.exited)
	}()
	return logf.Name(), nil
}

// running lists the client URLs of the members whose process runs.
func (ec *etcdCluster) running() []string {
	var urls []string
	for _, m := range ec.members {
		if !m.done() {
			urls = append(urls, m.clientURL)
		}
	}
	return urls
}

// dial is an etcd client of the members at urls, with the harness's
// client certificate.
func (ec *etcdCluster) dial(ctx context.Context, urls []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: urls, TLS: ec.client.Clone(), DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()})
}

// done reports whether the member's process has exited.
func (m *etcdMember) done() bool {
	if m.exited == nil {
		return true
	}
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// stop kills the member's process and waits for it.
func (m *etcdMember) stop() {
	if m.done() {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// member returns node's member in cluster key (nil if it has none).
func (e *etcdClusters) member(key types.NamespacedName, node string) *etcdMember {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ec := e.clusters[key]; ec != nil {
		return ec.members[node]
	}
	return nil
}

// leave stops node's member, wherever it is: Cluster API removes a
// deleted machine's member from the cluster itself (MemberRemove, in its
// pre-terminate hook) before the machine goes.
func (e *etcdClusters) leave(node string) {
	e.mu.Lock()
	var ms []*etcdMember
	for _, ec := range e.clusters {
		if m := ec.members[node]; m != nil {
			ms = append(ms, m)
			delete(ec.members, node)
		}
	}
	e.mu.Unlock()
	for _, m := range ms {
		m.stop()
	}
}

// stop stops every member and removes their data.
func (e *etcdClusters) stop() error {
	e.mu.Lock()
	var ms []*etcdMember
	for _, ec := range e.clusters {
		for _, m := range ec.members {
			ms = append(ms, m)
		}
	}
	e.clusters = map[types.NamespacedName]*etcdCluster{}
	e.mu.Unlock()
	for _, m := range ms {
		m.stop()
	}
	return os.RemoveAll(e.dir)
}

// EtcdMember is what an etcd member says of itself and of its cluster.
type EtcdMember struct {
	// Name is the member's name, its node's.
	Name string
	// Learner is true for a member not yet promoted.
	Learner bool
}

// EtcdMembers lists the members of cluster's stacked etcd, as the
// harness's own etcd client reads them (a linearizable MemberList, which
// needs a quorum), and the alarms raised. It fails for a cluster without
// stacked etcd members.
func (p *Provider) EtcdMembers(ctx context.Context, cluster types.NamespacedName) ([]EtcdMember, []string, error) {
	if p == nil || p.etcd == nil {
		return nil, nil, errors.New("capitest: the provider runs no etcd (WithEtcd)")
	}
	p.etcd.mu.Lock()
	ec := p.etcd.clusters[cluster]
	var urls []string
	if ec != nil {
		urls = ec.running()
	}
	p.etcd.mu.Unlock()
	if len(urls) == 0 {
		return nil, nil, fmt.Errorf("capitest: cluster %s has no running etcd member", cluster)
	}
	cli, err := ec.dial(ctx, urls)
	if err != nil {
		return nil, nil, err
	}
	defer cli.Close()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return nil, nil, err
	}
	var out []EtcdMember
	for _, m := range list.Members {
		out = append(out, EtcdMember{Name: m.Name, Learner: m.IsLearner})
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		return nil, nil, err
	}
	var raised []string
	for _, a := range alarms.Alarms {
		raised = append(raised, fmt.Sprintf("%s on member %x", a.Alarm, a.MemberID))
	}
	return out, raised, nil
}

// kubeletServer is a node's kubelet HTTPS endpoint: it serves the API
// server's pods/portforward to kube-system/etcd-<node>:2379 (SPDY, as the
// API server speaks to kubelets that do not declare websockets; the
// kubelet's own port-forward server from k8s.io/cri-streaming), and
// nothing else. The API server does not check a kubelet's certificate
// unless told a CA (envtest is not), and presents no client certificate.
type kubeletServer struct {
	srv  *http.Server
	port int
	done chan struct{}
}

// startKubeletServer serves node's port-forwards to its etcd member,
// found by member at each forward.
func startKubeletServer(node string, member func() *etcdMember) (*kubeletServer, error) {
	crt, key, err := selfSigned(node)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	fwd := etcdForwarder{node: node, member: member}
	mux := http.NewServeMux()
	serve := func(w http.ResponseWriter, r *http.Request) {
		ns, pod, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
		if ns != "kube-system" || pod != "etcd-"+node {
			http.Error(w, fmt.Sprintf("the harness's kubelet of %s forwards only to kube-system/etcd-%s", node, node), http.StatusNotFound)
			return
		}
		opts, err := portforward.NewV4Options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		portforward.ServePortForward(w, r, fwd, pod, uid, opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
	}
	for _, pattern := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+pattern, serve)
		mux.HandleFunc("POST "+pattern, serve)
	}
	ks := &kubeletServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	go func() {
		defer close(ks.done)
		_ = ks.srv.Serve(ln)
	}()
	return ks, nil
}

// stop closes the endpoint and the connections it has not handed over:
// a port-forward's upgraded connection ends with its etcd member or when
// the API server drops it.
func (ks *kubeletServer) stop() {
	_ = ks.srv.Close()
	<-ks.done
}

// etcdForwarder copies a port-forward stream to and from the node's etcd
// member's client port.
type etcdForwarder struct {
	node   string
	member func() *etcdMember
}

// PortForward is portforward.PortForwarder's.
func (f etcdForwarder) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if port != EtcdPort {
		return fmt.Errorf("pod %s has no port %d: the harness forwards etcd's %d", pod, port, EtcdPort)
	}
	m := f.member()
	if m == nil || m.done() {
		return fmt.Errorf("pod %s: no etcd member runs on node %s", pod, f.node)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(m.clientURL, "https://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	// Both ways until both ends are done: the API server's end closing
	// half-closes the connection to etcd (its answers in flight still come
	// back); etcd's end closing resets the stream, so the API server's
	// reader is not left waiting for the idle timeout.
	fromClient, fromEtcd := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(fromClient)
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	go func() {
		defer close(fromEtcd)
		_, _ = io.Copy(stream, conn)
	}()
	select {
	case <-fromEtcd:
		if r, ok := stream.(interface{ Reset() error }); ok {
			_ = r.Reset()
		}
		_ = stream.Close()
		<-fromClient
	case <-fromClient:
		select {
		case <-fromEtcd:
		case <-time.After(10 * time.Second):
			_ = conn.Close()
			<-fromEtcd
		}
	}
	return nil
}

// selfSigned is a self-signed serving certificate for 127.0.0.1.
func selfSigned(cn string) (crt, key []byte, err error) {
	caCrt, caKey, err := newCA(cn + "-kubelet")
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(caCrt, caKey)
	if err != nil {
		return nil, nil, err
	}
	return issue(caCrt, pair.PrivateKey.(crypto.Signer), cn, true)
}
