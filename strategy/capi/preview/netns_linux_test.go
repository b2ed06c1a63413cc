package preview_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// extensionNetwork gives the test an address the API server will proxy to
// (it refuses loopback) without using any of this machine's own: a network
// namespace holding 198.18.<n>.2, joined to this one by a veth pair whose
// end here is 198.18.<n>.1/30 (RFC 2544's test range, routed nowhere
// else). Deleting the namespace at cleanup removes both ends. inNetns runs
// f on a thread inside the namespace, so that the listeners f opens live
// there; f must block for as long as they serve (the thread is discarded
// afterwards, never returned to the pool). Needs root, as CI has.
func extensionNetwork(t *testing.T) (ip string, inNetns func(f func() error) error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it creates a network namespace)")
	}
	var b [2]byte
	_, err := rand.Read(b[:])
	if err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(b[:])
	ns, hostEnd := "uk-preview-"+id, "ukp"+id
	subnet := 100 + int(b[0])%100
	ip, gw := fmt.Sprintf("198.18.%d.2", subnet), fmt.Sprintf("198.18.%d.1", subnet)
	ip1 := func(argv ...string) {
		t.Helper()
		if out, err := exec.CommandContext(t.Context(), "ip", argv...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", argv, err, out)
		}
	}
	ip1("netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	ip1("link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip1("addr", "add", gw+"/30", "dev", hostEnd)
	ip1("link", "set", hostEnd, "up")
	ip1("-n", ns, "addr", "add", ip+"/30", "dev", "eth0")
	ip1("-n", ns, "link", "set", "eth0", "up")
	ip1("-n", ns, "link", "set", "lo", "up")
	return ip, func(f func() error) error {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return err
		}
		return f()
	}
}
