package drift_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgradekit/upgradekit/drift"
)

// isHashError reports whether err is one of the errors bad input may
// cause. ErrInternal (a bug in drift) never is.
func isHashError(err error) bool {
	if errors.Is(err, drift.ErrInternal) {
		return false
	}
	return errors.Is(err, drift.ErrUnsupportedType) || errors.Is(err, drift.ErrUnsupportedValue) ||
		errors.Is(err, drift.ErrCycle) || errors.Is(err, drift.ErrTooDeep)
}

// FuzzHashJSON: for any two JSON documents, hashing never panics, and the
// hashes are equal exactly when the documents are equal (go-cmp) after the
// same zero-value normalisation.
func FuzzHashJSON(f *testing.F) {
	seeds := [][2]string{
		{`{}`, `null`},
		{`{"a":1,"b":{"c":[1,2,{"d":null}]}}`, `{"b":{"c":[1.0,2,{}]},"a":1}`},
		{`{"labels":{"x":""}}`, `{"labels":{}}`},
		{`[1,"1"]`, `["1",1]`},
		{`{"a":[]}`, `{"a":null,"b":false,"c":0,"d":""}`},
		{`{"a":"b"}`, `{"a":"c"}`},
		{`1e20`, `100000000000000000000`},
		{`-0`, `0`},
		{`{"x":[null]}`, `{"x":[""]}`},
		{`{"x":[[]]}`, `{"x":[{}]}`},
		{`{"a":{"b":1}}`, `{"a.b":1}`},
		{`["a","b"]`, `["ab"]`},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	for _, v := range []any{nodePoolTemplate(), capiMachine(), kubeadmConfig()} {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	h, err := drift.NewHasher("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var va, vb any
		if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
			return
		}
		ha, errA := h.Hash(va)
		hb, errB := h.Hash(vb)
		if errA != nil || errB != nil {
			for _, err := range []error{errA, errB} {
				if err != nil && !isHashError(err) {
					t.Fatalf("internal or untyped error: %v", err)
				}
			}
			return
		}
		equal := cmp.Equal(normalize(va), normalize(vb))
		if equal != (ha == hb) {
			t.Fatalf("cmp.Equal=%v but hashes %s vs %s for\n%s\n%s", equal, ha, hb, a, b)
		}
		// Hashing is deterministic.
		if again, _ := h.Hash(va); again != ha {
			t.Fatalf("hash of %s not stable", a)
		}
	})
}

// FuzzHashTyped: a typed NodePool template, its unstructured form and its
// JSON form always hash equal, and equal templates (go-cmp) hash equal.
func FuzzHashTyped(f *testing.F) {
	f.Add("payments", "dedicated", "payments", "NoSchedule", "default", int64(720), int64(48), true, "")
	f.Add("", "", "", "", "", int64(0), int64(0), false, "x")
	f.Add("a\x00b", "k", "\xff", "NoExecute", "n", int64(-1), int64(1<<40), true, "y")
	hp, err := drift.NewHasher("fuzz", drift.IgnoreHashTags(), drift.IgnorePaths("spec.requirements"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, team, taintKey, taintValue, effect, class string, expireH, graceH int64, withStartup bool, extraLabel string) {
		tmpl := &NodeClaimTemplate{
			ObjectMeta: ObjectMeta{Labels: map[string]string{"team": team}},
			Spec: NodeClaimTemplateSpec{
				Taints:       []corev1.Taint{{Key: taintKey, Value: taintValue, Effect: corev1.TaintEffect(effect)}},
				NodeClassRef: &NodeClassReference{Name: class},
				ExpireAfter:  &metav1.Duration{Duration: time.Duration(expireH) * time.Hour},
			},
		}
		if graceH != 0 {
			tmpl.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Duration(graceH)}
		}
		if withStartup {
			tmpl.Spec.StartupTaints = []corev1.Taint{{Key: taintKey}}
		}
		if extraLabel != "" {
			tmpl.ObjectMeta.Labels[extraLabel] = team
		}
		want, err := hp.Hash(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
		if err != nil {
			return // invalid UTF-8 and friends: nothing to compare
		}
		if got, err := hp.Hash(u); err != nil || got != want {
			t.Fatalf("unstructured hash %v (%v) != typed %v", got, err, want)
		}
		b, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		var j any
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		// encoding/json replaces invalid UTF-8, so compare only when the
		// round trip kept the strings.
		var back NodeClaimTemplate
		if err := json.Unmarshal(b, &back); err == nil && cmp.Equal(&back, tmpl, cmp.Comparer(func(a, b metav1.Duration) bool { return a == b })) {
			if got, err := hp.Hash(j); err != nil || got != want {
				t.Fatalf("JSON hash %v (%v) != typed %v", got, err, want)
			}
		}
	})
}

// FuzzCheckAnnotations: arbitrary stamped annotations never panic and are
// never Drifted unless they are a well-formed hash of the desired version.
func FuzzCheckAnnotations(f *testing.F) {
	h, err := drift.NewHasher("v1")
	if err != nil {
		f.Fatal(err)
	}
	s, err := drift.NewStamper(prefix, h)
	if err != nil {
		f.Fatal(err)
	}
	desired := nodePoolTemplate()
	st, err := s.Compute(desired)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(st.Hash.String(), st.Hash.Version, st.Fields.String(), true)
	f.Add("0000000000000001", st.Hash.Version, st.Fields.String(), true)
	f.Add("garbage", "v9", "!!", true)
	f.Add("", "", "", false)
	f.Add("ffffffffffffffff", "v1+uk1", "AQ", true)
	check, err := drift.NewStaticHash(s, desired)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, hash, version, fields string, withFields bool) {
		ann := map[string]string{prefix + "/hash": hash, prefix + "/hash-version": version}
		if withFields {
			ann[prefix+"/hash-fields"] = fields
		}
		obj := &metav1.ObjectMeta{Annotations: ann}
		res := s.Compare(obj, st.Hash)
		parsed, perr := drift.ParseHash(version, hash)
		if res.State == drift.StateDrifted && (perr != nil || version != st.Hash.Version || parsed.Value == st.Hash.Value) {
			t.Fatalf("garbage reported as drifted: %q %q", hash, version)
		}
		if perr == nil && version == st.Hash.Version && parsed.Value != st.Hash.Value && res.State != drift.StateDrifted {
			t.Fatalf("real drift missed: %q", hash)
		}
		r, err := check.Check(context.Background(), obj)
		if err != nil {
			t.Fatal(err)
		}
		if (r != nil) != (res.State == drift.StateDrifted) {
			t.Fatalf("static check and Check disagree")
		}
		if _, err := s.Explain(context.Background(), obj, desired); err != nil {
			t.Fatal(err)
		}
		if fp, err := drift.ParseFingerprints(fields); err == nil {
			if back, err := drift.ParseFingerprints(fp.String()); err != nil || back.String() != fp.String() {
				t.Fatalf("fingerprints do not round-trip: %q", fields)
			}
		}
	})
}

// FuzzRequirements: arbitrary requirements and labels never panic; invalid
// requirements are typed errors.
func FuzzRequirements(f *testing.F) {
	f.Add("karpenter.k8s.aws/instance-generation", "Gt", "5", "", "6", true)
	f.Add("team", "In", "a", "b", "c", true)
	f.Add("team", "NotIn", "a", "", "a", false)
	f.Add("x", "Lt", "-9223372036854775808", "", "1", true)
	f.Add("x", "Gt", "9223372036854775807", "", "1", true)
	f.Add("x", "Exists", "", "", "", true)
	f.Add("x", "Bogus", "", "", "", true)
	f.Fuzz(func(t *testing.T, key, op, v1, v2, label string, hasLabel bool) {
		var values []string
		for _, v := range []string{v1, v2} {
			if v != "" {
				values = append(values, v)
			}
		}
		c, err := drift.NewRequirements([]corev1.NodeSelectorRequirement{
			{Key: key, Operator: corev1.NodeSelectorOperator(op), Values: values},
			{Key: key, Operator: corev1.NodeSelectorOpExists},
		})
		if err != nil {
			if !errors.Is(err, drift.ErrInvalidRequirement) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		labels := map[string]string{}
		if hasLabel {
			labels[key] = label
		}
		r, err := c.Check(context.Background(), &metav1.ObjectMeta{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if r != nil && (r.Name != drift.ReasonNameRequirementsDrifted || len(r.Evidence) != 1 || r.Evidence[0].Key != key) {
			t.Fatalf("reason does not name the key: %+v", r)
		}
	})
}
