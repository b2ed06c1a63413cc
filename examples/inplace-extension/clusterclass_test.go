package main

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// topologyHarness is clusterapi.NewForTest with Cluster API's ClusterTopology
// feature gate on in every manager.
func topologyHarness(t *testing.T, opts ...clusterapi.ProviderOption) *clusterapi.Harness {
	t.Helper()
	env := apiserver.StartForTest(t)
	require.NoError(t, clusterapi.InstallInfrastructure(t.Context(), env))
	m := clusterapi.StartForTest(t, env, clusterapi.WithFeatureGates(clusterapi.DefaultFeatureGates+",ClusterTopology=true"))
	p, err := clusterapi.StartProvider(env.Client, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, err := range p.Errors() {
				t.Logf("provider: %v", err)
			}
		}
		require.NoError(t, p.Stop())
	})
	return &clusterapi.Harness{Env: env, Managers: m, Provider: p}
}

// createTopologyCluster creates a ClusterClassObjects cluster: everything
// but the Cluster, then the Cluster once Cluster API reconciled the
// ClusterClass.
func createTopologyCluster(t *testing.T, h *clusterapi.Harness, name string, topo clusterapi.Topology) {
	t.Helper()
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterClassObjects(h.Env, "default", name, topo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs[:len(objs)-1]...))
	waitUntil(t, 2*time.Minute, "the ClusterClass reconciled", func() (bool, string, error) {
		var cc clusterv1.ClusterClass
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name + "-class"}, &cc); err != nil {
			return false, "", err
		}
		return cc.Status.ObservedGeneration == cc.Generation && conditionIs(cc.Status.Conditions, clusterv1.ClusterClassVariablesReadyCondition, "True"),
			fmt.Sprintf("conditions %v", cc.Status.Conditions), nil
	})
	require.NoError(t, clusterapi.Create(ctx, c, objs[len(objs)-1]))
}

// topologyKCP is the name of the KubeadmControlPlane Cluster API's
// topology controller created for cluster ("" until it did).
func topologyKCP(t *testing.T, c client.Client, cluster string) (string, error) {
	var list controlplanev1.KubeadmControlPlaneList
	if err := c.List(t.Context(), &list, client.InNamespace("default"), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return "", err
	}
	if len(list.Items) != 1 {
		return "", nil
	}
	return list.Items[0].Name, nil
}

// provisioned waits until cps control plane machines (cpSel) and workers
// worker machines (wSel) run version, and returns them by name.
func provisioned(t *testing.T, h *clusterapi.Harness, timeout time.Duration, cpSel, wSel client.ListOption, cps, workers int, version string) (cp, w map[string]clusterv1.Machine) {
	t.Helper()
	start := time.Now()
	waitUntil(t, timeout, "control planes and workers provisioned", func() (bool, string, error) {
		var err error
		if cp, err = machinesBy(t, h.Env.Client, cpSel); err != nil {
			return false, "", err
		}
		if w, err = machinesBy(t, h.Env.Client, wSel); err != nil {
			return false, "", err
		}
		return settled(cp, cps, version) && settled(w, workers, version), fmt.Sprintf("%d control planes %v, %d workers; provider %v",
			len(cp), slices.Sorted(maps.Keys(cp)), len(w), h.Provider.Errors()), nil
	})
	t.Logf("%d control planes and %d workers provisioned in %s", cps, workers, time.Since(start).Round(time.Millisecond))
	return cp, w
}

// every runs f every d until the returned stop is called (stop waits for
// a running f to return).
func every(d time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(d):
			}
			f()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// previewTopology is the preview of cluster's spec.topology.version
// bumped to version, made before Cluster API does anything: in process
// (preview.InProcess) with the flags e2eExtension gives the extension, and
// by the deployed extension (registered by e2eExtension).
func previewTopology(t *testing.T, h *clusterapi.Harness, cluster, version string) (inProcess, deployed *preview.Prediction) {
	t.Helper()
	ctx, c := t.Context(), h.Env.Client
	o, err := parseFlags([]string{"-upgrader-images", e2eTo + "=" + e2eImage + "," + e2eSkip + "=" + e2eSkipImage,
		"-allow-unverified-bundles", "-metrics-bind-address", "0", "-health-addr", "0"}, &bytes.Buffer{})
	require.NoError(t, err)
	ip, err := preview.NewInProcess(c, func(mgmt client.Reader) (preview.Answerer, error) {
		srv, err := extensionserver.New(mgmt, o.serverOptions(deps{mgmt: mgmt, scheme: h.Env.Scheme}))
		if err != nil {
			return nil, err
		}
		return srv.Extension(), nil
	})
	require.NoError(t, err)
	key := client.ObjectKey{Namespace: "default", Name: cluster}
	snap, err := preview.Read(ctx, c, key)
	require.NoError(t, err)
	var cl clusterv1.Cluster
	require.NoError(t, c.Get(ctx, key, &cl))
	cl.Spec.Topology.Version = version
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&cl)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Cluster"))
	change := []*unstructured.Unstructured{u}
	inProcess, err = preview.Predict(ctx, c, snap, change, ip, preview.WithServerDryRun())
	require.NoError(t, err)
	t.Logf("preview, in process:\n%s", inProcess)
	d, err := preview.FindDeployed(ctx, c, "default")
	require.NoError(t, err)
	deployed, err = preview.Predict(ctx, c, snap, change, d, preview.WithServerDryRun())
	require.NoError(t, err)
	t.Logf("preview, by the deployed extension:\n%s", deployed)
	return inProcess, deployed
}

// requirePredicted holds a prediction to what Cluster API did: every
// machine the preview says keeps its name is still there (before holds
// the machines' names before the rollout, after those after it).
func requirePredicted(t *testing.T, pr *preview.Prediction, before []string, after map[string]clusterv1.Machine) {
	t.Helper()
	for _, name := range before {
		m, ok := pr.Machine(name)
		require.True(t, ok, "%s predicted", name)
		_, kept := after[name]
		require.Equal(t, kept, m.KeepsName(), "%s: predicted %s (%s), Cluster API kept it: %t", name, m.Method, m.Reason, kept)
	}
}

// TestClusterAPIUpdatesATopologyInPlace: a managed topology cluster (a
// ClusterClass; Cluster API's ClusterTopology feature gate on) with a
// KubeadmControlPlane (3) and a MachineDeployment (2) at v1.35.4 gets its
// spec.topology.version bumped to v1.36.3, under Cluster API v1.14's own
// managers. Cluster API's topology controller sets the new version on the
// KubeadmControlPlane, and on the MachineDeployment only once every control
// plane machine runs it; both are updated in place through the extension:
// every Machine keeps its name, each host runs v1.36.3, no worker's
// kubelet is ever ahead of a control plane (sampled on the hosts), and
// nothing is declined.
func TestClusterAPIUpdatesATopologyInPlace(t *testing.T) {
	h := topologyHarness(t, clusterapi.WithUpgraderImage(e2eImage, simulator.Staging{Kubernetes: e2eTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	createTopologyCluster(t, h, "topo", clusterapi.Topology{Version: e2eFrom, ControlPlanes: 3, Workers: 2})
	cpLabel := client.HasLabels{clusterv1.MachineControlPlaneLabel}
	mdLabel := client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: clusterapi.TopologyWorkers}
	cpBefore, wBefore := provisioned(t, h, 6*time.Minute, cpLabel, mdLabel, 3, 2, e2eFrom)
	kcpName, err := topologyKCP(t, c, "topo")
	require.NoError(t, err)
	require.NotEmpty(t, kcpName)
	cps, workers := slices.Sorted(maps.Keys(cpBefore)), slices.Sorted(maps.Keys(wBefore))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtension(t, h, dir, testcerts.FreePort(t), reg, true)

	// What the preview says first: in process, everything in place, the
	// control plane first; the deployed extension, asked now, answers the
	// workers over today's control plane, and the reason says so.
	predicted, asked := previewTopology(t, h, "topo", e2eTo)
	require.True(t, predicted.ControlPlaneFirst)
	for _, m := range predicted.Machines {
		require.Equal(t, strategy.MethodInPlace, m.Method, "%s: %s", m.Name, m.Reason)
	}
	for _, name := range workers {
		m, _ := asked.Machine(name)
		require.Contains(t, m.Reason, "answered over the cluster as it is now", name)
	}
	asks := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome") // the deployed preview's questions

	var mu sync.Mutex
	var ahead []string
	stop := every(20*time.Millisecond, func() {
		for _, w := range workers {
			if host := h.Provider.Host(w); host == nil || host.RunningVersion(simulator.ComponentKubelet) != e2eTo {
				continue
			}
			for _, cp := range cps {
				if host := h.Provider.Host(cp); host != nil && host.RunningVersion(simulator.ComponentKubelet) != e2eTo {
					mu.Lock()
					ahead = append(ahead, fmt.Sprintf("worker %s at %s while control plane %s runs %s", w, e2eTo, cp, host.RunningVersion(simulator.ComponentKubelet)))
					mu.Unlock()
				}
			}
		}
	})
	defer stop()

	var cl clusterv1.Cluster
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "topo"}, &cl))
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Topology.Version = e2eTo
	require.NoError(t, c.Patch(ctx, &cl, patch))
	start := time.Now()

	var cpAfter, wAfter map[string]clusterv1.Machine
	waitUntil(t, 10*time.Minute, "the topology updated", func() (bool, string, error) {
		var cpDone bool
		cpAfter, cpDone = kcpSettled(t, c, kcpName, 3, e2eTo)
		var err error
		if wAfter, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		return cpDone && settled(wAfter, 2, e2eTo), fmt.Sprintf("control planes done %t, workers %v; provider %v", cpDone, machineStates(wAfter), h.Provider.Errors()), nil
	})
	t.Logf("the topology (3 control planes, then 2 workers) updated in place in %s", time.Since(start).Round(time.Millisecond))

	require.Equal(t, cps, slices.Sorted(maps.Keys(cpAfter)), "no control plane replaced")
	require.Equal(t, workers, slices.Sorted(maps.Keys(wAfter)), "no worker replaced")
	all := maps.Clone(cpAfter)
	maps.Copy(all, wAfter)
	requirePredicted(t, predicted, append(slices.Clone(cps), workers...), all)
	for _, name := range append(slices.Clone(cps), workers...) {
		require.Equal(t, e2eTo, h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet), "%s upgraded on its host", name)
	}
	mu.Lock()
	require.Empty(t, ahead, "no worker ahead of the control plane")
	mu.Unlock()
	decisions := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	for k, v := range asks {
		decisions[k] -= v
	}
	require.Zero(t, decisions["CanUpdateMachineSet/decline"]+decisions["CanUpdateMachine/decline"], "nothing declined: %v", decisions)
	require.Positive(t, decisions["CanUpdateMachineSet/accept"], "%v", decisions)
	require.Positive(t, decisions["CanUpdateMachine/accept"], "%v", decisions)
}

// TestClusterAPIChainsATopologyUpgrade: a topology cluster whose
// ClusterClass lists v1.35.4, v1.36.3 and v1.37.2 (spec.kubernetesVersions)
// is bumped from v1.35.4 to v1.37.2, skipping a minor, under Cluster API
// v1.14's own managers. Cluster API plans the chain: the control plane
// goes through v1.36.3, then to v1.37.2, one minor at a time; the workers,
// which may skip minors (up to three), get v1.37.2 in one step once the
// control plane runs it. What happens with the extension:
//   - each control plane machine is updated in place twice (v1.36.3, then
//     v1.37.2), keeping its name;
//   - the MachineDeployment's one step skips a minor, which kubeadm does
//     not support on a node: CanUpdateMachineSet declines it, and Cluster
//     API replaces the workers with machines at v1.37.2;
//   - no worker runs v1.37.2 while a control plane runs less.
func TestClusterAPIChainsATopologyUpgrade(t *testing.T) {
	staging := func(v string) simulator.Staging {
		return simulator.Staging{Kubernetes: v, Containerd: "2.0.5", CNI: "v1.7.1"}
	}
	h := topologyHarness(t, clusterapi.WithUpgraderImage(e2eImage, staging(e2eTo)), clusterapi.WithUpgraderImage(e2eSkipImage, staging(e2eSkip)))
	ctx, c := t.Context(), h.Env.Client
	createTopologyCluster(t, h, "chain", clusterapi.Topology{Version: e2eFrom, ControlPlanes: 3, Workers: 2,
		KubernetesVersions: []string{e2eFrom, e2eTo, e2eSkip}})
	cpLabel := client.HasLabels{clusterv1.MachineControlPlaneLabel}
	mdLabel := client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: clusterapi.TopologyWorkers}
	cpBefore, wBefore := provisioned(t, h, 6*time.Minute, cpLabel, mdLabel, 3, 2, e2eFrom)
	kcpName, err := topologyKCP(t, c, "chain")
	require.NoError(t, err)
	require.NotEmpty(t, kcpName)
	cps := slices.Sorted(maps.Keys(cpBefore))

	dir := t.TempDir()
	testcerts.Write(t, dir)
	reg := prometheus.NewRegistry()
	e2eExtension(t, h, dir, testcerts.FreePort(t), reg, true)

	// What the preview says first, in process: each control plane
	// machine in place in two steps, the workers' one step declined.
	predicted, _ := previewTopology(t, h, "chain", e2eSkip)
	for _, name := range cps {
		m, _ := predicted.Machine(name)
		require.Equal(t, strategy.MethodInPlace, m.Method, "%s: %s", name, m.Reason)
		require.Len(t, m.Steps, 2, name)
	}
	for name := range wBefore {
		m, _ := predicted.Machine(name)
		require.Equal(t, strategy.MethodReplace, m.Method, "%s: %s", name, m.Reason)
		require.Contains(t, m.Reason, "skips a minor", name)
	}
	asks := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome") // the deployed preview's questions

	// Sampled throughout: the versions each control plane host went
	// through, and any worker at v1.37.2 while a control plane is below.
	var mu sync.Mutex
	cpVersions := map[string][]string{}
	var ahead []string
	stop := every(20*time.Millisecond, func() {
		mu.Lock()
		defer mu.Unlock()
		low := ""
		for _, cp := range cps {
			if host := h.Provider.Host(cp); host != nil {
				v := host.RunningVersion(simulator.ComponentKubelet)
				if seen := cpVersions[cp]; len(seen) == 0 || seen[len(seen)-1] != v {
					cpVersions[cp] = append(seen, v)
				}
				if v != e2eSkip {
					low = cp + " at " + v
				}
			}
		}
		if low == "" {
			return
		}
		for _, w := range h.Provider.Nodes() {
			if host := h.Provider.Host(w); host != nil && !slices.Contains(cps, w) && host.RunningVersion(simulator.ComponentKubelet) == e2eSkip {
				ahead = append(ahead, fmt.Sprintf("worker %s at %s while control plane %s", w, e2eSkip, low))
			}
		}
	})
	defer stop()

	var cl clusterv1.Cluster
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chain"}, &cl))
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Topology.Version = e2eSkip
	require.NoError(t, c.Patch(ctx, &cl, patch), "Cluster API's webhook accepts a skipped minor when the ClusterClass lists the versions")
	start := time.Now()

	var cpAfter, wAfter map[string]clusterv1.Machine
	waitUntil(t, 12*time.Minute, "the chained upgrade done", func() (bool, string, error) {
		var cpDone bool
		cpAfter, cpDone = kcpSettled(t, c, kcpName, 3, e2eSkip)
		var err error
		if wAfter, err = machinesBy(t, c, mdLabel); err != nil {
			return false, "", err
		}
		return cpDone && settled(wAfter, 2, e2eSkip), fmt.Sprintf("control planes done %t, workers %v; provider %v", cpDone, machineStates(wAfter), h.Provider.Errors()), nil
	})
	t.Logf("the chain (control planes v1.35.4 -> v1.36.3 -> v1.37.2 in place, then workers) done in %s", time.Since(start).Round(time.Millisecond))

	require.Equal(t, cps, slices.Sorted(maps.Keys(cpAfter)), "no control plane replaced")
	mu.Lock()
	for _, cp := range cps {
		require.Equal(t, []string{e2eFrom, e2eTo, e2eSkip}, cpVersions[cp], "%s stepped through every minor on its host", cp)
	}
	require.Empty(t, ahead, "no worker ahead of the control plane")
	mu.Unlock()
	for name := range wBefore {
		require.NotContains(t, wAfter, name, "worker %s replaced: its step skips a minor", name)
	}
	for name := range wAfter {
		require.Equal(t, e2eSkip, h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet), name)
	}
	all := maps.Clone(cpAfter)
	maps.Copy(all, wAfter)
	requirePredicted(t, predicted, append(slices.Clone(cps), slices.Collect(maps.Keys(wBefore))...), all)
	decisions := metricSums(t, reg, observe.MetricDecisions, "hook", "outcome")
	for k, v := range asks {
		decisions[k] -= v
	}
	require.Positive(t, decisions["CanUpdateMachineSet/decline"], "the workers' skip declined: %v", decisions)
	require.Zero(t, decisions["CanUpdateMachine/decline"], "no control plane step declined: %v", decisions)
}
