package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/awslabs/operatorpkg/status"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/karpenter"
)

// dumpDir holds the Karpenter fixture cluster (see its README).
const dumpDir = "../../karpenter/testdata/dump"

// karpenterRows parses the summary table: NodeClaim -> "verdict reasons".
func karpenterRows(t *testing.T, out string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	lines := strings.Split(out, "\n")
	require.True(t, strings.HasPrefix(lines[0], "NODECLAIM"), out)
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 5, l)
		verdict := f[3]
		i := 4
		if verdict == "not" {
			verdict, i = "not drifted", 5
		}
		rows[f[0]] = verdict + " " + f[i]
	}
	return rows
}

// TestKarpenterDump runs the -karpenter mode on the fixture dump: every
// drifted NodeClaim with its reasons, every other one not drifted, exit 3.
func TestKarpenterDump(t *testing.T) {
	want := map[string]string{
		"arm-a":      "not drifted -",
		"default-a":  "drifted NodePoolDrifted",
		"default-b":  "drifted AMIDrift",
		"default-c":  "drifted RequirementsDrifted",
		"default-d":  "drifted SecurityGroupDrift",
		"default-e":  "drifted SubnetDrift",
		"default-f":  "not drifted -",
		"default-g":  "drifted NodeClassDrift",
		"default-h":  "not drifted -",
		"default-i":  "not drifted -",
		"legacy-a":   "not drifted -",
		"legacy-b":   "drifted NodePoolDrifted,NodeClassDrift,AMIDrift",
		"gpu-a":      "drifted AMIDrift",
		"pg-a":       "drifted PlacementGroupDrift",
		"reserved-a": "drifted RequirementsDrifted,CapacityReservationDrift",
		"gone-a":     "unknown -",
	}
	out, stderr, err := runCmd(t, "-karpenter", "-instances", dumpDir+"/instances.json", dumpDir+"/cluster.yaml")
	require.ErrorIs(t, err, errDrifted, stderr)
	require.Empty(t, cmp.Diff(want, karpenterRows(t, out)))
	require.Contains(t, out, `metadata.labels["team"]: a -> b`)
	require.Contains(t, out, "NodeClaim/legacy-a was read in its v1beta1 form")
	require.Contains(t, out, "10 of 16 NodeClaims drifted")

	// Without the instances, security groups and subnets cannot be seen.
	out, _, err = runCmd(t, "-karpenter", dumpDir+"/cluster.yaml")
	require.ErrorIs(t, err, errDrifted)
	rows := karpenterRows(t, out)
	require.Equal(t, "not drifted -", rows["default-d"])
	require.Equal(t, "not drifted -", rows["default-e"])
	require.Contains(t, out, "8 of 16 NodeClaims drifted")

	// With the offerings, the instance type no longer offered is found.
	out, _, err = runCmd(t, "--karpenter", "--offerings", dumpDir+"/offerings.json", dumpDir+"/cluster.yaml")
	require.ErrorIs(t, err, errDrifted)
	require.Equal(t, "drifted InstanceTypeNotFound", karpenterRows(t, out)["gone-a"])
}

// TestKarpenterJSON: -o json and -o yaml print the karpenter.Report as a
// Kubernetes-shaped object, however the flag is spelt.
func TestKarpenterJSON(t *testing.T) {
	for _, args := range [][]string{
		{"-karpenter", "-o", "json"},
		{"--karpenter", "--output=yaml"},
		{"-oyaml", "--karpenter"},
	} {
		out, _, err := runCmd(t, append(args, dumpDir+"/cluster.yaml")...)
		require.ErrorIs(t, err, errDrifted)
		var rep struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			karpenter.Report
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(out), &rep), "%q", args)
		require.Equal(t, "cli.upgradekit.io/v1alpha1", rep.APIVersion)
		require.Equal(t, "KarpenterDriftReport", rep.Kind)
		require.Equal(t, 8, rep.Drifted)
		require.Len(t, rep.NodeClaims, 16)
		require.NotContains(t, out, "null")
	}
}

// TestKarpenterImages: with an image catalog, AMI drift says which term
// matched the new image and why it won.
func TestKarpenterImages(t *testing.T) {
	out, _, err := runCmd(t, "-karpenter", "-images", dumpDir+"/images.json", "-kubernetes-version", "1.31",
		"-images-at", "2025-05-21T00:00:00Z", dumpDir+"/cluster.yaml")
	require.ErrorIs(t, err, errDrifted)
	require.Contains(t, out, `term 0 (alias "al2023@latest") matched ami-0new`)
	require.Contains(t, out, "the newest image that is not deprecated for amd64")
}

// writeDump writes snap's NodePools, EC2NodeClasses and the NodeClaims
// keep selects to a v1 dump file.
func writeDump(t *testing.T, snap *karpenter.Snapshot, keep func(name string) bool) string {
	t.Helper()
	var docs []string
	add := func(obj any) {
		b, err := json.Marshal(obj)
		require.NoError(t, err)
		docs = append(docs, string(b))
	}
	for _, np := range snap.NodePools {
		np.APIVersion, np.Kind = "karpenter.sh/v1", "NodePool"
		add(np)
	}
	for _, c := range snap.EC2NodeClasses {
		c.APIVersion, c.Kind = "karpenter.k8s.aws/v1", "EC2NodeClass"
		add(c)
	}
	for _, nc := range snap.NodeClaims {
		if keep(nc.Name) {
			nc.APIVersion, nc.Kind = "karpenter.sh/v1", "NodeClaim"
			add(nc)
		}
	}
	file := filepath.Join(t.TempDir(), "dump.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o600))
	return file
}

// TestKarpenterAllUpToDate: a cluster where nothing drifted exits 0.
func TestKarpenterAllUpToDate(t *testing.T) {
	file := writeDump(t, readDump(t), func(name string) bool { return name == "default-f" || name == "arm-a" })
	out, stderr, err := runCmd(t, "-karpenter", file)
	require.NoError(t, err, stderr)
	require.Contains(t, out, "0 of 2 NodeClaims drifted")
}

// TestKarpenterPrevious: without last-applied-configuration the changed
// field is unknown; -previous with the NodePool as it was names it.
func TestKarpenterPrevious(t *testing.T) {
	snap := readDump(t)
	np := snap.NodePool("default")
	delete(np.Annotations, karpenter.AnnotationLastApplied)
	file := writeDump(t, snap, func(name string) bool { return name == "default-a" })
	out, _, err := runCmd(t, "-karpenter", file)
	require.ErrorIs(t, err, errDrifted)
	require.Contains(t, out, "which fields is unknown")

	prev := np.DeepCopy()
	prev.APIVersion, prev.Kind = "karpenter.sh/v1", "NodePool"
	prev.Spec.Template.Labels = map[string]string{"team": "a"}
	b, err := json.Marshal(prev)
	require.NoError(t, err)
	previous := filepath.Join(t.TempDir(), "previous.yaml")
	require.NoError(t, os.WriteFile(previous, b, 0o600))
	out, _, err = runCmd(t, "-karpenter", "-previous", previous, file)
	require.ErrorIs(t, err, errDrifted)
	require.Contains(t, out, `metadata.labels["team"]: a -> b`)
	require.Contains(t, out, "the previous NodePools given")
}

// goModDir is where the go command keeps a dependency's source.
func goModDir(t *testing.T, mod string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	require.NoError(t, err, "go list -m %s", mod)
	return strings.TrimSpace(string(out))
}

func readDump(t *testing.T) *karpenter.Snapshot {
	t.Helper()
	s, err := readDumpFile(dumpDir + "/cluster.yaml")
	require.NoError(t, err)
	return s
}

// oneDashFlag is a long flag spelt with one dash, as kubectl never
// spells it: -karpenter, (-kubeconfig.
var oneDashFlag = regexp.MustCompile(`(^|[\s(,])-[a-z][a-z-]+`)

func TestKarpenterUsage(t *testing.T) {
	dump := dumpDir + "/cluster.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-karpenter"}, "--karpenter needs dump files (DUMP.yaml...) or --live; --help for usage"},
		{[]string{"-karpenter", "-stamp", dump}, "--stamp cannot be combined with --karpenter"},
		{[]string{"-karpenter", "-live", dump}, "--live reads the cluster: give no dump files"},
		{[]string{"-karpenter", "-kubeconfig", "x", dump}, "--kubeconfig and --context need --live"},
		{[]string{"-karpenter", "-o", "xml", dump}, `--output "xml": want table, json, yaml`},
		{[]string{"-karpenter", "-kubernetes-version", "1.31", dump}, "--kubernetes-version and --images-at need --images"},
		{[]string{"-karpenter", "-images", dumpDir + "/images.json", "-kubernetes-version", "one", dump}, "--kubernetes-version: "},
		{[]string{"-karpenter", "-instances", "no-such-file.json", dump}, "no-such-file.json"},
		{[]string{"-karpenter", "no-such-dump.yaml"}, "no-such-dump.yaml"},
		{[]string{"-instances", "x", "a", "b"}, "--instances needs --karpenter"},
		{[]string{"--karpenter", "--images", dumpDir + "/images.json", "--images-at", "yesterday", dump}, "--images-at: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCmd(t, tc.args...)
			var ue usageError
			require.True(t, errors.As(err, &ue), "%v", err)
			require.Contains(t, err.Error(), tc.want)
			require.NotRegexp(t, oneDashFlag, err.Error(), "flags are spelt --flag, as kubectl spells them")
		})
	}
}

// TestKarpenterLive reads the fixture cluster from a real kube-apiserver
// serving Karpenter's CRDs, through a kubeconfig file, as a user would.
func TestKarpenterLive(t *testing.T) {
	kubeconfig := liveCluster(t)
	out, stderr, err := runCmd(t, "-karpenter", "-live", "-kubeconfig", kubeconfig, "-context", "envtest",
		"-instances", dumpDir+"/instances.json")
	require.ErrorIs(t, err, errDrifted, stderr)
	require.Empty(t, stderr, "stderr is no terminal: no progress")
	fromDump, _, _ := runCmd(t, "-karpenter", "-instances", dumpDir+"/instances.json", dumpDir+"/cluster.yaml")
	require.Empty(t, cmp.Diff(karpenterRows(t, fromDump), karpenterRows(t, out)))

	_, _, err = runCmd(t, "-karpenter", "-live", "-kubeconfig", kubeconfig, "-context", "no-such-context")
	require.Error(t, err)
	require.Contains(t, err.Error(), "no-such-context")
}

// liveCluster starts a real kube-apiserver serving Karpenter's CRDs,
// creates the fixture cluster's EC2NodeClasses, NodePools and NodeClaims
// in it (no Nodes) and returns a kubeconfig file whose context envtest
// reaches it.
func liveCluster(t *testing.T) string {
	t.Helper()
	scheme, err := karpenter.Scheme()
	require.NoError(t, err)
	crds := func(mod string, files ...string) []string {
		dir := goModDir(t, mod)
		var out []string
		for _, f := range files {
			out = append(out, filepath.Join(dir, "pkg", "apis", "crds", f))
		}
		return out
	}
	env := apiserver.StartForTest(t, apiserver.WithoutCAPICRDs(), apiserver.WithScheme(scheme), apiserver.WithCRDPaths(append(
		crds("sigs.k8s.io/karpenter", "karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml"),
		crds("github.com/aws/karpenter-provider-aws", "karpenter.k8s.aws_ec2nodeclasses.yaml")...)...))
	snap := readDump(t)
	var objs []client.Object
	for i := range snap.EC2NodeClasses {
		objs = append(objs, &snap.EC2NodeClasses[i])
	}
	for i := range snap.NodePools {
		objs = append(objs, &snap.NodePools[i])
	}
	for i := range snap.NodeClaims {
		objs = append(objs, &snap.NodeClaims[i])
	}
	for _, obj := range objs {
		status := obj.DeepCopyObject().(client.Object)
		require.NoError(t, env.Client.Create(t.Context(), obj))
		status.SetResourceVersion(obj.GetResourceVersion())
		if err := env.Client.Status().Update(t.Context(), status); err != nil {
			require.Contains(t, err.Error(), "not found", "NodePools have a status too; only a missing subresource may fail")
		}
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	require.NoError(t, clientcmd.WriteToFile(*cfg, kubeconfig))
	return kubeconfig
}

func TestPluralKind(t *testing.T) {
	for _, tc := range []struct {
		list client.ObjectList
		want string
	}{
		{&karpv1.NodePoolList{}, "NodePools"},
		{&karpv1.NodeClaimList{}, "NodeClaims"},
		{&corev1.NodeList{}, "Nodes"},
		{&awsv1.EC2NodeClassList{}, "EC2NodeClasses"},
	} {
		require.Equal(t, tc.want, pluralKind(tc.list))
	}
}

// TestKarpenterClusterCABundle: with the EC2NodeClass's hash annotation
// not yet written, a NodeClaim stamped with the hash Karpenter will write
// is "cannot tell" without --cluster-ca-bundle and not drifted with it.
func TestKarpenterClusterCABundle(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"
	snap := readDump(t)
	class := snap.EC2NodeClass("default")
	delete(class.Annotations, awsv1.AnnotationEC2NodeClassHash)
	delete(class.Annotations, awsv1.AnnotationEC2NodeClassHashVersion)
	caCopy := ca
	for i := range snap.NodeClaims {
		if snap.NodeClaims[i].Name == "default-f" {
			snap.NodeClaims[i].Annotations[awsv1.AnnotationEC2NodeClassHash] = class.Hash(&caCopy)
		}
	}
	file := writeDump(t, snap, func(name string) bool { return name == "default-f" })
	out, _, _ := runCmd(t, "-karpenter", file)
	require.Contains(t, out, "CA bundle")

	bundle := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(bundle, []byte(ca), 0o600))
	out, stderr, err := runCmd(t, "--karpenter", "--cluster-ca-bundle", bundle, file)
	require.NoError(t, err, stderr)
	require.NotContains(t, out, "CA bundle")
	require.Contains(t, out, "0 of 1 NodeClaims drifted")
	require.Contains(t, out, "EC2NodeClass default has no hash annotation yet; Karpenter will stamp "+class.Hash(&caCopy))
}

// TestHelpNamesArguments: --help names what each file or value flag takes
// (pflag reads the backquoted word of a usage string as its argument), not
// "string".
func TestHelpNamesArguments(t *testing.T) {
	_, stderr, _ := runCmd(t, "--help")
	for _, want := range []string{"--previous FILE", "--cluster-ca-bundle FILE", "--offerings FILE", "--instances FILE", "--images FILE",
		"--images-at TIME", "--kubernetes-version VERSION", "--kubeconfig FILE", "--context NAME", "--proposed FILE"} {
		require.Contains(t, stderr, want)
	}
	require.NotContains(t, stderr, "with -karpenter", "one spelling of the flags in the help: --karpenter")
}

// TestKarpenterTableNamesTheRequirement: the table's details name the
// label and the requirement it no longer meets, not only -o json.
func TestKarpenterTableNamesTheRequirement(t *testing.T) {
	out, _, err := runCmd(t, "-karpenter", "-instances", dumpDir+"/instances.json", dumpDir+"/cluster.yaml")
	require.ErrorIs(t, err, errDrifted)
	require.Contains(t, out, "label karpenter.sh/capacity-type=spot: needs karpenter.sh/capacity-type In [on-demand]")
}

// TestKarpenterDumpWithoutTheFlag: a Karpenter dump read in the generic
// mode is refused with the way to read it, not reported "not stamped".
func TestKarpenterDumpWithoutTheFlag(t *testing.T) {
	_, _, err := runCmd(t, "testdata/nodepool.yaml", dumpDir+"/cluster.yaml")
	var ue usageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, err.Error(), "stamped by Karpenter")
	require.Contains(t, err.Error(), "--karpenter")
}

// TestKarpenterVerdictUnknown: a NodeClaim Karpenter marked drifted for a
// reason the input cannot check reads "unknown" in the table.
func TestKarpenterVerdictUnknown(t *testing.T) {
	snap := readDump(t)
	for i := range snap.NodeClaims {
		if snap.NodeClaims[i].Name == "default-d" {
			snap.NodeClaims[i].Status.Conditions = append(snap.NodeClaims[i].Status.Conditions,
				status.Condition{Type: "Drifted", Status: metav1.ConditionTrue, Reason: "SecurityGroupDrift", LastTransitionTime: metav1.Now()})
		}
	}
	file := writeDump(t, snap, func(name string) bool { return name == "default-d" })
	out, _, err := runCmd(t, "--karpenter", file)
	require.NoError(t, err)
	require.Regexp(t, `default-d .* unknown +- +Drifted: SecurityGroupDrift`, out)
	require.Contains(t, out, "cannot tell: Karpenter's Drifted condition says SecurityGroupDrift")
}

// TestKarpenterOfferings: --offerings reads describe-instance-type-offerings
// output; a NodeClaim whose instance type is not offered is
// InstanceTypeNotFound.
func TestKarpenterOfferings(t *testing.T) {
	file := writeDump(t, readDump(t), func(name string) bool { return name == "default-f" })
	offerings := filepath.Join(t.TempDir(), "offerings.json")
	require.NoError(t, os.WriteFile(offerings, []byte(`{"InstanceTypeOfferings": [
	  {"InstanceType": "x9.nothing", "LocationType": "availability-zone", "Location": "us-west-2a"}]}`), 0o600))
	out, _, err := runCmd(t, "--karpenter", "--offerings", offerings, file)
	require.ErrorIs(t, err, errDrifted)
	require.Contains(t, out, "InstanceTypeNotFound")
	require.Contains(t, out, "is no longer offered")

	require.NoError(t, os.WriteFile(offerings, []byte(`{"InstanceTypeOfferings": [{"LocationType": "region"}]}`), 0o600))
	_, _, err = runCmd(t, "--karpenter", "--offerings", offerings, file)
	require.ErrorContains(t, err, "--offerings")
}
