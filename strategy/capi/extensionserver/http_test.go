package extensionserver_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	krt "k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// hangBound bounds waits that only a hang would reach.
const hangBound = 2 * time.Minute

// served starts opts as a DecideOnly extension on 127.0.0.1 and returns
// its address and the CA that signed its certificate, once it answers.
func served(t *testing.T, opts extensionserver.Options) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	opts.DecideOnly, opts.Host, opts.Port, opts.CertDir = true, "127.0.0.1", port, dir
	s, err := extensionserver.New(nil, withMetrics(t, opts))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(hangBound):
			t.Error("Start did not return after its context ended")
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	require.Eventually(t, func() bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err == nil {
			c.Close()
		}
		return err == nil
	}, hangBound, 20*time.Millisecond)
	return addr, pool
}

func hookPath(t *testing.T, hook runtimecatalog.Hook, name string) string {
	t.Helper()
	catalog := runtimecatalog.New()
	require.NoError(t, runtimehooksv1.AddToCatalog(catalog))
	gvh, err := catalog.GroupVersionHook(hook)
	require.NoError(t, err)
	return runtimecatalog.GVHToPath(gvh, name)
}

func dial(t *testing.T, addr string, pool *x509.CertPool) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(hangBound)))
	return c
}

// filler is an endless body that allocates nothing: a JSON string
// opening, then spaces.
type filler struct{ n int64 }

func (f *filler) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	if f.n == 0 && len(p) > 0 {
		p[0] = '"'
	}
	f.n += int64(len(p))
	return len(p), nil
}

// post sends a POST of size bytes to path on conn (chunked, or with its
// Content-Length) while it reads the answer, and returns the answer's
// status, or 0 and the error if the connection ended without one.
func post(conn net.Conn, path string, size int64, chunked bool) (int, error) {
	head := "POST " + path + " HTTP/1.1\r\nHost: extension\r\nContent-Type: application/json\r\n"
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += "Content-Length: " + strconv.FormatInt(size, 10) + "\r\n\r\n"
	}
	go func() {
		if _, err := io.WriteString(conn, head); err != nil {
			return
		}
		w := io.Writer(conn)
		buf := make([]byte, 32<<10)
		src := &filler{}
		for sent := int64(0); sent < size; {
			n := min(int64(len(buf)), size-sent)
			_, _ = src.Read(buf[:n])
			if chunked {
				if _, err := fmt.Fprintf(w, "%x\r\n", n); err != nil {
					return
				}
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			if chunked {
				if _, err := io.WriteString(w, "\r\n"); err != nil {
					return
				}
			}
			sent += n
		}
		if chunked {
			_, _ = io.WriteString(w, "0\r\n\r\n")
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestBigBodiesAreRefusedWithinMemory is the attack of the security
// issue: 32 callers at once post 20 MiB bodies (Cluster API's own
// handler reads up to 20 MiB each, and with 8 of them the heap went from
// 25 to 381 MiB), half announced with Content-Length, half chunked. Each
// is answered 413 (or 429 past the concurrency limit), and the heap grows
// by less than 128 MiB while they run (sampled; the bodies are streamed
// by the test without being held).
func TestBigBodiesAreRefusedWithinMemory(t *testing.T) {
	addr, pool := served(t, extensionserver.Options{})
	path := hookPath(t, runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine")

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	const callers, size = 32, 20 << 20
	statuses := make([]int, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			conn := dial(t, addr, pool)
			defer conn.Close()
			statuses[i], errs[i] = post(conn, path, size, i%2 == 1)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled

	growth := int64(peak.Load()) - int64(base)
	t.Logf("heap: %d MiB before, peak %d MiB (+%d MiB)", base>>20, peak.Load()>>20, growth>>20)
	tooLarge := 0
	for i, s := range statuses {
		require.NoError(t, errs[i], "caller %d got no answer", i)
		require.Contains(t, []int{http.StatusRequestEntityTooLarge, http.StatusTooManyRequests}, s, "caller %d", i)
		if s == http.StatusRequestEntityTooLarge {
			tooLarge++
		}
	}
	require.Positive(t, tooLarge, "the body limit answered")
	require.Less(t, growth, int64(128<<20), "heap growth under %d concurrent %d MiB bodies", callers, size>>20)
}

// TestSlowBodyIsCut: a body trickled at about a byte a second is cut at
// the read timeout, answered 408, and its connection closed; a connection
// that never finishes its TLS handshake is closed too. (Cluster API's
// server set no read timeout: 200 of 200 such connections were still open
// after 40 s.) The timeouts are short here; what is asserted is that the
// server closes the connection, not how fast.
func TestSlowBodyIsCut(t *testing.T) {
	addr, pool := served(t, extensionserver.Options{HTTPLimits: extensionserver.HTTPLimits{
		ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: 5 * time.Second}})
	path := hookPath(t, runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine")

	conn := dial(t, addr, pool)
	defer conn.Close()
	_, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: extension\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	require.NoError(t, err)
	trickled := make(chan error, 1)
	go func() {
		for {
			time.Sleep(time.Second)
			if _, err := conn.Write([]byte(" ")); err != nil {
				trickled <- err
				return
			}
		}
	}()
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")
	_, err = io.ReadAll(resp.Body) // to the end of the connection
	require.NoError(t, err)
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closed the connection")
	select {
	case err := <-trickled:
		require.Error(t, err)
	case <-time.After(hangBound):
		t.Fatal("the trickle was never refused")
	}

	// A connection that sends nothing: no handshake, closed.
	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(hangBound)))
	_, err = raw.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "closed by the server, not by the test's deadline: %v", err)
}

// TestConcurrencyLimit: past MaxConcurrent requests in progress, a request
// is answered 429 with Retry-After; once they finish, it is served.
func TestConcurrencyLimit(t *testing.T) {
	addr, pool := served(t, extensionserver.Options{HTTPLimits: extensionserver.HTTPLimits{MaxConcurrent: 1, ReadTimeout: hangBound}})
	path := hookPath(t, runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine")
	// Keep-alive, as Cluster API's client: the calls reuse one connection.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	// call posts one request. A transport error is returned, not asserted:
	// the conditions below run in Eventually's goroutine, where a failed
	// require would only stop that goroutine and leave Eventually waiting
	// out hangBound.
	call := func() (*http.Response, error) {
		resp, err := client.Post("https://"+addr+path, "application/json", strings.NewReader(`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"CanUpdateMachineRequest"}`))
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, nil
	}
	resp, err := call()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A request whose body is still coming holds the only slot, once it
	// gets it: a call on the idle keep-alive connection can reach the
	// server first, and then the holder is the one answered 429 (and its
	// connection closed). Such a holder is replaced by a new one.
	var holder *tls.Conn
	hold := func() {
		holder = dial(t, addr, pool)
		_, err := io.WriteString(holder, "POST "+path+" HTTP/1.1\r\nHost: extension\r\nContent-Length: 1000\r\n\r\n{")
		require.NoError(t, err)
	}
	refusedHolder := func() bool {
		if err := holder.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
			return true
		}
		n, err := holder.Read(make([]byte, 1))
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() {
			return false // no answer: it is waiting for its body, in the slot
		}
		return true
	}
	hold()
	holders := 1
	require.Eventually(t, func() bool {
		resp, err := call()
		if err != nil {
			t.Logf("call: %v", err)
			return false
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			return true
		}
		if refusedHolder() {
			holder.Close()
			hold()
			holders++
		}
		return false
	}, hangBound, 20*time.Millisecond)
	t.Logf("holders dialled: %d", holders)
	for range 3 { // the holder still holds the slot; each refusal closes its connection
		refused, err := call()
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
		require.Equal(t, "1", refused.Header.Get("Retry-After"))
		require.True(t, refused.Close, "a refused request's connection is closed")
	}

	holder.Close()
	require.Eventually(t, func() bool {
		resp, err := call()
		if err != nil {
			t.Logf("call: %v", err)
			return false
		}
		return resp.StatusCode == http.StatusOK
	}, hangBound, 20*time.Millisecond)
}

// TestHeaderAndProtocolLimits: attacks the issue did not name. A header
// block past MaxHeaderBytes is refused 431 (controller-runtime's server
// read up to 1 MiB of header per connection); HTTP/2 is never negotiated,
// even when Options.TLSOptions offers it (controller-runtime's server would
// then serve it: rapid reset, streams past the concurrency limit).
func TestHeaderAndProtocolLimits(t *testing.T) {
	addr, pool := served(t, extensionserver.Options{TLSOptions: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"h2", "http/1.1"} }}})
	path := hookPath(t, runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine")

	conn := dial(t, addr, pool)
	defer conn.Close()
	_, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: extension\r\nX-Flood: "+strings.Repeat("a", 2*extensionserver.DefaultMaxHeaderBytes)+"\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	both, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	require.NoError(t, err)
	require.Equal(t, "http/1.1", both.ConnectionState().NegotiatedProtocol)
	both.Close()
	h2, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	if err == nil {
		require.NotEqual(t, "h2", h2.ConnectionState().NegotiatedProtocol)
		h2.Close()
	}
}

// bigRequest is a CanUpdateMachine request as Cluster API sends it for a
// control plane Machine with a big KubeadmConfig: 40 files of 4 KiB
// (certificates, manifests, scripts), 20 commands before and after
// kubeadm, 5 users with 3 SSH keys each, API server extra arguments, in
// both the current and the desired objects, with a 4 KiB infrastructure
// machine.
func bigRequest(t *testing.T) []byte {
	t.Helper()
	kc := &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-control-plane-x7k2p", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
	}
	pem := "-----BEGIN CERTIFICATE-----\n" + strings.Repeat(strings.Repeat("MIIDBTCCAe2gAwIBAgIIZ", 3)+"\n", 64) + "-----END CERTIFICATE-----\n"
	for i := range 40 {
		kc.Spec.Files = append(kc.Spec.Files, bootstrapv1.File{Path: fmt.Sprintf("/etc/kubernetes/extra/file-%d.pem", i), Owner: "root:root", Permissions: "0600", Content: pem})
	}
	for i := range 20 {
		kc.Spec.PreKubeadmCommands = append(kc.Spec.PreKubeadmCommands, fmt.Sprintf("/usr/local/bin/prepare-node.sh --step %d --registry registry.example --mirror https://mirror.example/%d", i, i))
		kc.Spec.PostKubeadmCommands = append(kc.Spec.PostKubeadmCommands, fmt.Sprintf("/usr/local/bin/after-join.sh --step %d", i))
	}
	for i := range 5 {
		u := bootstrapv1.User{Name: fmt.Sprintf("ops-%d", i)}
		for k := range 3 {
			u.SSHAuthorizedKeys = append(u.SSHAuthorizedKeys, fmt.Sprintf("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%064d ops-%d-%d@example", k, i, k))
		}
		kc.Spec.Users = append(kc.Spec.Users, u)
	}
	for i := range 20 {
		kc.Spec.ClusterConfiguration.APIServer.ExtraArgs = append(kc.Spec.ClusterConfiguration.APIServer.ExtraArgs,
			bootstrapv1.Arg{Name: fmt.Sprintf("flag-%d", i), Value: new(strings.Repeat("v", 64))})
	}
	kcRaw, err := json.Marshal(kc)
	require.NoError(t, err)
	infra := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine",
		"metadata": map[string]any{"namespace": "default", "name": "demo-control-plane-x7k2p"},
		"spec":     map[string]any{"instanceType": "m7i.2xlarge", "userData": strings.Repeat("x", 4096)}}}
	infraRaw, err := json.Marshal(infra)
	require.NoError(t, err)
	m := clusterv1.Machine{TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-control-plane-x7k2p", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec:       clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.1"}}
	objs := runtimehooksv1.CanUpdateMachineRequestObjects{Machine: m, InfrastructureMachine: krt.RawExtension{Raw: infraRaw}, BootstrapConfig: krt.RawExtension{Raw: kcRaw}}
	b, err := json.Marshal(&runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		Current:  objs, Desired: objs})
	require.NoError(t, err)
	return b
}

// TestMaxRequestBytesFitsBigKubeadmConfigs measures the request
// DefaultMaxRequestBytes is sized on and serves it: it fits with at least
// ten times headroom, and is answered 200 through the limits.
func TestMaxRequestBytesFitsBigKubeadmConfigs(t *testing.T) {
	b := bigRequest(t)
	t.Logf("a CanUpdateMachine request with big KubeadmConfigs: %d bytes (limit %d)", len(b), extensionserver.DefaultMaxRequestBytes)
	require.Less(t, int64(len(b))*5, int64(extensionserver.DefaultMaxRequestBytes))

	addr, pool := served(t, extensionserver.Options{})
	client := &http.Client{Timeout: hangBound, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Post("https://"+addr+hookPath(t, runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine"), "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got runtimehooksv1.CanUpdateMachineResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, got.Status, got.Message)
}
