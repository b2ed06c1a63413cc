package karpenter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// API groups of the objects a Snapshot holds.
const (
	// GroupKarpenter is the group of NodePools and NodeClaims.
	GroupKarpenter = "karpenter.sh"
	// GroupAWS is the group of EC2NodeClasses.
	GroupAWS = "karpenter.k8s.aws"
)

// Snapshot is what Explain reads: a Karpenter cluster's NodePools,
// NodeClaims, Nodes and EC2NodeClasses, all in their v1 form, read from a
// cluster (Read) or from a dump (ReadDump).
type Snapshot struct {
	// NodePools are the cluster's NodePools.
	NodePools []karpv1.NodePool
	// NodeClaims are the cluster's NodeClaims.
	NodeClaims []karpv1.NodeClaim
	// Nodes are the cluster's Nodes (those Karpenter launched, and others).
	Nodes []corev1.Node
	// EC2NodeClasses are the cluster's EC2NodeClasses.
	EC2NodeClasses []awsv1.EC2NodeClass
	// Converted names the objects read in their v1beta1 form and converted
	// to v1 (ReadDump), as "Kind/name".
	Converted []string
}

// NodePool returns the NodePool called name, or nil.
func (s *Snapshot) NodePool(name string) *karpv1.NodePool {
	if s == nil {
		return nil
	}
	return byName(s.NodePools, name)
}

// EC2NodeClass returns the EC2NodeClass called name, or nil.
func (s *Snapshot) EC2NodeClass(name string) *awsv1.EC2NodeClass {
	if s == nil {
		return nil
	}
	return byName(s.EC2NodeClasses, name)
}

// byName returns a pointer to the item called name, or nil.
func byName[T any, P interface {
	*T
	GetName() string
}](items []T, name string) *T {
	for i := range items {
		if P(&items[i]).GetName() == name {
			return &items[i]
		}
	}
	return nil
}

// Scheme returns a new scheme that knows the types a Snapshot holds
// (NodePools and NodeClaims of karpenter.sh/v1, EC2NodeClasses of
// karpenter.k8s.aws/v1, and core/v1), for a controller-runtime client that
// Read can use. Karpenter's own packages register their types only with
// client-go's global scheme; this one is private to the caller.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	karp := schema.GroupVersion{Group: GroupKarpenter, Version: "v1"}
	s.AddKnownTypes(karp, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, karp)
	aws := schema.GroupVersion{Group: GroupAWS, Version: "v1"}
	s.AddKnownTypes(aws, &awsv1.EC2NodeClass{}, &awsv1.EC2NodeClassList{})
	metav1.AddToGroupVersion(s, aws)
	return s, nil
}

// Read lists the NodePools, NodeClaims, Nodes and EC2NodeClasses of a
// cluster through c, a client whose scheme knows them (see Scheme). A
// cluster without the EC2NodeClass kind (another provider) reads as none.
// Errors wrap ErrRead and name the kind that could not be listed.
func Read(ctx context.Context, c client.Reader) (*Snapshot, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidArgument)
	}
	var (
		pools   karpv1.NodePoolList
		claims  karpv1.NodeClaimList
		nodes   corev1.NodeList
		classes awsv1.EC2NodeClassList
	)
	for _, l := range []struct {
		kind     string
		list     client.ObjectList
		optional bool
	}{
		{"NodePool", &pools, false},
		{"NodeClaim", &claims, false},
		{"Node", &nodes, false},
		{"EC2NodeClass", &classes, true},
	} {
		if err := c.List(ctx, l.list); err != nil {
			if l.optional && isNoMatch(err) {
				continue
			}
			return nil, fmt.Errorf("%w: listing %ss: %w", ErrRead, l.kind, err)
		}
	}
	s := &Snapshot{NodePools: pools.Items, NodeClaims: claims.Items, Nodes: nodes.Items, EC2NodeClasses: classes.Items}
	s.sort()
	return s, nil
}

// isNoMatch reports whether err says the API server does not serve a kind.
func isNoMatch(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsNotFound(err)
}

// ReadDump reads a Snapshot from YAML or JSON: several documents separated
// by "---", kind: List documents (as `kubectl get -o yaml` prints), or
// both. Objects of other kinds are ignored. NodePools, NodeClaims and
// EC2NodeClasses in their v1beta1 form are converted to v1 the way
// Karpenter's v1 conversion did (see ConvertV1beta1) and named in
// Snapshot.Converted. Errors wrap ErrInvalidDump and name the document and
// object.
func ReadDump(r io.Reader) (*Snapshot, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidArgument)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	s := &Snapshot{}
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %s", ErrInvalidDump, doc, errtext.Clip(err.Error()))
		}
		if m == nil {
			continue
		}
		items := []any{m}
		if kind, _ := m["kind"].(string); strings.HasSuffix(kind, "List") {
			list, ok := m["items"].([]any)
			if !ok && m["items"] != nil {
				return nil, fmt.Errorf("%w: document %d: items is not a list", ErrInvalidDump, doc)
			}
			items = list
		}
		for i, it := range items {
			obj, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: document %d, item %d: not an object", ErrInvalidDump, doc, i)
			}
			if err := s.add(obj); err != nil {
				return nil, fmt.Errorf("%w: document %d, item %d: %w", ErrInvalidDump, doc, i, err)
			}
		}
	}
	s.sort()
	return s, nil
}

// add decodes one object of a dump into the snapshot.
func (s *Snapshot) add(obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	if version == "" {
		group, version = "", group
	}
	name := ""
	if md, ok := obj["metadata"].(map[string]any); ok {
		name, _ = md["name"].(string)
	}
	where := kind + "/" + name
	if apiVersion == "" || kind == "" {
		// kubectl get -o yaml writes both; without them nothing says what
		// the object is, and skipping it would report "0 of 0 drifted".
		return fmt.Errorf("object %s has no apiVersion or kind: not a Kubernetes object as kubectl get -o yaml writes it", errtext.Quote(name))
	}
	known := (group == GroupKarpenter && (kind == "NodePool" || kind == "NodeClaim")) ||
		(group == GroupAWS && kind == "EC2NodeClass") || (group == "" && kind == "Node")
	if !known {
		return nil
	}
	if name == "" {
		return fmt.Errorf("%s without metadata.name", kind)
	}
	switch version {
	case "v1":
	case "v1beta1":
		if group == "" {
			return fmt.Errorf("%s: unsupported apiVersion %s", errtext.Quote(where), errtext.Quote(apiVersion))
		}
		if err := ConvertV1beta1(obj); err != nil {
			return fmt.Errorf("%s: %w", errtext.Quote(where), err)
		}
		s.Converted = append(s.Converted, where)
	default:
		return fmt.Errorf("%s: unsupported apiVersion %s", errtext.Quote(where), errtext.Quote(apiVersion))
	}
	var target any
	switch kind {
	case "NodePool":
		s.NodePools = append(s.NodePools, karpv1.NodePool{})
		target = &s.NodePools[len(s.NodePools)-1]
	case "NodeClaim":
		s.NodeClaims = append(s.NodeClaims, karpv1.NodeClaim{})
		target = &s.NodeClaims[len(s.NodeClaims)-1]
	case "EC2NodeClass":
		s.EC2NodeClasses = append(s.EC2NodeClasses, awsv1.EC2NodeClass{})
		target = &s.EC2NodeClasses[len(s.EC2NodeClasses)-1]
	case "Node":
		s.Nodes = append(s.Nodes, corev1.Node{})
		target = &s.Nodes[len(s.Nodes)-1]
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("%s: %s", errtext.Quote(where), errtext.Clip(err.Error()))
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(target); err != nil {
		return fmt.Errorf("%s: %s", errtext.Quote(where), errtext.Clip(err.Error()))
	}
	if version == "v1beta1" {
		// Stored as the conversion webhook's typed v1 output: its JSON
		// encoding drops empty maps and lists (omitempty), which hash
		// differently from absent ones.
		if err := roundTrip(target); err != nil {
			return fmt.Errorf("%s: %s", errtext.Quote(where), errtext.Clip(err.Error()))
		}
	}
	return nil
}

// roundTrip encodes *target as JSON and decodes it back into a zero value.
func roundTrip(target any) error {
	b, err := json.Marshal(target)
	if err != nil {
		return err
	}
	switch t := target.(type) {
	case *karpv1.NodePool:
		*t = karpv1.NodePool{}
	case *karpv1.NodeClaim:
		*t = karpv1.NodeClaim{}
	case *awsv1.EC2NodeClass:
		*t = awsv1.EC2NodeClass{}
	}
	return json.Unmarshal(b, target)
}

// sort orders every list by name, so reports are stable.
func (s *Snapshot) sort() {
	slices.SortStableFunc(s.NodePools, func(a, b karpv1.NodePool) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(s.NodeClaims, func(a, b karpv1.NodeClaim) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(s.Nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(s.EC2NodeClasses, func(a, b awsv1.EC2NodeClass) int { return strings.Compare(a.Name, b.Name) })
}
