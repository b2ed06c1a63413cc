package clusterapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/testcerts"
)

// Manager names one of Cluster API's managers.
type Manager string

// The managers hack/capi-managers.sh builds, by binary name.
const (
	ManagerCore                Manager = "capi-manager"
	ManagerKubeadmBootstrap    Manager = "capi-kubeadm-bootstrap-manager"
	ManagerKubeadmControlPlane Manager = "capi-kubeadm-control-plane-manager"
)

// DefaultFeatureGates are the gates every manager is started with: what
// Cluster API's in-place update path needs.
const DefaultFeatureGates = "InPlaceUpdates=true,RuntimeSDK=true"

// EnvManagers names the directory of the built managers
// (hack/capi-managers.sh prints it).
const EnvManagers = "UPGRADEKIT_CAPI_MANAGERS"

// ErrNotReady is wrapped by Start's error when a manager exits or does not
// become ready in time; the error includes the end of its log.
var ErrNotReady = errors.New("manager not ready")

type options struct {
	managers     []Manager
	featureGates string
	readyTimeout time.Duration
	logDir       string
}

// Option configures Start.
type Option func(*options)

// WithManagers starts only these managers (default: all three).
func WithManagers(ms ...Manager) Option {
	return func(o *options) { o.managers = append([]Manager(nil), ms...) }
}

// WithFeatureGates replaces DefaultFeatureGates ("Name=true,...").
func WithFeatureGates(gates string) Option { return func(o *options) { o.featureGates = gates } }

// WithReadyTimeout bounds how long each manager may take to answer its
// readiness probe (default 90s: two busy cores are slow to start three).
func WithReadyTimeout(d time.Duration) Option { return func(o *options) { o.readyTimeout = d } }

// WithLogDir writes each manager's output to <dir>/<manager>.log (default:
// a temporary directory, removed by Stop).
func WithLogDir(dir string) Option { return func(o *options) { o.logDir = dir } }

// Managers are running Cluster API managers.
type Managers struct {
	dir   string // temporary files: kubeconfig, certificates, logs
	own   bool   // dir is ours to remove
	logs  map[Manager]string
	procs map[Manager]*exec.Cmd
	done  map[Manager]chan struct{}
	once  sync.Once
	err   error
}

// Start starts the managers in binDir against env, each with its own
// webhook, health and diagnostics ports on 127.0.0.1 and a throwaway
// serving certificate, and returns once each answers its readiness probe.
// ctx bounds the start only. On error nothing is left running.
func Start(ctx context.Context, env *apiserver.Env, binDir string, opts ...Option) (*Managers, error) {
	o := options{managers: []Manager{ManagerCore, ManagerKubeadmBootstrap, ManagerKubeadmControlPlane}, featureGates: DefaultFeatureGates, readyTimeout: 90 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	tmp, err := os.MkdirTemp("", "upgradekit-capitest-")
	if err != nil {
		return nil, err
	}
	m := &Managers{dir: tmp, own: true, logs: map[Manager]string{}, procs: map[Manager]*exec.Cmd{}, done: map[Manager]chan struct{}{}}
	logDir := o.logDir
	if logDir == "" {
		logDir = tmp
	}
	fail := func(err error) (*Managers, error) {
		return nil, errors.Join(err, m.Stop())
	}
	kc, err := env.Kubeconfig("management")
	if err != nil {
		return fail(err)
	}
	kcPath := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return fail(err)
	}
	certDir := filepath.Join(tmp, "certs")
	if _, err := testcerts.WriteFiles(certDir); err != nil {
		return fail(err)
	}
	ca, err := os.ReadFile(filepath.Join(certDir, testcerts.CAFile))
	if err != nil {
		return fail(err)
	}
	for _, mgr := range o.managers {
		bin := filepath.Join(binDir, string(mgr))
		if _, err := os.Stat(bin); err != nil {
			return fail(fmt.Errorf("capitest: %s: %w (build it with hack/capi-managers.sh)", mgr, err))
		}
		ports, err := freePorts(3)
		if err != nil {
			return fail(err)
		}
		health := "127.0.0.1:" + strconv.Itoa(ports[1])
		logPath := filepath.Join(logDir, string(mgr)+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(bin, "--kubeconfig", kcPath, "--leader-elect=false",
			"--webhook-port", strconv.Itoa(ports[0]), "--webhook-cert-dir", certDir,
			"--health-addr", health, "--diagnostics-address", "127.0.0.1:"+strconv.Itoa(ports[2]), "--insecure-diagnostics",
			"--feature-gates", o.featureGates)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
		if err := cmd.Start(); err != nil {
			logFile.Close()
			return fail(fmt.Errorf("capitest: starting %s: %w", mgr, err))
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
		m.procs[mgr], m.done[mgr], m.logs[mgr] = cmd, done, logPath
		if err := waitReady(ctx, "http://"+health+"/readyz", done, o.readyTimeout); err != nil {
			return fail(fmt.Errorf("capitest: %s: %w: %w\n%s", mgr, ErrNotReady, err, tail(logPath, 20)))
		}
		if err := installWebhooks(ctx, env.Client, filepath.Join(binDir, string(mgr)+".webhooks.yaml"), mgr, ports[0], ca); err != nil {
			return fail(fmt.Errorf("capitest: %s: webhook configurations: %w", mgr, err))
		}
	}
	return m, nil
}

// installWebhooks creates a manager's admission webhook configurations as
// Cluster API ships them, named after the manager, with each webhook's
// service reference replaced by the manager's local URL and the CA that
// signed its serving certificate: the API server then calls the manager's
// own defaulting and validation, as in a real management cluster.
func installWebhooks(ctx context.Context, c client.Client, path string, mgr Manager, port int, ca []byte) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if obj.Object == nil {
			continue
		}
		hooks, _, err := unstructured.NestedSlice(obj.Object, "webhooks")
		if err != nil {
			return err
		}
		for i := range hooks {
			h, ok := hooks[i].(map[string]any)
			if !ok {
				return fmt.Errorf("%s: webhooks[%d] is not an object", path, i)
			}
			p, _, _ := unstructured.NestedString(h, "clientConfig", "service", "path")
			h["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", port, p), "caBundle": base64.StdEncoding.EncodeToString(ca)}
		}
		if err := unstructured.SetNestedSlice(obj.Object, hooks, "webhooks"); err != nil {
			return err
		}
		obj.SetName(string(mgr) + "-" + obj.GetName())
		if err := c.Create(ctx, &obj); err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// LogPath returns where a manager's output goes.
func (m *Managers) LogPath(mgr Manager) string { return m.logs[mgr] }

// Stop stops every manager (SIGTERM, then SIGKILL after 10 seconds) and
// removes the temporary files. It is safe to call more than once.
func (m *Managers) Stop() error {
	m.once.Do(func() {
		for mgr, cmd := range m.procs {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.done[mgr]:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-m.done[mgr]
			}
		}
		if m.own {
			m.err = os.RemoveAll(m.dir)
		}
	})
	return m.err
}

func waitReady(ctx context.Context, url string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("no ready answer from %s: %w", url, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(string(bytes.Join(lines, []byte("\n"))))
}
