package karpenter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"
)

func TestReadDumpFormats(t *testing.T) {
	const pool = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: a}
spec: {template: {spec: {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: x}, requirements: []}}}
`
	for _, tc := range []struct {
		name, in string
		pools    []string
	}{
		{"one document", pool, []string{"a"}},
		{"documents", pool + "---\n" + strings.ReplaceAll(pool, "name: a", "name: b"), []string{"a", "b"}},
		{"list", "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(strings.TrimSpace(pool), "\n", "\n  "), []string{"a"}},
		{"NodePoolList", "apiVersion: karpenter.sh/v1\nkind: NodePoolList\nitems: []\n", nil},
		{"other kinds ignored", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + pool, []string{"a"}},
		{"json", `{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"j"}}`, []string{"j"}},
		{"empty", "", nil},
		{"sorted by name", strings.ReplaceAll(pool, "name: a", "name: z") + "---\n" + pool, []string{"a", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadDump(strings.NewReader(tc.in))
			require.NoError(t, err)
			var names []string
			for _, p := range s.NodePools {
				names = append(names, p.Name)
			}
			require.Equal(t, tc.pools, names)
		})
	}
}

func TestReadDumpErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"not yaml", "a: [", "document 1"},
		{"items not a list", "kind: List\nitems: 3\n", "items is not a list"},
		{"item not an object", "kind: List\nitems: [3]\n", "item 0: not an object"},
		{"no name", "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {}\n", "NodeClaim without metadata.name"},
		{"unknown version", "apiVersion: karpenter.sh/v2\nkind: NodePool\nmetadata: {name: a}\n", `unsupported apiVersion "karpenter.sh/v2"`},
		{"bad field type", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: a}\nspec: {template: 3}\n", `"NodePool/a"`},
		{"no kind", "apiVersion: karpenter.sh/v1\nmetadata: {name: a}\nspec: {}\n", `object "a" has no apiVersion or kind`},
		{"no apiVersion in a List", "kind: List\nitems: [{kind: NodeClaim, metadata: {name: b}}]\n", `document 1, item 0: object "b" has no apiVersion or kind`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadDump(strings.NewReader(tc.in))
			require.ErrorIs(t, err, ErrInvalidDump)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := ReadDump(nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestConvertV1beta1 converts each kind as Karpenter's v1 conversion did.
func TestConvertV1beta1(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"NodePool", `
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: p}
spec:
  disruption: {consolidationPolicy: WhenUnderutilized, expireAfter: 720h}
  template:
    spec:
      kubelet: {maxPods: 110}
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}
`, `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: p
  annotations:
    compatibility.karpenter.sh/v1beta1-kubelet-conversion: '{"maxPods":110}'
    compatibility.karpenter.sh/v1beta1-nodeclass-reference: '{"apiVersion":"karpenter.k8s.aws/v1beta1","kind":"EC2NodeClass","name":"c"}'
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}
  template:
    spec:
      expireAfter: 720h
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}
`},
		{"NodePool without a template", `
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: p}
spec:
  disruption: {expireAfter: Never}
`, `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec:
  disruption: {}
  template: {spec: {expireAfter: Never}}
`},
		{"NodeClaim", `
apiVersion: karpenter.sh/v1beta1
kind: NodeClaim
metadata: {name: n}
spec:
  nodeClassRef: {name: c}
`, `
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: n
  annotations:
    compatibility.karpenter.sh/v1beta1-nodeclass-reference: '{"name":"c"}'
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}
`},
		{"EC2NodeClass family only", `
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiFamily: Bottlerocket}
`, `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c}
spec:
  amiSelectorTerms: [{alias: bottlerocket@latest}]
`},
		{"NodePool whose expireAfter is null, without a template", `
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: p}
spec: {disruption: {expireAfter: }}
`, `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec: {disruption: {}, template: {spec: {expireAfter: }}}
`},
		{"NodeClaim with an empty nodeClassRef kind and apiVersion", `
apiVersion: karpenter.sh/v1beta1
kind: NodeClaim
metadata: {name: n}
spec:
  nodeClassRef: {apiVersion: "", kind: "", name: c}
`, `
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: n
  annotations:
    compatibility.karpenter.sh/v1beta1-nodeclass-reference: '{"apiVersion":"","kind":"","name":"c"}'
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}
`},
		{"EC2NodeClass alias version from the compatibility annotation", `
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: c, annotations: {compatibility.karpenter.k8s.aws/v1-alias-version: v20250501}}
spec: {amiFamily: AL2023}
`, `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c, annotations: {compatibility.karpenter.k8s.aws/v1-alias-version: v20250501}}
spec: {amiSelectorTerms: [{alias: al2023@v20250501}]}
`},
		{"EC2NodeClass Ubuntu without terms", `
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiFamily: Ubuntu}
`, `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c, annotations: {compatibility.karpenter.k8s.aws/v1beta1-ubuntu: "amiFamily,blockDeviceMappings,incompatible"}}
spec:
  amiFamily: AL2
  amiSelectorTerms: [{id: ami-placeholder}]
  blockDeviceMappings: [{deviceName: /dev/sda1, rootVolume: true, ebs: {encrypted: true, volumeType: gp3, volumeSize: 20Gi}}]
`},
		{"EC2NodeClass without a family", `
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiSelectorTerms: [{id: ami-1}]}
`, `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiFamily: Custom, amiSelectorTerms: [{id: ami-1}]}
`},
		{"EC2NodeClass with terms", `
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiFamily: AL2, amiSelectorTerms: [{id: ami-1}]}
`, `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: c}
spec: {amiFamily: AL2, amiSelectorTerms: [{id: ami-1}]}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in, want map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(tc.in), &in))
			require.NoError(t, yaml.Unmarshal([]byte(tc.want), &want))
			require.NoError(t, ConvertV1beta1(in))
			got, err := json.Marshal(in)
			require.NoError(t, err)
			exp, err := json.Marshal(want)
			require.NoError(t, err)
			require.JSONEq(t, string(exp), string(got))
		})
	}
}

func TestConvertV1beta1Refuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want error
	}{
		{"nil", nil, ErrInvalidArgument},
		{"v1", map[string]any{"apiVersion": "karpenter.sh/v1", "kind": "NodePool"}, ErrInvalidArgument},
		{"other kind", map[string]any{"apiVersion": "karpenter.sh/v1beta1", "kind": "Machine"}, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ConvertV1beta1(tc.obj)
			require.True(t, errors.Is(err, tc.want), "%v", err)
		})
	}
}

func TestReadInstances(t *testing.T) {
	list, err := ReadInstances(strings.NewReader(`{"Reservations":[{"Instances":[
		{"InstanceId":"i-1","SubnetId":"subnet-1","ImageId":"ami-1","CapacityReservationId":"cr-1","SecurityGroups":[{"GroupId":"sg-1"},{"GroupId":"sg-2"}]}]}]}`))
	require.NoError(t, err)
	require.Equal(t, []Instance{{ID: "i-1", SubnetID: "subnet-1", ImageID: "ami-1", CapacityReservationID: "cr-1", SecurityGroupIDs: []string{"sg-1", "sg-2"}}}, list)

	// Terminated instances are not found, as Karpenter does not look them up.
	lookup := Instances([]Instance{{ID: "i-1", State: "terminated"}, {ID: "i-2", State: "stopped"}})
	_, ok, err := lookup(t.Context(), "i-1")
	require.NoError(t, err)
	require.False(t, ok)
	_, ok, _ = lookup(t.Context(), "i-2")
	require.True(t, ok)

	for _, in := range []string{`{`, `{"Reservations":[{"Instances":[{"SubnetId":"s"}]}]}`} {
		_, err := ReadInstances(strings.NewReader(in))
		require.ErrorIs(t, err, ErrInvalidDump)
	}
	_, err = ReadInstances(nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// FuzzReadDump: any input reads, or fails with ErrInvalidDump; never a
// panic; Explain on what was read does not fail.
func FuzzReadDump(f *testing.F) {
	f.Add("apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\nspec: {disruption: {expireAfter: 1h}}\n")
	f.Add("apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec: {amiFamily: AL2023}\n")
	f.Add("kind: List\nitems: [{apiVersion: karpenter.sh/v1, kind: NodeClaim, metadata: {name: n, labels: {karpenter.sh/nodepool: p}}}]\n")
	f.Add(`{"apiVersion":"karpenter.sh/v1beta1","kind":"NodeClaim","metadata":{"name":"n"},"spec":{"kubelet":{},"nodeClassRef":{}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadDump(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrInvalidDump) {
				t.Fatalf("error %v does not wrap ErrInvalidDump", err)
			}
			return
		}
		if _, err := Explain(t.Context(), s); err != nil {
			t.Fatalf("Explain: %v", err)
		}
	})
}

// TestReadDumpStoresConversionsAsTheWebhookDid: a v1beta1 NodePool with
// empty template maps and lists reads as Karpenter's conversion webhook
// had it stored: converted in memory (the maps still empty), then encoded
// through the v1 types, whose omitempty drops them. Its hash is
// Karpenter's np.Hash() of that stored object, and WhenUnderutilized
// consolidates after 0s, as v1.0.8's Disruption.convertFrom sets it.
func TestReadDumpStoresConversionsAsTheWebhookDid(t *testing.T) {
	const dump = `
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: p}
spec:
  disruption: {consolidationPolicy: WhenUnderutilized}
  template:
    metadata: {labels: {}, annotations: {}}
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}
      taints: []
      startupTaints: []
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
`
	snap, err := ReadDump(strings.NewReader(dump))
	require.NoError(t, err)
	require.Len(t, snap.NodePools, 1)
	got := snap.NodePools[0]

	// The webhook's object in memory: v1.0.8's convertFrom copies the
	// template's metadata and taints as they were decoded.
	inMemory := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	inMemory.Spec.Template.Labels = map[string]string{}
	inMemory.Spec.Template.Annotations = map[string]string{}
	inMemory.Spec.Template.Spec.Taints = []corev1.Taint{}
	inMemory.Spec.Template.Spec.StartupTaints = []corev1.Taint{}
	inMemory.Spec.Template.Spec.Requirements = got.Spec.Template.Spec.Requirements
	inMemory.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: GroupAWS, Kind: "EC2NodeClass", Name: "c"}
	b, err := json.Marshal(&inMemory)
	require.NoError(t, err)
	var stored karpv1.NodePool
	require.NoError(t, json.Unmarshal(b, &stored))

	require.Equal(t, stored.Hash(), NodePoolHash(&got), "Karpenter's hash of what the webhook stored")
	require.NotEqual(t, inMemory.Hash(), NodePoolHash(&got), "the empty maps hash differently: the test tells the two apart")
	require.Nil(t, got.Spec.Template.Labels)
	require.NotNil(t, got.Spec.Disruption.ConsolidateAfter.Duration)
	require.Zero(t, *got.Spec.Disruption.ConsolidateAfter.Duration)
	require.Equal(t, karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, got.Spec.Disruption.ConsolidationPolicy)
}
