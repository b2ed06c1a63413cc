package kubeadmnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
)

// TestSupervisorAnswersSystemctl drives the supervisor as kubeadm and the
// plan's scripts drive systemctl: restart, is-active, stop, unknown units,
// and a unit that dies while wanted is started again (Restart=always).
func TestSupervisorAnswersSystemctl(t *testing.T) {
	s := newSupervisor(logr.Discard(), nil, t.TempDir(),
		unitSpec{name: "kubelet", argv: func() ([]string, error) { return []string{"sleep", "300"}, nil }})
	t.Cleanup(func() { s.Close(context.Background()) })

	require.Equal(t, reply{Code: 3, Stdout: "inactive\n"}, s.systemctl([]string{"is-active", "kubelet"}))
	require.Equal(t, reply{Code: 3}, s.systemctl([]string{"is-active", "--quiet", "kubelet.service"}))
	require.Equal(t, reply{}, s.systemctl([]string{"daemon-reload"}))
	require.Equal(t, reply{Stdout: "enabled\n"}, s.systemctl([]string{"is-enabled", "kubelet"}))
	require.Equal(t, 5, s.systemctl([]string{"restart", "containerd"}).Code, "a unit the node does not have")
	require.Equal(t, 1, s.systemctl([]string{"mask", "kubelet"}).Code, "a verb it does not model fails, it does not pretend")

	require.Equal(t, reply{}, s.systemctl([]string{"restart", "kubelet"}))
	require.Equal(t, reply{}, s.systemctl([]string{"is-active", "-q", "kubelet"}))
	require.Equal(t, reply{}, s.systemctl([]string{"start", "kubelet"}), "start of a running unit does nothing")
	require.Equal(t, 1, s.units["kubelet"].starts)
	s.mu.Lock()
	pid := s.units["kubelet"].cmd.Process.Pid
	s.mu.Unlock()
	require.Equal(t, reply{Stdout: fmt.Sprintf("MainPID=%d\n", pid)}, s.systemctl([]string{"show", "-p", "MainPID", "kubelet"}))
	require.Equal(t, reply{Stdout: "ActiveState=active\n"}, s.systemctl([]string{"show", "--property=ActiveState", "kubelet"}))

	// Killed behind the supervisor's back: inactive, then started again.
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.units["kubelet"].starts == 2
	}, time.Minute, 50*time.Millisecond, "a wanted unit that exits is restarted")

	require.Equal(t, reply{}, s.systemctl([]string{"stop", "kubelet"}))
	require.Equal(t, 3, s.systemctl([]string{"is-active", "kubelet"}).Code)
	time.Sleep(2 * restartDelay)
	require.Equal(t, 3, s.systemctl([]string{"is-active", "kubelet"}).Code, "a stopped unit stays stopped")
	require.Equal(t, reply{Stdout: "MainPID=0\n"}, s.systemctl([]string{"show", "-p", "MainPID", "kubelet"}))
}

// TestSupervisorSocket: the stand-in's protocol over the unix socket.
func TestSupervisorSocket(t *testing.T) {
	s := newSupervisor(logr.Discard(), nil, t.TempDir(),
		unitSpec{name: "containerd", argv: func() ([]string, error) { return []string{"sleep", "300"}, nil }})
	t.Cleanup(func() { s.Close(context.Background()) })
	sock := filepath.Join(t.TempDir(), "run", "systemctl.sock")
	require.NoError(t, s.serve(sock))
	call := func(args ...string) reply {
		c, err := net.Dial("unix", sock)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, json.NewEncoder(c).Encode(args))
		var r reply
		require.NoError(t, json.NewDecoder(c).Decode(&r))
		return r
	}
	require.Equal(t, 3, call("is-active", "containerd").Code)
	require.Equal(t, reply{}, call("restart", "containerd"))
	require.Equal(t, reply{Stdout: "active\n"}, call("is-active", "containerd"))
}

func TestEnvFileWords(t *testing.T) {
	for _, tt := range []struct {
		data string
		want []string
	}{
		{`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=198.18.0.11"` + "\n",
			[]string{"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-ip=198.18.0.11"}},
		{"KUBELET_KUBEADM_ARGS=--v=2\nOTHER=x\n", []string{"--v=2"}},
		{"# nothing\n", []string{}},
		{`KUBELET_KUBEADM_ARGS=""`, []string{}},
	} {
		require.Equal(t, tt.want, envFileWords(tt.data, "KUBELET_KUBEADM_ARGS"), tt.data)
	}
}
