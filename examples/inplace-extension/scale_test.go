//go:build scale

package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// The scale scenario's size and rollout, overridable for a quicker look
// (make e2e-scale runs the defaults).
const (
	envScaleMachines       = "UPGRADEKIT_SCALE_MACHINES"        // MachineDeployment replicas, default 100
	envScaleControlPlanes  = "UPGRADEKIT_SCALE_CONTROL_PLANES"  // KubeadmControlPlane replicas, default 5
	envScaleMaxUnavailable = "UPGRADEKIT_SCALE_MAX_UNAVAILABLE" // the MachineDeployment's maxUnavailable, default 10
	// envScaleProfiles, when set, is a directory the test writes the
	// extension's binary and Go profiles to (-profiler-address): the heap
	// when its resident set was largest (heap.pb.gz) and every allocation
	// of the run (allocs.pb.gz), for `go tool pprof`.
	envScaleProfiles = "UPGRADEKIT_SCALE_PROFILES"
)

// TestScaleInPlace (build tag scale; make e2e-scale): a cluster of a
// KubeadmControlPlane (5) and a MachineDeployment (100, maxSurge 0,
// maxUnavailable 10) bumped v1.35.4 -> v1.36.3 in one apply, under Cluster
// API v1.14's own managers, with the extension running as its own process
// (the binary this package builds, flags as deploy/extension.yaml passes
// them but -retry-after 1; see e2eExtensionServe), so its CPU time and
// peak memory are its own. Every machine keeps its name and runs v1.36.3
// on its host. It logs, in one line, what BENCHMARKS.md keeps: the
// rollout's wall time, the extension's CPU seconds and peak RSS (VmHWM),
// the most machines Cluster API had updating at once, and each hook's
// count and latency p50/p99 from the extension's own
// upgradekit_inplace_hook_duration_seconds histogram (interpolated
// within buckets, as Prometheus' histogram_quantile does).
//
// What it measures is the extension under Cluster API's load, not a
// node's: the harness's steps take no time and one API server is both
// management and workload cluster (see harness/clusterapi), so the wall time
// is Cluster API's pace plus the extension's, and the API server's and
// the managers' CPU share the machine with it.
func TestScaleInPlace(t *testing.T) {
	machines := scaleEnv(t, envScaleMachines, 100)
	cps := scaleEnv(t, envScaleControlPlanes, 5)
	maxUnavailable := scaleEnv(t, envScaleMaxUnavailable, 10)

	// The kubelets poll every 500 ms (a hundred of them listing their
	// pods every 100 ms would be the harness's load, not the extension's).
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}),
		clusterapi.WithPollInterval(500*time.Millisecond))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "demo", int32(cps), e2eFrom)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	md := clusterapi.MachineDeploymentObjects("default", "demo", "md", int32(machines), e2eFrom)
	zero, unavailable := intstr.FromInt32(0), intstr.FromInt32(int32(maxUnavailable))
	md[2].(*clusterv1.MachineDeployment).Spec.Rollout.Strategy.RollingUpdate = clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &zero, MaxUnavailable: &unavailable}
	require.NoError(t, clusterapi.Create(ctx, c, md...))
	cpLabel := client.HasLabels{clusterv1.MachineControlPlaneLabel}
	mdLabel := client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: "md"}
	cpBefore, wBefore := provisioned(t, h, 40*time.Minute, cpLabel, mdLabel, cps, machines, e2eFrom)

	profiles := os.Getenv(envScaleProfiles)
	ext := startExtensionProcess(t, h, profiles)
	var profiledAt int64

	// The most machines updating in place at once.
	var mu sync.Mutex
	most := 0
	stop := every(time.Second, func() {
		ms, err := machinesBy(t, c)
		if err != nil {
			return
		}
		n := 0
		for _, m := range ms {
			if _, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]; updating {
				n++
			}
		}
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		if rss := ext.rss(); profiles != "" && rss > profiledAt+profiledAt/10 {
			if ext.profile(filepath.Join(profiles, "heap.pb.gz"), "heap") == nil {
				profiledAt = rss
			}
		}
	})

	cpuBefore := ext.cpu(t)
	bumpTogether(t, c, "demo-cp", "md", e2eTo)
	start := time.Now()

	var cpAfter, wAfter map[string]clusterv1.Machine
	waitUntil(t, 60*time.Minute, "control planes and workers updated", func() (bool, string, error) {
		var cpDone bool
		cpAfter, cpDone = kcpSettled(t, c, "demo-cp", int32(cps), e2eTo)
		var err error
		if wAfter, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		upToDate := 0
		for _, m := range wAfter {
			if m.Spec.Version == e2eTo && conditionIs(m.Status.Conditions, clusterv1.MachineUpToDateCondition, "True") {
				upToDate++
			}
		}
		return cpDone && settled(wAfter, machines, e2eTo) && mdSettled(t, c, "md", int32(machines)),
			fmt.Sprintf("control planes settled %t, %d of %d workers up to date; extension %s; provider %v", cpDone, upToDate, machines, ext.state(), h.Provider.Errors()), nil
	})
	wall := time.Since(start)
	cpu := ext.cpu(t) - cpuBefore
	stop()
	peak := ext.peakRSS(t)
	if profiles != "" {
		require.NoError(t, ext.profile(filepath.Join(profiles, "allocs.pb.gz"), "allocs"))
		t.Logf("profiles in %s: the heap at %.1f MiB resident (heap.pb.gz), every allocation (allocs.pb.gz)", profiles, float64(profiledAt)/(1<<20))
	}
	hooks := ext.hookLatencies(t)

	require.Equal(t, slices.Sorted(maps.Keys(cpBefore)), slices.Sorted(maps.Keys(cpAfter)), "no control plane replaced")
	require.Equal(t, slices.Sorted(maps.Keys(wBefore)), slices.Sorted(maps.Keys(wAfter)), "no worker replaced")
	for name := range wAfter {
		require.Equal(t, e2eTo, h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet), "%s upgraded on its host", name)
	}
	for name := range cpAfter {
		require.Equal(t, "registry.k8s.io/kube-apiserver:"+e2eTo, h.Provider.Host(name).StaticPodImage("kube-apiserver"), name)
	}
	var nodes corev1.NodeList
	require.NoError(t, c.List(ctx, &nodes))
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "%s left cordoned", n.Name)
	}
	require.Equal(t, float64(machines+cps), hooks[scaleHookUpdate].done, "one update answered done per machine")

	var line strings.Builder
	fmt.Fprintf(&line, "scale: KCP %d + MD %d (maxUnavailable %d) %s -> %s in place: wall %s; extension CPU %.1f s, peak RSS %.1f MiB; at most %d machines updating at once",
		cps, machines, maxUnavailable, e2eFrom, e2eTo, wall.Round(time.Second), cpu, float64(peak)/(1<<20), most)
	for _, hook := range slices.Sorted(maps.Keys(hooks)) {
		l := hooks[hook]
		fmt.Fprintf(&line, "; %s n=%d p50 %s p99 %s", hook, int(l.count), fmtSeconds(l.p50), fmtSeconds(l.p99))
	}
	t.Log(line.String())
}

func scaleEnv(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(10 * time.Microsecond).String()
}

// extensionProcess is the extension binary running against the harness.
type extensionProcess struct {
	cmd      *exec.Cmd
	log      string
	metrics  string
	profiler string
}

// rss is the process's resident set now, in bytes (0 if unreadable).
func (p *extensionProcess) rss() int64 {
	return p.status("VmRSS:")
}

// status is a size in /proc/PID/status, in bytes (0 if unreadable).
func (p *extensionProcess) status(field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// profile writes the named Go profile of the process to path.
func (p *extensionProcess) profile(path, name string) error {
	resp, err := http.Get(p.profiler + name) //nolint:noctx // a local scrape
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", name, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startExtensionProcess builds this package's binary, runs it against h's
// API server and registers it with Cluster API. The process is stopped
// (SIGTERM, then killed after a minute) when the test ends; its log is
// printed if the test failed.
func startExtensionProcess(t *testing.T, h *clusterapi.Harness, profiles string) *extensionProcess {
	t.Helper()
	dir := t.TempDir()
	if profiles != "" {
		require.NoError(t, os.MkdirAll(profiles, 0o755))
		dir = profiles
	}
	bin := filepath.Join(dir, "inplace-extension")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	kc, err := h.Env.Kubeconfig("management")
	require.NoError(t, err)
	kcPath := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kcPath, kc, 0o600))
	certs := filepath.Join(t.TempDir(), "certs")
	require.NoError(t, os.Mkdir(certs, 0o700))
	testcerts.Write(t, certs)
	port, metricsPort, profPort := testcerts.FreePort(t), testcerts.FreePort(t), testcerts.FreePort(t)
	logPath := filepath.Join(dir, "extension.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	cmd := exec.Command(bin, "-kubeconfig", kcPath, "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", certs,
		"-metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metricsPort), "-metrics-secure=false", "-health-addr", "0",
		"-profiler-address", "127.0.0.1:"+strconv.Itoa(profPort),
		"-upgrader-images", e2eTo+"="+e2eImage, "-allow-unverified-bundles", "-retry-after", "1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &extensionProcess{cmd: cmd, log: logPath, metrics: "http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics",
		profiler: "http://127.0.0.1:" + strconv.Itoa(profPort) + "/debug/pprof/"}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("extension log (last 8 KiB):\n%s", b[max(0, len(b)-8192):])
		}
	})
	// Serving: the TLS handshake answers.
	waitUntil(t, 2*time.Minute, "the extension serves", func() (bool, string, error) {
		select {
		case <-exited:
			return false, "", fmt.Errorf("the extension exited: %s", cmd.ProcessState)
		default:
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only that it answers
		if err != nil {
			return false, err.Error(), nil
		}
		conn.Close()
		return true, "", nil
	})
	ca, err := os.ReadFile(filepath.Join(certs, testcerts.CAFile))
	require.NoError(t, err)
	names, err := clusterapi.RegisterExtension(t.Context(), h.Env.Client, "upgradekit", "https://127.0.0.1:"+strconv.Itoa(port), ca)
	require.NoError(t, err)
	require.Len(t, names, 3, "the three in-place handlers: %v", names)
	return p
}

// state is the process's state for a failure message.
func (p *extensionProcess) state() string {
	if p.cmd.ProcessState != nil {
		return "exited: " + p.cmd.ProcessState.String()
	}
	return "running"
}

// cpu is the process's CPU time so far (user + system), in seconds.
func (p *extensionProcess) cpu(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	require.NoError(t, err)
	// The fields after the command name (which may hold spaces), in
	// parentheses: utime and stime are the 14th and 15th fields of the
	// line, in clock ticks (USER_HZ, 100 on Linux).
	_, rest, ok := bytes.Cut(b, []byte(") "))
	require.True(t, ok, "%s", b)
	f := strings.Fields(string(rest))
	utime, err := strconv.ParseFloat(f[11], 64)
	require.NoError(t, err)
	stime, err := strconv.ParseFloat(f[12], 64)
	require.NoError(t, err)
	return (utime + stime) / 100
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func (p *extensionProcess) peakRSS(t *testing.T) int64 {
	t.Helper()
	hwm := p.status("VmHWM:")
	require.Positive(t, hwm, "VmHWM of /proc/%d/status", p.cmd.Process.Pid)
	return hwm
}

const scaleHookUpdate = "UpdateMachine"

// hookLatency is one hook's calls and latency quantiles.
type hookLatency struct {
	count, done float64
	p50, p99    float64
}

// hookLatencies scrapes the extension's metrics: per hook, the calls and
// latency quantiles of observe.MetricHookDuration, and for UpdateMachine the
// updates answered done (observe.MetricUpdateDuration's observations).
func (p *extensionProcess) hookLatencies(t *testing.T) map[string]hookLatency {
	t.Helper()
	resp, err := http.Get(p.metrics) //nolint:noctx // a local scrape
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	fam, ok := fams[observe.MetricHookDuration]
	require.True(t, ok, "%s among the extension's metrics", observe.MetricHookDuration)
	out := map[string]hookLatency{}
	for _, m := range fam.GetMetric() {
		var hook string
		for _, l := range m.GetLabel() {
			if l.GetName() == "hook" {
				hook = l.GetValue()
			}
		}
		hist := m.GetHistogram()
		var bounds, cum []float64
		for _, b := range hist.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			cum = append(cum, float64(b.GetCumulativeCount()))
		}
		n := float64(hist.GetSampleCount())
		out[hook] = hookLatency{count: n, p50: quantile(0.5, n, bounds, cum), p99: quantile(0.99, n, bounds, cum)}
	}
	if done, ok := fams[observe.MetricUpdateDuration]; ok {
		for _, m := range done.GetMetric() {
			l := out[scaleHookUpdate]
			l.done += float64(m.GetHistogram().GetSampleCount())
			out[scaleHookUpdate] = l
		}
	}
	return out
}

// quantile estimates the q-quantile of n observations from cumulative
// bucket counts, linearly within the bucket it falls in (the lower bound
// of the first bucket is 0), as Prometheus' histogram_quantile does; in
// the +Inf bucket it is the highest finite bound.
func quantile(q, n float64, bounds, cum []float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, b := range bounds {
		if cum[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			return lower + (b-lower)*(rank-below)/(cum[i]-below)
		}
		lower, below = b, cum[i]
	}
	return lower
}
