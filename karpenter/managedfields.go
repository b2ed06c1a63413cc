package karpenter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// hashedTemplateFields are the template spec fields Karpenter's NodePool
// hash includes (requirements and resources are hash:"ignore").
var hashedTemplateFields = []string{"taints", "startupTaints", "nodeClassRef", "expireAfter", "terminationGracePeriod"}

// writtenSince lists the hashed template fields that a field manager
// wrote after since, from the NodePool's managedFields: which fields may
// have changed since a NodeClaim was made, when no earlier template is
// known (managed fields record who wrote a field and when, not its old
// value). Each entry reads `path (by manager at time)`; a field written
// several times shows its latest write.
func writtenSince(np *karpv1.NodePool, since time.Time) []string {
	type write struct {
		manager string
		at      time.Time
	}
	latest := map[string]write{}
	for _, mf := range np.ManagedFields {
		if mf.Time == nil || !mf.Time.After(since) || mf.FieldsV1 == nil || mf.Subresource != "" {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		spec, _ := fields["f:spec"].(map[string]any)
		tmpl, _ := spec["f:template"].(map[string]any)
		var paths []string
		if md, ok := tmpl["f:metadata"].(map[string]any); ok {
			for _, m := range []string{"labels", "annotations"} {
				entries, ok := md["f:"+m].(map[string]any)
				if !ok {
					continue
				}
				keyed := false
				for k := range entries {
					if key, ok := strings.CutPrefix(k, "f:"); ok {
						paths = append(paths, fmt.Sprintf("metadata.%s[%q]", m, key))
						keyed = true
					}
				}
				if !keyed { // an atomic map (Karpenter's CRD): owned whole
					paths = append(paths, "metadata."+m)
				}
			}
		}
		if ts, ok := tmpl["f:spec"].(map[string]any); ok {
			for _, f := range hashedTemplateFields {
				if _, ok := ts["f:"+f]; ok {
					paths = append(paths, "spec."+f)
				}
			}
		}
		for _, p := range paths {
			if w, ok := latest[p]; !ok || mf.Time.After(w.at) {
				latest[p] = write{manager: mf.Manager, at: mf.Time.UTC()}
			}
		}
	}
	out := make([]string, 0, len(latest))
	for p, w := range latest {
		out = append(out, fmt.Sprintf("%s (by %s at %s)", p, orUnknown(w.manager), w.at.Format(time.RFC3339)))
	}
	slices.Sort(out)
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed manager"
	}
	return s
}
