package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/harness/testcerts"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags(nil, &out)
	require.ErrorIs(t, err, errInvalidFlag)
	require.ErrorContains(t, err, "--upgrader-image or --upgrader-images is required")
	o, err := parseFlags([]string{"-no-update-machine", "-port", "8443"}, &out)
	require.NoError(t, err)
	require.Equal(t, 8443, o.port)
	o, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-in-place", "KubernetesVersion"}, &out)
	require.NoError(t, err)
	require.Equal(t, "img:v1@"+testDigest, o.upgraderImage)
	require.True(t, o.drain, "draining is on by default")
	require.True(t, o.createNamespace, "the upgrader namespace is created where missing by default")
	require.Equal(t, capi.DefaultDrainTimeout, o.drainTimeout)
	require.Equal(t, ":8443", o.metricsAddr)
	require.True(t, o.metricsSecure, "metrics over HTTPS, scrapers authenticated and authorized, by default")
	require.Equal(t, ":9440", o.healthAddr)
	o, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-drain=false", "-drain-timeout", "1h", "-metrics-bind-address", "0"}, &out)
	require.NoError(t, err)
	require.False(t, o.drain)
	require.Equal(t, time.Hour, o.drainTimeout)
	require.Equal(t, "0", o.metricsAddr)
	_, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-drain-timeout", "-1m"}, &out)
	require.ErrorContains(t, err, "--drain-timeout: -1m0s: must not be negative")
	for _, v := range []string{"0", "-5", "4294967311"} {
		_, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-retry-after", v}, &out)
		require.ErrorIs(t, err, errInvalidFlag, v)
		require.ErrorContains(t, err, "--retry-after: "+v+": must be between 1 and 86400 seconds")
	}
	// Only what UpdateMachine applies may be accepted in place.
	_, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-in-place", "KubernetesVersion,KubeletConfig"}, &out)
	require.ErrorIs(t, err, errInvalidFlag)
	require.ErrorContains(t, err, `--in-place: "KubeletConfig" has no executor here`)
	_, err = parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-in-place", " , "}, &out)
	require.ErrorContains(t, err, "name at least one diff category")
	o, err = parseFlags([]string{"-no-update-machine", "-in-place", "KubernetesVersion,Files"}, &out)
	require.NoError(t, err, "deciding only: another extension applies the changes")
	require.Equal(t, []diff.Category{diff.CategoryKubernetesVersion, diff.CategoryFiles}, o.cats)
	// A misspelt category would decline everything (every machine
	// replaced): refused, with the valid names, in either mode.
	for _, args := range [][]string{{"-no-update-machine"}, {"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles"}} {
		_, err = parseFlags(append(args, "-in-place", "KubernetesVerison"), &out)
		require.ErrorIs(t, err, errInvalidFlag, args)
		require.ErrorContains(t, err, `unknown category "KubernetesVerison" (categories: `)
	}
	// One bundle per version.
	o, err = parseFlags([]string{"-upgrader-images", "v1.36.1=r/u@" + testDigest + ", v1.37.0=r/u@" + testDigestB, "-allow-unverified-bundles"}, &out)
	require.NoError(t, err)
	require.Equal(t, capi.ImagesByVersion{"v1.36.1": "r/u@" + testDigest, "v1.37.0": "r/u@" + testDigestB}, o.images)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-upgrader-images", "v1.36.1"}, `"v1.36.1" is not version=image`},
		{[]string{"-upgrader-images", "1.31.1=img"}, `version "1.31.1"`},
		{[]string{"-upgrader-images", "v1.36.1=a,v1.36.1=b"}, "version v1.36.1 twice"},
		{[]string{"-upgrader-images", "v1.36.1=a", "-upgrader-image", "b@" + testDigest, "-allow-unverified-bundles"}, "set one"},
	} {
		_, err = parseFlags(tc.args, &out)
		require.ErrorIs(t, err, errInvalidFlag, tc.args)
		require.ErrorContains(t, err, tc.want)
	}
	out.Reset()
	_, err = parseFlags([]string{"-bogus"}, &out)
	require.ErrorIs(t, err, errInvalidFlag)
	require.Empty(t, out.String(), "the parser prints nothing itself")
	var stderr bytes.Buffer
	require.Equal(t, exitUsage, exitCode(err, &stderr))
	require.Equal(t, "inplace-extension: unknown flag: --bogus\nSee 'inplace-extension --help' for usage.\n", stderr.String())
	o, err = parseFlags([]string{"-no-update-machine", "-kubeconfig", "/etc/mgmt.conf"}, &out)
	require.NoError(t, err)
	require.Equal(t, "/etc/mgmt.conf", o.kubeconfig)
	_, err = restConfig(filepath.Join(t.TempDir(), "missing.conf"), defaultKubeAPIQPS, defaultKubeAPIBurst)
	require.ErrorContains(t, err, "management cluster config")
}

// TestKubeAPIRateLimitFlags: the management cluster client is
// rate-limited as Cluster API's managers' are by default (20 per second,
// bursts of 30; client-go's own 5 and 10 made UpdateMachine wait seconds
// at scale), -kube-api-qps and -kube-api-burst change it, and values that
// are not positive are usage errors naming the flags.
func TestKubeAPIRateLimitFlags(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	for _, tc := range []struct {
		args  []string
		qps   float32
		burst int
	}{
		{nil, 20, 30},
		{[]string{"-kube-api-qps", "50", "-kube-api-burst", "100"}, 50, 100},
	} {
		o, err := parseFlags(append([]string{"-no-update-machine", "-kubeconfig", kc}, tc.args...), io.Discard)
		require.NoError(t, err, tc.args)
		cfg, err := restConfig(o.kubeconfig, float32(o.kubeAPIQPS), o.kubeAPIBurst)
		require.NoError(t, err)
		require.Equal(t, tc.qps, cfg.QPS, tc.args)
		require.Equal(t, tc.burst, cfg.Burst, tc.args)
	}
	for _, args := range [][]string{{"-kube-api-qps", "0"}, {"-kube-api-qps", "-1"}, {"-kube-api-qps", "NaN"}, {"-kube-api-qps", "1e40"}, {"-kube-api-burst", "0"}} {
		_, err := parseFlags(append([]string{"-no-update-machine"}, args...), io.Discard)
		require.ErrorIs(t, err, errInvalidFlag, args)
		require.ErrorContains(t, err, "--kube-api-qps/--kube-api-burst: ", args)
	}
}

// TestSupplyChainFlags: an upgrader image without a digest is refused
// (ErrInvalidOption, named by its flag) unless
// -allow-mutable-upgrader-images; bundles without checksums are refused
// unless -allow-unverified-bundles; -bundle-checksums-dir must be
// absolute. It failed before the fix: any image string and no checksums
// were accepted.
func TestSupplyChainFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" when accepted
	}{
		{"a tag", []string{"-upgrader-image", "registry.example/upgrader:v1.36.1", "-allow-unverified-bundles"},
			`--upgrader-image: "registry.example/upgrader:v1.36.1" is not pinned by digest (want <image>@sha256:<64 hex>; --allow-mutable-upgrader-images accepts tags)`},
		{"latest", []string{"-upgrader-image", "registry.example/upgrader:latest", "-allow-unverified-bundles"}, "is not pinned by digest"},
		{"a tag in the map", []string{"-upgrader-images", "v1.36.1=r/u@" + testDigest + ",v1.37.0=r/u:v1.37.0", "-allow-unverified-bundles"},
			`--upgrader-images: "r/u:v1.37.0" for "v1.37.0" is not pinned by digest`},
		{"a tag, allowed", []string{"-upgrader-image", "registry.example/upgrader:v1.36.1", "-allow-mutable-upgrader-images", "-allow-unverified-bundles"}, ""},
		{"no checksums", []string{"-upgrader-image", "r/u@" + testDigest},
			"--bundle-checksums-dir: required: without checksums the upgrader bundle's binaries run as root unverified; --allow-unverified-bundles accepts that"},
		{"checksums and the opt-out", []string{"-upgrader-image", "r/u@" + testDigest, "-bundle-checksums-dir", "/etc/sums", "-allow-unverified-bundles"}, "set one"},
		{"a relative checksums dir", []string{"-upgrader-image", "r/u@" + testDigest, "-bundle-checksums-dir", "sums"}, `--bundle-checksums-dir: "sums" is not an absolute path`},
		{"checksums", []string{"-upgrader-image", "r/u@" + testDigest, "-bundle-checksums-dir", "/etc/sums"}, ""},
		{"deciding only needs neither", []string{"-no-update-machine"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errInvalidFlag)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// The library's own error, for embedders: capi.ErrInvalidOption.
	o, err := parseFlags([]string{"-upgrader-image", "r/u@" + testDigest, "-allow-unverified-bundles"}, io.Discard)
	require.NoError(t, err)
	o.upgraderImage = "registry.example/upgrader:v1.36.1"
	require.ErrorIs(t, extensionserver.Validate(o.serverOptions(deps{})), capi.ErrInvalidOption)
}

// TestGateFlags: the gate flags turn into the library's gates, checked at
// start-up; each gate's behaviour is tested in strategy and strategy/capi.
func TestGateFlags(t *testing.T) {
	var out bytes.Buffer
	o, err := parseFlags([]string{"-upgrader-image", "img:v1@" + testDigest, "-allow-unverified-bundles", "-maintenance-window", "0 2 * * 6", "-maintenance-duration", "4h",
		"-maintenance-timezone", "Europe/Berlin", "-soak", "5m", "-blocking-pod-selector", "upgradekit.io/blocks-upgrades=true"}, &out)
	require.NoError(t, err)
	gates, err := o.gates(deps{})
	require.NoError(t, err)
	require.Len(t, gates, 1, "without a management cluster only the window can be built")
	window := gates[0]
	saturday := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC) // 04:00 in Berlin
	require.Equal(t, strategy.VerdictAllow, window.Check(t.Context(), strategy.GateRequest{Now: saturday}).Verdict)
	require.Equal(t, strategy.VerdictWait, window.Check(t.Context(), strategy.GateRequest{Now: saturday.Add(24 * time.Hour)}).Verdict)
	gates, err = o.gates(deps{mgmt: fakeclient.NewClientBuilder().Build(), scheme: runtime.NewScheme()})
	require.NoError(t, err)
	require.Len(t, gates, 3, "window, soak, blocking pods")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-upgrader-image", "x@" + testDigest, "-allow-unverified-bundles", "-maintenance-window", "0 2 * *"}, "expected exactly 5 fields"},
		{[]string{"-upgrader-image", "x@" + testDigest, "-allow-unverified-bundles", "-maintenance-window", "0 2 * * *", "-maintenance-timezone", "Mars/Olympus"}, "time zone"},
		{[]string{"-upgrader-image", "x@" + testDigest, "-allow-unverified-bundles", "-maintenance-window", "0 2 * * *", "-maintenance-duration", "0s"}, "must be positive"},
		{[]string{"-upgrader-image", "x@" + testDigest, "-allow-unverified-bundles", "-soak", "-1m"}, "invalid flag: --soak -1m0s: must not be negative"},
		{[]string{"-upgrader-image", "x@" + testDigest, "-allow-unverified-bundles", "-blocking-pod-selector", "a in ("}, "not a non-empty label selector"},
		{[]string{"-no-update-machine", "-soak", "5m"}, "--no-update-machine does not serve"},
	} {
		_, err := parseFlags(tc.args, &out)
		require.ErrorIs(t, err, errInvalidFlag, tc.args)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}

// TestUpgraderFlags: the upgrader pod flags, what they turn into, and
// the errors for values that would give pods the upgrader cannot run.
func TestUpgraderFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		image      string
		runner     []string
		mode       nodepod.Mode
		stageFrom  string
		namespace  string
		skip       map[string]bool
		wantErr    string
		nodepodErr bool
	}{
		{name: "defaults fit examples/upgrader's bundle image", args: nil,
			runner: []string{"/upgrader", "run"}, mode: nodepod.ModeInitContainers, stageFrom: "/staging", namespace: nodepod.DefaultNamespace, skip: map[string]bool{}},
		{name: "old flag names", args: []string{"-updater-image", "registry.example/old:v1@" + testDigest, "-updater-namespace", "ops"}, image: "registry.example/old:v1@" + testDigest,
			runner: []string{"/upgrader", "run"}, mode: nodepod.ModeInitContainers, stageFrom: "/staging", namespace: "ops", skip: map[string]bool{}},
		{name: "single container, own runner, no staging", args: []string{"-upgrader-mode", "SingleContainer", "-upgrader-command", " /opt/bin/runner  --verbose ", "-stage-from", ""},
			runner: []string{"/opt/bin/runner", "--verbose"}, mode: nodepod.ModeSingleContainer, namespace: nodepod.DefaultNamespace, skip: map[string]bool{}},
		{name: "raw layout", args: []string{"-upgrader-command", ""},
			mode: nodepod.ModeInitContainers, stageFrom: "/staging", namespace: nodepod.DefaultNamespace, skip: map[string]bool{}},
		{name: "skip steps", args: []string{"-skip-steps", "containerd, cni-plugins,etcd-snapshot,"},
			runner: []string{"/upgrader", "run"}, mode: nodepod.ModeInitContainers, stageFrom: "/staging", namespace: nodepod.DefaultNamespace,
			skip: map[string]bool{"containerd": true, "cni-plugins": true, "etcd-snapshot": true}},

		{name: "upgrader told to roll back", args: []string{"-upgrader-command", "/upgrader rollback"},
			wantErr: `--upgrader-command "/upgrader rollback": the upgrader pod runs plans, so the upgrader's command must be "run" ("/upgrader run")`},
		{name: "upgrader without command", args: []string{"-upgrader-command", "/upgrader"},
			wantErr: `the upgrader's command must be "run"`},
		{name: "upgrader run -direct", args: []string{"-upgrader-command", "/upgrader run --direct=true"},
			wantErr: `--upgrader-command "/upgrader run --direct=true": --direct=true would run host steps inside the container instead of through nsenter`},
		{name: "quoted command", args: []string{"-upgrader-command", `/upgrader run -plan "a b"`},
			wantErr: "no quotes or escapes, the command is split at spaces"},
		{name: "single container without runner", args: []string{"-upgrader-mode", "SingleContainer", "-upgrader-command", ""},
			wantErr: `--upgrader-mode: SingleContainer needs a runner command (--upgrader-command; default "/upgrader run")`},
		{name: "unknown mode", args: []string{"-upgrader-mode", "initcontainers"},
			wantErr: `--upgrader-mode: "initcontainers": want InitContainers or SingleContainer`},
		{name: "relative stage dir", args: []string{"-stage-from", "staging"},
			wantErr: `--stage-from: "staging": must be an absolute directory of the upgrader image other than / (default "/staging")`},
		{name: "stage the whole image", args: []string{"-stage-from", "//"},
			wantErr: `--stage-from: "//": must be an absolute directory`},
		{name: "unskippable step", args: []string{"-skip-steps", "kubeadm-upgrade"},
			wantErr: `--skip-steps: "kubeadm-upgrade" cannot be skipped; only containerd, cni-plugins, etcd-snapshot can`},
		{name: "namespace nodepod refuses", args: []string{"-upgrader-namespace", "Ops_Team"},
			wantErr: `upgrader pod: nodepod: invalid pod builder options: namespace "Ops_Team"`, nodepodErr: true},
		{name: "stray argument", args: []string{"registry.example/upgrader:v1"},
			wantErr: `unexpected arguments ["registry.example/upgrader:v1"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"-upgrader-image", "registry.example/upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles"}, tc.args...), io.Discard)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, errInvalidFlag)
				require.ErrorContains(t, err, tc.wantErr)
				if tc.nodepodErr {
					require.ErrorIs(t, err, nodepod.ErrInvalidOptions)
				}
				return
			}
			require.NoError(t, err)
			if tc.image == "" {
				tc.image = "registry.example/upgrader:v1.36.1@" + testDigest
			}
			require.Equal(t, tc.image, o.upgraderImage)
			require.Empty(t, cmp.Diff(tc.runner, o.runnerArgv, cmpopts.EquateEmpty()))
			require.Equal(t, tc.mode, nodepod.Mode(o.upgraderMode))
			require.Equal(t, tc.stageFrom, o.stageFrom)
			require.Equal(t, tc.namespace, o.upgraderNamespace)
			skipped := map[string]bool{}
			for _, s := range o.skip {
				skipped[s] = true
			}
			require.Equal(t, tc.skip, skipped)

			// What the options do to a pod and a plan.
			plan, err := kubeadm.NewPlan(planConfigFor(t, o, kubeadm.RoleFirstControlPlane))
			require.NoError(t, err)
			pod, err := nodepod.Build(plan, podOptionsOf(t, o)...)
			require.NoError(t, err)
			require.Equal(t, tc.namespace, pod.Namespace)
			require.Equal(t, string(tc.mode), pod.Annotations[nodepod.AnnotationMode])
			var first corev1.Container
			if len(pod.Spec.InitContainers) > 0 {
				first = pod.Spec.InitContainers[0]
			}
			require.Equal(t, tc.stageFrom != "", first.Name == nodepod.StageContainer, "a stage container iff -stage-from")
			if tc.runner != nil {
				require.Equal(t, tc.runner, pod.Spec.Containers[0].Command)
			} else {
				require.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy, "the raw layout never re-runs a step")
			}
			for _, step := range extensionserver.SkippableSteps() {
				require.Equal(t, !tc.skip[step], slices.ContainsFunc(plan.Steps, func(s nodeexec.Step) bool { return s.Name == step }),
					"step %s is in the plan unless skipped", step)
			}
		})
	}
}

// planConfigFor is the kubeadm configuration MachineUpdater builds for a
// node (strategy/updatemachine.go), adjusted by the extension's
// planConfig as capi.UpdaterOptions.PlanConfig does.
func planConfigFor(t *testing.T, o options, role kubeadm.Role) kubeadm.Config {
	t.Helper()
	cfg := kubeadm.Config{Node: "node-a", Role: role, FromVersion: "v1.35.4", ToVersion: "v1.36.1"}
	planConfigOf(t, o, &cfg)
	return cfg
}

// TestServesTheHooksOverHTTPS starts the extension as the binary does
// (CAPI's runtime server, TLS from -cert-dir) and calls it like CAPI.
func TestServesTheHooksOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	metricsPort := testcerts.FreePort(t)
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-cert-dir", dir, "-upgrader-image", "registry.example/upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles",
		"-metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metricsPort), "-metrics-secure=false", "-health-addr", "0"}, &bytes.Buffer{})
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, clusterv1.AddToScheme(scheme))
	// The machine the CanUpdateMachine requests below ask about is in the
	// management cluster (the skew check reads nothing for a request that
	// does not match it).
	liveMachine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default"}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.35.4"}}
	// Its cluster's kubeconfig secret reaches a real API server.
	mgmt := reachableMgmt(t, liveMachine)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, o, deps{mgmt: mgmt, scheme: scheme, recorder: events.NewFakeRecorder(10)})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	post := newHookClient(t, port, pool).post

	var disc runtimehooksv1.DiscoveryResponse
	post(runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "DiscoveryRequest"}}, &disc)
	var names []string
	for _, h := range disc.Handlers {
		names = append(names, h.Name)
	}
	require.ElementsMatch(t, []string{"upgradekit-can-update-machine", "upgradekit-can-update-machineset", "upgradekit-update-machine"}, names)
	// HTTP/2 is not offered, even to a client that asks for it.
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}}}
	r, err := h2.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/")
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, "HTTP/1.1", r.Proto)
	for _, h := range disc.Handlers {
		want := int32(capi.HandlerTimeoutCanUpdate / time.Second)
		if h.Name == "upgradekit-update-machine" {
			want = int32(capi.HandlerTimeoutUpdateMachine / time.Second)
		}
		require.Equal(t, want, *h.TimeoutSeconds, "discovery announces %s's timeout", h.Name)
		require.Equal(t, runtimehooksv1.FailurePolicyFail, *h.FailurePolicy, h.Name)
	}

	machine := func(v string) clusterv1.Machine {
		return clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default"}, Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: v}}
	}
	infra := func(image string) runtime.RawExtension {
		raw, _ := json.Marshal(map[string]any{"kind": "DockerMachine", "spec": map[string]any{"customImage": image}})
		return runtime.RawExtension{Raw: raw}
	}
	var resp runtimehooksv1.CanUpdateMachineResponse
	post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.35.4"), InfrastructureMachine: infra("kindest/node:v1.35.4")},
		Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.36.1"), InfrastructureMachine: infra("kindest/node:v1.35.4")},
	}, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.JSONEq(t, `[{"op":"replace","path":"/spec/version","value":"v1.36.1"}]`, string(resp.MachinePatch.Patch))

	resp = runtimehooksv1.CanUpdateMachineResponse{}
	post(runtimehooksv1.CanUpdateMachine, "upgradekit-can-update-machine", &runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		Current:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.35.4"), InfrastructureMachine: infra("kindest/node:v1.35.4")},
		Desired:  runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine("v1.36.1"), InfrastructureMachine: infra("kindest/node:v1.36.1")},
	}, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
	require.False(t, resp.MachinePatch.IsDefined(), "an image change is not done in place")
	require.Contains(t, resp.Message, "infrastructure.spec.customImage")

	// UpdateMachine without a kubeconfig secret for the cluster waits.
	require.NoError(t, mgmt.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-kubeconfig"}}))
	var up runtimehooksv1.UpdateMachineResponse
	m := machine("v1.36.1")
	m.Spec.ProviderID = "docker:////m"
	live := &clusterv1.Machine{}
	require.NoError(t, mgmt.Get(ctx, client.ObjectKeyFromObject(liveMachine), live))
	live.Spec = m.Spec
	infraMachine := markForUpdate(ctx, t, mgmt, live)
	require.NoError(t, mgmt.Update(ctx, live), "the Machine Cluster API marked for the update")
	post(runtimehooksv1.UpdateMachine, "upgradekit-update-machine", &runtimehooksv1.UpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "UpdateMachineRequest"},
		Desired:  runtimehooksv1.UpdateMachineRequestObjects{Machine: m, InfrastructureMachine: infraMachine},
	}, &up)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, up.Status, up.Message)
	require.Positive(t, up.RetryAfterSeconds)
	require.Contains(t, up.Message, "waiting for the workload cluster")

	// The decisions above are on /metrics, served from controller-runtime's
	// registry, with the UpdateMachine machine counted as pending.
	metricsURL := "http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"
	require.Eventually(t, func() bool {
		r, err := http.Get(metricsURL)
		if err == nil {
			r.Body.Close()
		}
		return err == nil && r.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "metrics server did not come up")
	require.NoError(t, testutil.ScrapeAndCompare(metricsURL, strings.NewReader(`
# HELP upgradekit_inplace_decisions_total CanUpdateMachine and CanUpdateMachineSet answers, by hook and outcome (accept, decline, error).
# TYPE upgradekit_inplace_decisions_total counter
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="accept"} 1
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="decline"} 1
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="error"} 0
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="accept"} 0
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="decline"} 0
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="error"} 0
# HELP upgradekit_inplace_machines_in_progress Machines whose last UpdateMachine answer from this process was in progress, by phase.
# TYPE upgradekit_inplace_machines_in_progress gauge
upgradekit_inplace_machines_in_progress{phase="DrainBlocked"} 0
upgradekit_inplace_machines_in_progress{phase="Draining"} 0
upgradekit_inplace_machines_in_progress{phase="Failed"} 0
upgradekit_inplace_machines_in_progress{phase="Pending"} 1
upgradekit_inplace_machines_in_progress{phase="Upgrading"} 0
upgradekit_inplace_machines_in_progress{phase="WaitingForKubelet"} 0
`), observe.MetricDecisions, observe.MetricMachinesInProgress))
}

// TestMetricsServerFailureStopsTheExtension: a metrics or health port
// already in use, or secure metrics without the management cluster's
// config to review scrapers' tokens with, is an error from serve, not an
// extension silently running without metrics or probes.
func TestMetricsServerFailureStopsTheExtension(t *testing.T) {
	dir := t.TempDir()
	testcerts.Write(t, dir)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	free := func() string { return "127.0.0.1:" + strconv.Itoa(testcerts.FreePort(t)) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"metrics port in use", []string{"-metrics-bind-address", taken.Addr().String(), "-metrics-secure=false", "-health-addr", free()}, "address already in use"},
		{"health port in use", []string{"-metrics-bind-address", "0", "-health-addr", taken.Addr().String()}, "-health-addr: listen tcp " + taken.Addr().String() + ": bind: address already in use"},
		{"secure metrics without a config", []string{"-metrics-bind-address", free(), "-health-addr", "0"}, "-metrics-secure: the management cluster's config is needed to review the scrapers' tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(testcerts.FreePort(t)), "-cert-dir", dir, "-no-update-machine"}, tc.args...), &bytes.Buffer{})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- serve(t.Context(), o, deps{scheme: runtime.NewScheme()}) }()
			select {
			case err := <-done:
				require.ErrorContains(t, err, tc.want)
			case <-time.After(30 * time.Second):
				t.Fatal("serve kept running without its metrics or health server")
			}
		})
	}
}

// TestHealthEndpoints: /healthz and /readyz answer on -health-addr, their
// own port, in plain HTTP as the kubelet probes them; /readyz once the
// hooks are served with the certificate, and both stop with serve.
func TestHealthEndpoints(t *testing.T) {
	dir := t.TempDir()
	testcerts.Write(t, dir)
	health := "127.0.0.1:" + strconv.Itoa(testcerts.FreePort(t))
	o, err := parseFlags([]string{"-host", "127.0.0.1", "-port", strconv.Itoa(testcerts.FreePort(t)), "-cert-dir", dir,
		"-no-update-machine", "-metrics-bind-address", "0", "-health-addr", health}, &bytes.Buffer{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, o, deps{scheme: runtime.NewScheme()}) }()
	get := func(path string) (int, string) {
		r, err := http.Get("http://" + health + path)
		if err != nil {
			return 0, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond, "ready once the hooks are served")
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/readyz/hooks": "ok", "/healthz/ping": "ok"} {
		code, body := get(path)
		require.Equal(t, http.StatusOK, code, path)
		require.Equal(t, want, body, path)
	}
	code, _ := get("/metrics")
	require.Equal(t, http.StatusNotFound, code, "nothing else on the health port")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	code, _ = get("/healthz")
	require.Zero(t, code, "stopped with the extension")
}

// TestLoggingAndVersionFlags: Kubernetes' logging flags are accepted (and
// a format that does not exist is a usage error naming the formats), and
// -version needs no other flag.
func TestLoggingAndVersionFlags(t *testing.T) {
	o, err := parseFlags([]string{"-no-update-machine", "-v=4", "--logging-format=json"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "json", o.logging.Format)
	require.EqualValues(t, 4, o.logging.Verbosity)
	require.Contains(t, o.flagValues, "--v=4")
	_, err = parseFlags([]string{"-no-update-machine", "-logging-format=yaml"}, io.Discard)
	require.ErrorIs(t, err, errInvalidFlag)
	require.ErrorContains(t, err, `format: Invalid value: "yaml": Unsupported log format`)
	var stderr bytes.Buffer
	require.Equal(t, exitUsage, exitCode(err, &stderr))
	_, err = parseFlags([]string{"-no-update-machine", "-v=loud"}, io.Discard)
	require.Equal(t, exitUsage, exitCode(err, io.Discard))
	o, err = parseFlags([]string{"--version"}, io.Discard)
	require.NoError(t, err, "no -upgrader-image needed to print the version")
	require.True(t, o.version)
}
