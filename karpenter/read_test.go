package karpenter

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/harness/apiserver"
)

// moduleDir is where the go command keeps a dependency's source.
func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	require.NoError(t, err, "go list -m %s", mod)
	return strings.TrimSpace(string(out))
}

// TestReadFromAnAPIServer stores the fixture cluster in a real
// kube-apiserver serving Karpenter's own CRDs (v1.14.1: their schemas and
// CEL validation accept every object, the v1beta1 ones after conversion),
// reads it back with Read and checks that Explain says the same of the
// live cluster as of the dump.
func TestReadFromAnAPIServer(t *testing.T) {
	scheme, err := Scheme()
	require.NoError(t, err)
	env := apiserver.StartForTest(t, apiserver.WithoutCAPICRDs(), apiserver.WithScheme(scheme), apiserver.WithCRDPaths(
		filepath.Join(moduleDir(t, "sigs.k8s.io/karpenter"), "pkg", "apis", "crds", "karpenter.sh_nodepools.yaml"),
		filepath.Join(moduleDir(t, "sigs.k8s.io/karpenter"), "pkg", "apis", "crds", "karpenter.sh_nodeclaims.yaml"),
		filepath.Join(moduleDir(t, "github.com/aws/karpenter-provider-aws"), "pkg", "apis", "crds", "karpenter.k8s.aws_ec2nodeclasses.yaml"),
	))
	ctx := t.Context()
	dump := readFixture(t)

	create := func(obj client.Object, withStatus bool) {
		t.Helper()
		status := obj.DeepCopyObject().(client.Object)
		require.NoError(t, env.Client.Create(ctx, obj), "%T %s", obj, obj.GetName())
		if withStatus {
			status.SetResourceVersion(obj.GetResourceVersion())
			status.SetUID(obj.GetUID())
			require.NoError(t, env.Client.Status().Update(ctx, status), "status of %s", obj.GetName())
		}
	}
	for i := range dump.EC2NodeClasses {
		create(dump.EC2NodeClasses[i].DeepCopy(), true)
	}
	for i := range dump.NodePools {
		create(dump.NodePools[i].DeepCopy(), false)
	}
	for i := range dump.NodeClaims {
		create(dump.NodeClaims[i].DeepCopy(), true)
	}
	for i := range dump.Nodes {
		create(dump.Nodes[i].DeepCopy(), false)
	}

	live, err := Read(ctx, env.Client)
	require.NoError(t, err)
	require.Len(t, live.NodePools, len(dump.NodePools))
	require.Len(t, live.NodeClaims, len(dump.NodeClaims))
	require.Len(t, live.EC2NodeClasses, len(dump.EC2NodeClasses))
	require.Len(t, live.Nodes, len(dump.Nodes))
	for i := range dump.NodePools {
		require.Equal(t, NodePoolHash(&dump.NodePools[i]), NodePoolHash(&live.NodePools[i]),
			"NodePool %s hashes alike after the API server's defaulting", dump.NodePools[i].Name)
	}

	instances := fixtureInstances(t)
	want, err := Explain(ctx, dump, WithInstances(instances))
	require.NoError(t, err)
	got, err := Explain(ctx, live, WithInstances(instances))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(reasonNames(want), reasonNames(got)))
	require.Equal(t, want.Drifted, got.Drifted)

	// Someone edits the NodePool's label after the NodeClaims were made,
	// and nothing holds the template as it was: the API server's managed
	// fields still say which hashed field was written since, by whom.
	time.Sleep(1100 * time.Millisecond) // managedFields times have seconds
	np := live.NodePool("default").DeepCopy()
	np.Spec.Template.Labels["team"] = "c"
	delete(np.Annotations, AnnotationLastApplied)
	require.NoError(t, env.Client.Update(ctx, np, client.FieldOwner("kubectl-edit")))
	live, err = Read(ctx, env.Client)
	require.NoError(t, err)
	rep, err := Explain(ctx, live)
	require.NoError(t, err)
	f := rep.NodeClaims[indexOf(rep, "default-f")]

	require.Equal(t, []drift.ReasonName{drift.ReasonNameNodePoolDrifted}, reasonNames(rep)["default-f"])
	require.Contains(t, f.Reasons[0].Message, `written since it was made (managedFields): metadata.labels (by kubectl-edit at `)
	require.NotContains(t, f.Reasons[0].Message, "spec.taints", "the taints were written before the NodeClaim was made")
}
