package capi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// The CanUpdate* answers checked against Cluster API's own code: the
// oracle built by hack/capi-inplace-oracle.sh runs CAPI v1.14's
// applyPatchesToRequest and matchesMachine / matchesMachineSet on each
// request and our answer to it.
//
// Properties, for every generated request and every decider:
//
//   - accepted means done: when we answer Success without declining, CAPI,
//     after applying our patches, finds nothing left to roll;
//   - no needless decline: when CAPI finds nothing to roll even without
//     any patch, we do not decline (and do not fail);
//   - the extension's own re-diff after its patches (the self-check) never
//     has to decline: if it does, the diff missed a difference.

// Environment for the oracle test.
const (
	// envOracle names a built oracle binary; set, it forces the test
	// even with UPGRADEKIT_SKIP_ENVTEST=1.
	envOracle = "UPGRADEKIT_CAPI_ORACLE"
	// envSkipHeavy is the repository's switch for heavy tests.
	envSkipHeavy = "UPGRADEKIT_SKIP_ENVTEST"
)

// oracleCases is how many requests of each hook are generated.
const oracleCases = 1500

// oraclePath returns the oracle binary, building it with the script when
// UPGRADEKIT_CAPI_ORACLE does not name one. It skips only when
// UPGRADEKIT_SKIP_ENVTEST=1 and no binary is named; failing to build it is
// a failure.
func oraclePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envOracle); p != "" {
		_, err := os.Stat(p)
		require.NoError(t, err, "%s names no oracle binary", envOracle)
		return p
	}
	if os.Getenv(envSkipHeavy) == "1" {
		t.Skipf("%s=1: skipping the CAPI oracle test (force it with %s=$(hack/capi-inplace-oracle.sh))", envSkipHeavy, envOracle)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "hack", "capi-inplace-oracle.sh"))
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "building the CAPI in-place oracle failed (hack/capi-inplace-oracle.sh):\n%s", stderr.String())
	p := strings.TrimSpace(string(out))
	require.NotEmpty(t, p, "hack/capi-inplace-oracle.sh printed no path:\n%s", stderr.String())
	return p
}

// oracleLine is one question to the oracle.
type oracleLine struct {
	Hook     string          `json:"hook"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
}

// oracleVerdict is the oracle's answer: does CAPI find current (patched)
// and desired equal?
type oracleVerdict struct {
	Match   bool     `json:"match"`
	Reasons []string `json:"reasons"`
	Error   string   `json:"error"`
}

// askOracle runs the oracle once over all lines.
func askOracle(t *testing.T, bin string, lines []oracleLine) []oracleVerdict {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, l := range lines {
		require.NoError(t, enc.Encode(l))
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdin = &in
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "oracle: %s", stderr.String())
	var verdicts []oracleVerdict
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var v oracleVerdict
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		verdicts = append(verdicts, v)
	}
	require.NoError(t, sc.Err())
	require.Len(t, verdicts, len(lines), "the oracle answered %d of %d lines: %s", len(verdicts), len(lines), stderr.String())
	return verdicts
}

// oracleCase is one generated request, with what was done to make it.
type oracleCase struct {
	hook  string
	req   []byte // the request as CAPI sends it
	edits []string
}

func TestExtensionAgreesWithCAPIOracle(t *testing.T) {
	bin := oraclePath(t)

	all := must(strategy.NewUpdater("everything", func(diff.Change) bool { return true }))
	kubeadm := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	deciders := []struct {
		name string
		ext  *capi.Extension
	}{
		{"accept everything", must(capi.NewExtension(strategy.Updaters(all), capi.ExtensionOptions{}))},
		{"kubeadm only", must(capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{}))},
	}

	var cases []oracleCase
	for i := range oracleCases {
		cases = append(cases, genMachineCase(t, rand.New(rand.NewPCG(20260101, uint64(i)))))
		cases = append(cases, genMachineSetCase(t, rand.New(rand.NewPCG(20260102, uint64(i)))))
	}

	// For each case: CAPI without any patch, then each decider's answer.
	var lines []oracleLine
	type answered struct {
		c       int
		decider string
		resp    runtimehooksv1.ResponseObject
	}
	var answers []answered
	for ci, c := range cases {
		lines = append(lines, oracleLine{Hook: c.hook, Request: c.req, Response: json.RawMessage(`{}`)})
		for _, d := range deciders {
			resp := callHook(t, d.ext, c)
			rb, err := json.Marshal(resp)
			require.NoError(t, err)
			lines = append(lines, oracleLine{Hook: c.hook, Request: c.req, Response: rb})
			answers = append(answers, answered{c: ci, decider: d.name, resp: resp})
		}
	}
	verdicts := askOracle(t, bin, lines)

	var (
		mismatches                               []string
		accepted, declined, capiMatchesUnpatched int
	)
	kinds := map[string]int{} // mismatches by what went wrong, numbers' forms apart
	report := func(c oracleCase, decider, what string, resp runtimehooksv1.ResponseObject, v oracleVerdict) {
		kind := what
		if slices.ContainsFunc(c.edits, func(e string) bool { return strings.HasPrefix(e, "numbers:") }) {
			kind += " (numbers' forms)"
		}
		kinds[kind]++
		rb, _ := json.Marshal(resp)
		mismatches = append(mismatches, fmt.Sprintf("%s / %s: %s\n  edits: %s\n  our answer: %s\n  CAPI: %s", c.hook, decider, what,
			strings.Join(c.edits, "; "), rb, strings.Join(v.Reasons, " | ")))
	}
	for ci, c := range cases {
		bare := verdicts[ci*(1+len(deciders))]
		require.Empty(t, bare.Error, "oracle error on the request alone (%s): %s", strings.Join(c.edits, "; "), c.req)
		if bare.Match {
			capiMatchesUnpatched++
		}
		for di := range deciders {
			a := answers[ci*len(deciders)+di]
			v := verdicts[ci*(1+len(deciders))+1+di]
			if v.Error != "" {
				report(c, a.decider, "CAPI cannot apply our answer: "+v.Error, a.resp, v)
				continue
			}
			msg := a.resp.GetMessage()
			failed := a.resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess
			decline := strings.HasPrefix(msg, "cannot update in place")
			switch {
			case failed:
				report(c, a.decider, "answered Failure", a.resp, v)
				continue
			case decline:
				declined++
			default:
				accepted++
				if !v.Match {
					report(c, a.decider, "accepted, but CAPI still finds differences after our patches", a.resp, v)
				}
			}
			if decline && bare.Match {
				report(c, a.decider, "declined although CAPI finds nothing to roll", a.resp, v)
			}
			if strings.Contains(msg, capi.SelfCheckMessageForTest) {
				report(c, a.decider, "the self-check had to decline: the diff missed a difference", a.resp, v)
			}
		}
	}
	// The public verifier says what CAPI says, on every line: the bare
	// request (an empty answer) and each decider's answer.
	verified := 0
	for i, l := range lines {
		v := verdicts[i]
		if v.Error != "" {
			continue
		}
		var err error
		switch l.Hook {
		case "CanUpdateMachine":
			var req runtimehooksv1.CanUpdateMachineRequest
			var resp runtimehooksv1.CanUpdateMachineResponse
			require.NoError(t, json.Unmarshal(l.Request, &req))
			require.NoError(t, json.Unmarshal(l.Response, &resp))
			err = capi.VerifyCanUpdateMachine(&req, &resp)
		default:
			var req runtimehooksv1.CanUpdateMachineSetRequest
			var resp runtimehooksv1.CanUpdateMachineSetResponse
			require.NoError(t, json.Unmarshal(l.Request, &req))
			require.NoError(t, json.Unmarshal(l.Response, &resp))
			err = capi.VerifyCanUpdateMachineSet(&req, &resp)
		}
		if errors.Is(err, capi.ErrNotAnAnswer) {
			continue
		}
		if v.Match != (err == nil) {
			mismatches = append(mismatches, fmt.Sprintf("%s: Verify says %v, CAPI says match=%v (%s)\n  answer: %s", l.Hook, err, v.Match, strings.Join(v.Reasons, " | "), l.Response))
			kinds["the verifier disagrees with CAPI"]++
		}
		if err != nil && !errors.Is(err, capi.ErrWouldRollOut) {
			mismatches = append(mismatches, fmt.Sprintf("%s: Verify failed: %v", l.Hook, err))
		}
		verified++
	}
	t.Logf("the verifier agrees with CAPI on %d answers", verified)
	require.Greater(t, verified, len(cases))
	t.Logf("%d generated requests (%d CanUpdateMachine, %d CanUpdateMachineSet) x %d deciders: %d accepted, %d declined; CAPI matches %d requests without any patch; %d mismatches",
		len(cases), len(cases)/2, len(cases)/2, len(deciders), accepted, declined, capiMatchesUnpatched, len(mismatches))
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		t.Logf("  %d: %s", kinds[k], k)
	}
	if len(mismatches) > 0 {
		show := mismatches[:min(len(mismatches), 8)]
		t.Fatalf("%d answers disagree with Cluster API's own comparison; the first %d:\n%s", len(mismatches), len(show), strings.Join(show, "\n"))
	}
	require.Positive(t, accepted)
	require.Positive(t, declined)
}

// callHook sends the request through JSON, as the runtime server receives
// it, and returns the extension's answer.
func callHook(t *testing.T, ext *capi.Extension, c oracleCase) runtimehooksv1.ResponseObject {
	t.Helper()
	switch c.hook {
	case "CanUpdateMachine":
		req, resp := &runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{}
		require.NoError(t, json.Unmarshal(c.req, req))
		ext.CanUpdateMachine(context.Background(), req, resp)
		return resp
	default:
		req, resp := &runtimehooksv1.CanUpdateMachineSetRequest{}, &runtimehooksv1.CanUpdateMachineSetResponse{}
		require.NoError(t, json.Unmarshal(c.req, req))
		ext.CanUpdateMachineSet(context.Background(), req, resp)
		return resp
	}
}

// The generator: a control plane or worker machine (Machine, KubeadmConfig,
// an AWSMachine-like infrastructure machine), with random edits on both
// sides: empty against absent ("", [], {}, null, nested), list order, values,
// Kubernetes version, labels and annotations, and the Machine fields CAPI
// cleans up before comparing.

func baseMachineSpec() clusterv1.MachineSpec {
	return clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.35.4", ProviderID: "aws:///us-east-1a/i-0abc", FailureDomain: "us-east-1a",
		Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "m-1"}},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", Name: "m-1"}}
}

func baseBootstrapSpec() map[string]any {
	return map[string]any{
		"clusterConfiguration": map[string]any{
			"etcd":      map[string]any{"local": map[string]any{"imageTag": "3.5.12-0", "extraArgs": []any{map[string]any{"name": "quota-backend-bytes", "value": "8589934592"}}}},
			"apiServer": map[string]any{"extraArgs": []any{map[string]any{"name": "audit-log-maxage", "value": "30"}, map[string]any{"name": "profiling", "value": "false"}}},
		},
		"joinConfiguration": map[string]any{
			"controlPlane": map[string]any{},
			"nodeRegistration": map[string]any{
				"kubeletExtraArgs": []any{map[string]any{"name": "max-pods", "value": "110"}, map[string]any{"name": "cloud-provider", "value": "external"}},
				"taints":           []any{},
				"name":             "{{ ds.meta_data.local_hostname }}",
			},
		},
		"files": []any{
			map[string]any{"path": "/etc/motd", "content": "v1", "owner": "root:root"},
			map[string]any{"path": "/etc/issue", "content": "welcome", "permissions": "0644"},
		},
		"preKubeadmCommands": []any{"echo one", "echo two"},
		"users":              []any{map[string]any{"name": "ops", "sshAuthorizedKeys": []any{"ssh-ed25519 AAAA"}}},
		"ntp":                map[string]any{"servers": []any{"0.pool.ntp.org", "1.pool.ntp.org"}, "enabled": true},
		"format":             "cloud-config",
	}
}

func baseInfraSpec() map[string]any {
	return map[string]any{
		"ami":                      map[string]any{"id": "ami-0123"},
		"instanceType":             "m5.large",
		"iamInstanceProfile":       "nodes.cluster-api-provider-aws.sigs.k8s.io",
		"sshKeyName":               "default",
		"additionalTags":           map[string]any{"team": "infra", "env": "prod"},
		"additionalSecurityGroups": []any{map[string]any{"id": "sg-1"}, map[string]any{"id": "sg-2"}},
		"rootVolume":               map[string]any{"size": int64(80), "type": "gp3", "encrypted": true},
		"providerID":               "aws:///us-east-1a/i-0abc",
		"instanceID":               "i-0abc",
		"cloudInit":                map[string]any{"insecureSkipSecretsManager": false},
		"subnet":                   map[string]any{"id": "subnet-1", "filters": []any{map[string]any{"name": "tag:Name", "values": []any{"a", "b"}}}},
	}
}

// side is one side of a generated machine, as JSON data where CAPI sends
// JSON, typed where it sends types.
type side struct {
	machine   clusterv1.MachineSpec
	labels    map[string]string
	bootstrap map[string]any
	infra     map[string]any
	// metadata of the bootstrap and infrastructure objects
	bootLabels, infraLabels map[string]any
}

func newSide() *side {
	return &side{machine: baseMachineSpec(), bootstrap: baseBootstrapSpec(), infra: baseInfraSpec(),
		bootLabels: map[string]any{}, infraLabels: map[string]any{}}
}

// edit is one random change to one side; it returns a description.
type edit func(r *rand.Rand, s *side) string

var (
	machineEdits = []edit{
		func(r *rand.Rand, s *side) string {
			v := []string{"v1.35.4", "v1.35.5", "v1.36.1"}[r.IntN(3)]
			s.machine.Version = v
			return "machine.spec.version=" + v
		},
		func(r *rand.Rand, s *side) string {
			v := []string{"", "us-east-1a", "us-east-1b"}[r.IntN(3)]
			s.machine.FailureDomain = v
			return fmt.Sprintf("machine.spec.failureDomain=%q", v)
		},
		func(r *rand.Rand, s *side) string {
			v := []string{"", "aws:///us-east-1a/i-0abc", "aws:///us-east-1b/i-0def"}[r.IntN(3)]
			s.machine.ProviderID = v
			return fmt.Sprintf("machine.spec.providerID=%q", v)
		},
		func(r *rand.Rand, s *side) string {
			switch r.IntN(3) {
			case 0:
				s.machine.ReadinessGates = nil
			case 1:
				s.machine.ReadinessGates = []clusterv1.MachineReadinessGate{}
			default:
				s.machine.ReadinessGates = []clusterv1.MachineReadinessGate{{ConditionType: "Ready"}}
			}
			return fmt.Sprintf("machine.spec.readinessGates=%v", s.machine.ReadinessGates)
		},
		func(r *rand.Rand, s *side) string {
			v := int32(r.IntN(3) * 10)
			s.machine.Deletion.NodeDrainTimeoutSeconds = &v
			s.machine.Deletion.NodeDeletionTimeoutSeconds = &v
			return fmt.Sprintf("machine.spec.deletion timeouts=%d", v)
		},
		func(r *rand.Rand, s *side) string {
			if r.IntN(2) == 0 {
				s.machine.Taints = nil
			} else {
				s.machine.Taints = []clusterv1.MachineTaint{{Key: "dedicated", Value: "infra", Effect: "NoSchedule", Propagation: "Always"}}
			}
			return "machine.spec.taints"
		},
		func(r *rand.Rand, s *side) string {
			v := int32(r.IntN(2) * 30)
			s.machine.MinReadySeconds = &v
			return fmt.Sprintf("machine.spec.minReadySeconds=%d", v)
		},
		func(r *rand.Rand, s *side) string {
			s.machine.Bootstrap.DataSecretName = ptrTo([]string{"", "m-1-data"}[r.IntN(2)])
			return "machine.spec.bootstrap.dataSecretName"
		},
		func(r *rand.Rand, s *side) string {
			if s.labels == nil {
				s.labels = map[string]string{}
			}
			s.labels["upgradekit.io/pool"] = []string{"", "a", "b"}[r.IntN(3)]
			return "machine.metadata.labels"
		},
	}
	objectEdits = []edit{
		func(r *rand.Rand, s *side) string { return emptyAgainstAbsent(r, s, true) },
		func(r *rand.Rand, s *side) string { return emptyAgainstAbsent(r, s, false) },
		func(r *rand.Rand, s *side) string { return addEmpty(r, s) },
		func(r *rand.Rand, s *side) string { return editValue(r, s) },
		func(r *rand.Rand, s *side) string { return reorderList(r, s) },
		func(r *rand.Rand, s *side) string {
			m := []map[string]any{s.bootLabels, s.infraLabels}[r.IntN(2)]
			k := []string{"a", "b"}[r.IntN(2)]
			m[k] = []string{"", "x", "y"}[r.IntN(3)]
			return "metadata.labels." + k
		},
	}
)

// object picks the bootstrap or the infrastructure spec.
func object(r *rand.Rand, s *side) (string, map[string]any) {
	if r.IntN(2) == 0 {
		return "bootstrap", s.bootstrap
	}
	return "infrastructure", s.infra
}

// emptyValues are the empty forms CAPI's comparison tells from absent.
func emptyValue(r *rand.Rand, like any) any {
	pick := r.IntN(6)
	if like != nil && r.IntN(2) == 0 {
		switch like.(type) {
		case string:
			pick = 0
		case []any:
			pick = 1
		case map[string]any:
			pick = 2
		}
	}
	switch pick {
	case 0:
		return ""
	case 1:
		return []any{}
	case 2:
		return map[string]any{}
	case 3:
		return map[string]any{"nested": map[string]any{}}
	case 5:
		return nil
	default:
		return map[string]any{"nested": ""}
	}
}

// emptyAgainstAbsent empties a field reached through objects only (set
// to "", [] or {}), or deletes it when del is set; the other side keeps
// it or, applied to the other side, does the opposite.
func emptyAgainstAbsent(r *rand.Rand, s *side, del bool) string {
	name, spec := object(r, s)
	paths := mapPaths(spec, nil)
	if len(paths) == 0 {
		return "nothing"
	}
	p := paths[r.IntN(len(paths))]
	parent, _ := lookup(spec, p[:len(p)-1]).(map[string]any)
	if parent == nil {
		return "nothing"
	}
	k := p[len(p)-1]
	if del {
		delete(parent, k)
		return fmt.Sprintf("%s.spec.%s deleted", name, strings.Join(p, "."))
	}
	v := emptyValue(r, parent[k])
	parent[k] = v
	return fmt.Sprintf("%s.spec.%s=%s", name, strings.Join(p, "."), jsonText(v))
}

// addEmpty adds an empty value under a new name somewhere.
func addEmpty(r *rand.Rand, s *side) string {
	name, spec := object(r, s)
	paths := append(mapPaths(spec, nil), nil)
	p := paths[r.IntN(len(paths))]
	m, ok := lookup(spec, p).(map[string]any)
	if !ok {
		m = spec
		p = nil
	}
	k := []string{"extra", "optional"}[r.IntN(2)]
	v := emptyValue(r, nil)
	m[k] = v
	return fmt.Sprintf("%s.spec.%s=%s", name, strings.Join(append(slices.Clone(p), k), "."), jsonText(v))
}

// editValue changes a scalar or appends a list element.
func editValue(r *rand.Rand, s *side) string {
	name, spec := object(r, s)
	paths := mapPaths(spec, nil)
	p := paths[r.IntN(len(paths))]
	parent := lookup(spec, p[:len(p)-1]).(map[string]any)
	k := p[len(p)-1]
	switch v := parent[k].(type) {
	case string:
		parent[k] = v + "-2"
	case bool:
		parent[k] = !v
	case int64:
		parent[k] = v + 1
	case []any:
		parent[k] = append(slices.Clone(v), "added")
	case map[string]any:
		v["added"] = "yes"
	default:
		parent[k] = "set"
	}
	return fmt.Sprintf("%s.spec.%s changed", name, strings.Join(p, "."))
}

// reorderList reverses a list somewhere.
func reorderList(r *rand.Rand, s *side) string {
	name, spec := object(r, s)
	var lists [][]string
	for _, p := range mapPaths(spec, nil) {
		if l, ok := lookup(spec, p).([]any); ok && len(l) > 1 {
			lists = append(lists, p)
		}
	}
	if len(lists) == 0 {
		return "nothing"
	}
	p := lists[r.IntN(len(lists))]
	parent := lookup(spec, p[:len(p)-1]).(map[string]any)
	l := slices.Clone(parent[p[len(p)-1]].([]any))
	slices.Reverse(l)
	parent[p[len(p)-1]] = l
	return fmt.Sprintf("%s.spec.%s reversed", name, strings.Join(p, "."))
}

// mapPaths lists the paths below m reached through objects only.
func mapPaths(m map[string]any, prefix []string) [][]string {
	var out [][]string
	for _, k := range sortedKeys(m) {
		p := append(slices.Clone(prefix), k)
		out = append(out, p)
		if sub, ok := m[k].(map[string]any); ok {
			out = append(out, mapPaths(sub, p)...)
		}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func lookup(v any, p []string) any {
	for _, k := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// genSides makes both sides of a case: a few edits on desired, fewer on
// current.
func genSides(r *rand.Rand) (cur, des *side, edits []string) {
	cur, des = newSide(), newSide()
	apply := func(s *side, label string, n int) {
		for range n {
			var e edit
			if r.IntN(3) == 0 {
				e = machineEdits[r.IntN(len(machineEdits))]
			} else {
				e = objectEdits[r.IntN(len(objectEdits))]
			}
			edits = append(edits, label+" "+e(r, s))
		}
	}
	apply(des, "desired:", r.IntN(4))
	apply(cur, "current:", r.IntN(3))
	for range r.IntN(3) {
		edits = append(edits, numberForms(r, cur, des))
	}
	if cur.machine.Version != "v1.35.4" {
		cur.machine.Version = "v1.35.4" // the version only moves forward
	}
	return cur, des, edits
}

// jsonText is v's JSON, for descriptions.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func unstructuredObject(kind, name string, labels map[string]any, spec map[string]any) map[string]any {
	md := map[string]any{"name": name, "namespace": "default"}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	group := "infrastructure.cluster.x-k8s.io/v1beta2"
	if strings.HasPrefix(kind, "Kubeadm") {
		group = "bootstrap.cluster.x-k8s.io/v1beta2"
	}
	return map[string]any{"apiVersion": group, "kind": kind, "metadata": md, "spec": spec}
}

func genMachineCase(t *testing.T, r *rand.Rand) oracleCase {
	cur, des, edits := genSides(r)
	machine := func(s *side) clusterv1.Machine {
		return clusterv1.Machine{
			TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
			ObjectMeta: metav1.ObjectMeta{Name: "m-1", Namespace: "default", Labels: s.labels},
			Spec:       s.machine,
		}
	}
	req := runtimehooksv1.CanUpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineRequest"},
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(cur),
			BootstrapConfig:       raw(t, unstructuredObject("KubeadmConfig", "m-1", cur.bootLabels, cur.bootstrap)),
			InfrastructureMachine: raw(t, unstructuredObject("AWSMachine", "m-1", cur.infraLabels, cur.infra))},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: machine(des),
			BootstrapConfig:       raw(t, unstructuredObject("KubeadmConfig", "m-1", des.bootLabels, des.bootstrap)),
			InfrastructureMachine: raw(t, unstructuredObject("AWSMachine", "m-1", des.infraLabels, des.infra))},
	}
	return oracleCase{hook: "CanUpdateMachine", req: mustJSON(t, req), edits: edits}
}

func genMachineSetCase(t *testing.T, r *rand.Rand) oracleCase {
	cur, des, edits := genSides(r)
	noBootstrap := r.IntN(10) == 0
	ms := func(s *side, name string) clusterv1.MachineSet {
		spec := s.machine
		spec.ProviderID = "" // a MachineSet's template has none
		if noBootstrap {
			spec.Bootstrap = clusterv1.Bootstrap{DataSecretName: ptrTo("data")}
		}
		return clusterv1.MachineSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: clusterv1.MachineSetSpec{ClusterName: "demo", Replicas: ptrTo(int32(r.IntN(3))),
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: s.labels}, Spec: spec}},
		}
	}
	tmpl := func(kind string, s *side, labels, spec map[string]any) runtime.RawExtension {
		return raw(t, unstructuredObject(kind, "md-0", labels, map[string]any{"template": map[string]any{"spec": spec}}))
	}
	req := runtimehooksv1.CanUpdateMachineSetRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "CanUpdateMachineSetRequest"},
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms(cur, "md-0-old"),
			InfrastructureMachineTemplate: tmpl("AWSMachineTemplate", cur, cur.infraLabels, cur.infra)},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: ms(des, "md-0-new"),
			InfrastructureMachineTemplate: tmpl("AWSMachineTemplate", des, des.infraLabels, des.infra)},
	}
	if noBootstrap {
		edits = append(edits, "no bootstrap templates")
	} else {
		req.Current.BootstrapConfigTemplate = tmpl("KubeadmConfigTemplate", cur, cur.bootLabels, cur.bootstrap)
		req.Desired.BootstrapConfigTemplate = tmpl("KubeadmConfigTemplate", des, des.bootLabels, des.bootstrap)
	}
	return oracleCase{hook: "CanUpdateMachineSet", req: mustJSON(t, req), edits: edits}
}

// Numbers as CAPI sees them. CAPI decodes the request's objects into
// unstructured maps (Unstructured.UnmarshalJSON, i.e.
// k8s.io/apimachinery/pkg/util/json.Unmarshal, which is sigs.k8s.io/json's
// UnmarshalCaseSensitivePreserveInts): a number literal without a fraction
// or an exponent that fits in an int64 becomes an int64, every other one
// (8.0, 8e0, 9223372036854775808) a float64. patch.ConvertToRawExtension
// keeps that map as the object and re-marshals it as Raw with
// encoding/json, so a float64 with an integral value below 1e21 becomes an
// integer literal there ("8.0" -> 8 -> "8"; -0.0 -> "-0"). A patch is
// applied to that Raw with evanphx/json-patch, which copies the patch's
// values verbatim, and patch.Patch decodes the result with the
// UniversalDeserializer, by the same int64-or-float64 rule, and copies its
// spec into the object; an object without a patch keeps the map decoded
// from the request. go-cmp then compares the maps: an int64 never equals a
// float64 ("8" against "8.0" differs, and so do "0" against "-0.0"), two
// int64 or two float64 compare by value (-0.0 equals 0.0), a string "8"
// equals no number. So:
//
//   - desired's numbers are what their literals say (int64 or float64);
//   - an unpatched current object's numbers likewise;
//   - a patched current object's numbers are what the patch writes where
//     it writes, and elsewhere what re-marshalling made of them: an
//     integral float64 below 1e21 that fits in an int64 is an int64 there.
//
// numberForms writes one value in two of its forms, one per side, at the
// same place (sometimes the same form, sometimes absent on one side), to
// check that InPlaceUpdate (diff.StrictNumbers) and the patches (float
// forms kept) agree with that.
func numberForms(r *rand.Rand, cur, des *side) string {
	family := numberFamilies[r.IntN(len(numberFamilies))]
	target := numberTargets[r.IntN(len(numberTargets))]
	pick := func() (any, string) {
		if r.IntN(8) == 0 {
			return nil, "absent"
		}
		lit := family[r.IntN(len(family))]
		if strings.HasPrefix(lit, `"`) {
			return strings.Trim(lit, `"`), lit
		}
		return json.Number(lit), lit
	}
	cv, ct := pick()
	dv, dt := cv, ct
	if r.IntN(3) != 0 {
		dv, dt = pick()
	}
	set := func(s *side, v any) {
		spec := s.infra
		if target.bootstrap {
			spec = s.bootstrap
		}
		parent := spec
		for _, k := range target.path[:len(target.path)-1] {
			next, ok := parent[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				parent[k] = next
			}
			parent = next
		}
		k := target.path[len(target.path)-1]
		switch {
		case v == nil:
			delete(parent, k)
		case target.list:
			parent[k] = []any{json.Number("1"), v}
		default:
			parent[k] = v
		}
	}
	set(cur, cv)
	set(des, dv)
	name := "infrastructure"
	if target.bootstrap {
		name = "bootstrap"
	}
	return fmt.Sprintf("numbers: %s.spec.%s current %s desired %s", name, strings.Join(target.path, "."), ct, dt)
}

// numberFamilies are forms of one value each, as JSON literals (quoted: a
// string).
var numberFamilies = [][]string{
	{"8", "8.0", "8e0", "8E+0", "80e-1", `"8"`},
	{"0", "-0", "0.0", "-0.0", "0e5"},
	{"-12", "-12.0", "-1.2e1"},
	{"2.5", "2.50", "25e-1"},
	{"9007199254740993", "9007199254740993.0", "9007199254740992", "9.007199254740993e15"}, // beyond 2^53
	{"9223372036854775807", "9223372036854775808", "9.223372036854775807e18"},              // int64 bounds
	{"1e21", "1000000000000000000000", "1E+21"},
}

// numberTargets are where numberForms writes.
var numberTargets = []struct {
	bootstrap bool
	path      []string
	list      bool
}{
	{false, []string{"rootVolume", "size"}, false},
	{false, []string{"rootVolume", "iops"}, false},
	{false, []string{"spotMarketOptions", "maxPrice"}, false},
	{false, []string{"placement", "weights"}, true},
	{true, []string{"ntp", "maxPoll"}, false},
	{true, []string{"joinConfiguration", "timeouts", "kubeletHealthCheckSeconds"}, false},
}

// TestOracleRefusesPatchesUnderANullSpec: Cluster API's own patch code
// cannot set spec.template.spec on a template stored without a spec (the
// request carries "spec": null), whatever the patch; Verify says so too,
// and the Extension declines such a change instead of answering a patch
// that would stall the rollout. Found by the preview's truth test.
func TestOracleRefusesPatchesUnderANullSpec(t *testing.T) {
	bin := oraclePath(t)
	req := []byte(`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"CanUpdateMachineSetRequest",
"current":{"machineSet":{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachineSet","metadata":{"name":"md-a"},"spec":{"clusterName":"c","template":{"spec":{"clusterName":"c","version":"v1.35.4"}}}},
 "bootstrapConfigTemplate":{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfigTemplate","metadata":{"name":"kct-0"},"spec":null},
 "infrastructureMachineTemplate":{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"DockerMachineTemplate","metadata":{"name":"t"},"spec":{"template":{"spec":{"customImage":"a"}}}}},
"desired":{"machineSet":{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachineSet","metadata":{"name":"md-b"},"spec":{"clusterName":"c","template":{"spec":{"clusterName":"c","version":"v1.35.4"}}}},
 "bootstrapConfigTemplate":{"apiVersion":"bootstrap.cluster.x-k8s.io/v1beta2","kind":"KubeadmConfigTemplate","metadata":{"name":"kct-1"},"spec":{"template":{"spec":{"joinConfiguration":{"nodeRegistration":{"kubeletExtraArgs":[{"name":"max-pods","value":"50"}]}}}}}},
 "infrastructureMachineTemplate":{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"DockerMachineTemplate","metadata":{"name":"t"},"spec":{"template":{"spec":{"customImage":"a"}}}}}}`)
	arg := `{"template":{"spec":{"joinConfiguration":{"nodeRegistration":{"kubeletExtraArgs":[{"name":"max-pods","value":"50"}]}}}}}`
	answers := []*runtimehooksv1.CanUpdateMachineSetResponse{
		{BootstrapConfigTemplatePatch: runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: []byte(`[{"op":"add","path":"/spec","value":` + arg + `}]`)}},
		{BootstrapConfigTemplatePatch: runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONMergePatchType, Patch: []byte(`{"spec":` + arg + `}`)}},
	}
	var lines []oracleLine
	for _, resp := range answers {
		resp.Status = runtimehooksv1.ResponseStatusSuccess
		rb, err := json.Marshal(resp)
		require.NoError(t, err)
		lines = append(lines, oracleLine{Hook: "CanUpdateMachineSet", Request: req, Response: rb})
	}
	verdicts := askOracle(t, bin, lines)
	var r runtimehooksv1.CanUpdateMachineSetRequest
	require.NoError(t, json.Unmarshal(req, &r))
	for i, resp := range answers {
		require.Contains(t, verdicts[i].Error, "is not a map", "CAPI cannot apply patch %d", i)
		require.ErrorIs(t, capi.VerifyCanUpdateMachineSet(&r, resp), capi.ErrInvalidPatch, "patch %d", i)
	}
	kubelet := must(strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...))
	a, err := must(capi.NewExtension(strategy.Updaters(kubelet), capi.ExtensionOptions{})).AnswerCanUpdateMachineSet(t.Context(), &r)
	require.NoError(t, err)
	require.False(t, a.Accept, "declined: %s", a.Message)
}
