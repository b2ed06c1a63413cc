package kubeadmnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// socketPath is where the supervisor listens inside a node; the systemctl
// stand-in (internal/systemctl) dials it.
const socketPath = "/run/upgradekit-node/systemctl.sock"

// restartDelay is how long a unit that exited waits before the supervisor
// starts it again (systemd's RestartSec; kubeadm's kubelet unit uses 10 s).
const restartDelay = 2 * time.Second

// unitSpec is a service the supervisor runs on a node, as a systemd unit
// with Restart=always would be run.
type unitSpec struct {
	name string
	// argv is computed at each start, inside the node's namespaces; it
	// may read the node's files (the kubelet's flags files).
	argv func() ([]string, error)
}

type unit struct {
	spec    unitSpec
	wanted  bool
	cmd     *exec.Cmd
	exited  chan struct{}
	starts  int
	lastErr error
}

// supervisor is the node's init system for the units it knows: it starts
// them inside the node's namespaces (mount, UTS, IPC, network) as
// children of the test process, restarts them when they exit while
// wanted, and answers the systemctl stand-in. What it does not model of
// systemd: unit files (daemon-reload does nothing), dependencies,
// KillMode=control-group (it signals the unit's main process only, like
// containerd's KillMode=process: containerd's shims outlive a restart as
// they do under systemd), journald.
type supervisor struct {
	log    logr.Logger
	enter  []string // nsenter prefix
	logDir string
	ln     net.Listener

	mu     sync.Mutex
	units  map[string]*unit
	closed bool
	wg     sync.WaitGroup
}

func newSupervisor(log logr.Logger, enter []string, logDir string, specs ...unitSpec) *supervisor {
	s := &supervisor{log: log, enter: enter, logDir: logDir, units: map[string]*unit{}}
	for _, sp := range specs {
		s.units[sp.name] = &unit{spec: sp}
	}
	return s
}

// serve listens on path (the node's socket, seen from the host through
// /proc/<pid>/root) until Close.
func (s *supervisor) serve(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.handle(c)
			}()
		}
	}()
	return nil
}

type reply struct {
	Code   int    `json:"code"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

func (s *supervisor) handle(c net.Conn) {
	defer c.Close()
	var args []string
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&args); err != nil {
		return
	}
	r := s.systemctl(args)
	s.log.V(1).Info("systemctl", "args", args, "code", r.Code)
	_ = json.NewEncoder(c).Encode(r)
}

// systemctl answers one systemctl command line with the exit codes
// systemctl uses: 0 success, 3 inactive (is-active), 5 unknown unit, 1
// failure.
func (s *supervisor) systemctl(args []string) reply {
	var verb string
	var names, props []string
	quiet := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-q" || a == "--quiet":
			quiet = true
		case (a == "-p" || a == "--property") && i+1 < len(args):
			i++
			props = append(props, strings.Split(args[i], ",")...)
		case strings.HasPrefix(a, "--property="):
			props = append(props, strings.Split(strings.TrimPrefix(a, "--property="), ",")...)
		case strings.HasPrefix(a, "-"):
		case verb == "":
			verb = a
		default:
			names = append(names, strings.TrimSuffix(a, ".service"))
		}
	}
	switch verb {
	case "daemon-reload", "reset-failed":
		return reply{}
	}
	if len(names) == 0 {
		return reply{Code: 1, Stderr: fmt.Sprintf("systemctl %s: no unit given (upgradekit node stand-in)\n", verb)}
	}
	var out reply
	for _, name := range names {
		s.mu.Lock()
		u, ok := s.units[name]
		s.mu.Unlock()
		if !ok {
			return reply{Code: 5, Stderr: fmt.Sprintf("Unit %s.service not found.\n", name)}
		}
		switch verb {
		case "start", "restart", "try-restart", "reload-or-restart":
			if verb == "start" && s.active(u) {
				continue
			}
			if err := s.restart(u); err != nil {
				return reply{Code: 1, Stderr: fmt.Sprintf("Job for %s.service failed: %v\n", name, err)}
			}
		case "stop":
			s.stop(u)
		case "show":
			// The properties the plans read: MainPID (0 when not
			// running, as systemd says) and ActiveState.
			for _, p := range props {
				switch p {
				case "MainPID":
					out.Stdout += fmt.Sprintf("MainPID=%d\n", s.mainPID(u))
				case "ActiveState":
					state := "inactive"
					if s.active(u) {
						state = "active"
					}
					out.Stdout += "ActiveState=" + state + "\n"
				default:
					return reply{Code: 1, Stderr: fmt.Sprintf("systemctl show -p %s: not supported by the upgradekit node stand-in\n", p)}
				}
			}
		case "enable", "disable":
		case "is-enabled":
			if !quiet {
				out.Stdout += "enabled\n"
			}
		case "is-active", "status":
			if s.active(u) {
				if !quiet && verb == "is-active" {
					out.Stdout += "active\n"
				}
				continue
			}
			if !quiet && verb == "is-active" {
				out.Stdout += "inactive\n"
			}
			out.Code = 3
		default:
			return reply{Code: 1, Stderr: fmt.Sprintf("systemctl %s: not supported by the upgradekit node stand-in\n", verb)}
		}
	}
	return out
}

func (s *supervisor) active(u *unit) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.cmd == nil {
		return false
	}
	select {
	case <-u.exited:
		return false
	default:
		return true
	}
}

// mainPID is the unit's process, or 0 when it does not run.
func (s *supervisor) mainPID(u *unit) int {
	if !s.active(u) {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return u.cmd.Process.Pid
}

// restart stops the unit if it runs and starts it again.
func (s *supervisor) restart(u *unit) error {
	s.stop(u)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("supervisor is closed")
	}
	u.wanted = true
	return s.startLocked(u)
}

func (s *supervisor) startLocked(u *unit) error {
	argv, err := u.spec.argv()
	if err != nil {
		u.lastErr = err
		return err
	}
	logf, err := os.OpenFile(filepath.Join(s.logDir, u.spec.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	full := append(append([]string{}, s.enter...), argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a signal to the test does not reach it, and
	// stop can signal the unit alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(logf, "--- upgradekit supervisor: starting %s at %s: %s\n", u.spec.name, time.Now().UTC().Format(time.RFC3339), strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	u.cmd, u.exited = cmd, exited
	u.starts++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		fmt.Fprintf(logf, "--- upgradekit supervisor: %s exited: %v\n", u.spec.name, err)
		logf.Close()
		close(exited)
		s.afterExit(u, cmd)
	}()
	return nil
}

// afterExit restarts a unit that is still wanted, after restartDelay,
// unless someone started it again meanwhile.
func (s *supervisor) afterExit(u *unit, cmd *exec.Cmd) {
	time.Sleep(restartDelay)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !u.wanted || u.cmd != cmd {
		return
	}
	if err := s.startLocked(u); err != nil {
		s.log.Info("restarting a unit failed", "unit", u.spec.name, "error", err.Error())
	}
}

// stop signals the unit's process (SIGTERM, SIGKILL after 30 s) and waits
// for it to exit.
func (s *supervisor) stop(u *unit) {
	s.mu.Lock()
	u.wanted = false
	cmd, exited := u.cmd, u.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Close stops every unit and the listener.
func (s *supervisor) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	units := make([]*unit, 0, len(s.units))
	for _, u := range s.units {
		units = append(units, u)
	}
	s.mu.Unlock()
	// The kubelet first: containerd stays up while it stops.
	for _, name := range []string{"kubelet", "containerd"} {
		for _, u := range units {
			if u.spec.name == name {
				s.stop(u)
			}
		}
	}
	for _, u := range units {
		s.stop(u)
	}
	if s.ln != nil {
		s.ln.Close()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
