package kubeadm

import (
	"errors"
	"slices"
	"testing"
)

func FuzzCheckUpgrade(f *testing.F) {
	for _, s := range [][2]string{
		{"v1.31.4", "v1.32.0"}, {"v1.32.0", "v1.31.9"}, {"v1.30.1", "v1.32.0"},
		{"v1.31.2-eks-1-31-5", "v1.32.0-eks-1-32-1"}, {"1.31.0", "2.0.0"}, {"latest", ""}, {" v1.31.2", "v1.31.2+x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, from, to string) {
		if CheckUpgrade(from, to) != nil {
			return
		}
		fv, err1 := parse(from)
		tv, err2 := parse(to)
		if err1 != nil || err2 != nil {
			t.Fatalf("accepted unparsable versions %q -> %q", from, to)
		}
		if "v"+fv.String() != from || "v"+tv.String() != to {
			t.Fatalf("accepted non-canonical versions %q -> %q", from, to)
		}
		if tv.LessThan(fv) || tv.Major() != fv.Major() || tv.Minor() > fv.Minor()+1 {
			t.Fatalf("accepted %q -> %q", from, to)
		}
	})
}

// FuzzKubeadmFlags: parsing never panics; whatever parses writes back to
// a file that parses to the same arguments and lines (parse → write →
// parse), and applying extra arguments (valid ones, as a plan would) gives
// a parsable file that applying them again does not change.
func FuzzKubeadmFlags(f *testing.F) {
	for _, s := range []string{
		kubeadmFile, "", "\n", "# c\n" + kubeadmFile + "X=1", `KUBELET_KUBEADM_ARGS=""`, `KUBELET_KUBEADM_ARGS="--a=\"b\""`,
		"KUBELET_KUBEADM_ARGS=\"--a=b\t--c=d\"\r\n", "# x \\\nKUBELET_KUBEADM_ARGS=\"--a=b\"", `KUBELET_KUBEADM_ARGS='--a=b'`,
	} {
		f.Add(s, "max-pods", "250", "node-labels")
	}
	f.Fuzz(func(t *testing.T, content, name, value, remove string) {
		parsed, err := ParseKubeadmFlags(content)
		if err != nil {
			if !errors.Is(err, ErrUnsupportedFlagsFile) {
				t.Fatalf("error %v does not wrap ErrUnsupportedFlagsFile", err)
			}
			return
		}
		out := parsed.String()
		again, err := ParseKubeadmFlags(out)
		if err != nil {
			t.Fatalf("written file %q does not parse: %v", out, err)
		}
		if !slices.Equal(parsed.Args, again.Args) || again.String() != out {
			t.Fatalf("round trip changed %q into %q", out, again.String())
		}
		var desired []KubeletArg
		if ValidateKubeletArgName(name) == nil && ValidateKubeletArgValue(value) == nil {
			desired = []KubeletArg{{Name: name, Value: value}}
		}
		applied := parsed.WithExtraArgs(desired, []string{remove})
		reparsed, err := ParseKubeadmFlags(applied.String())
		if err != nil {
			t.Fatalf("file with %v does not parse: %v\n%q", desired, err, applied.String())
		}
		if twice := reparsed.WithExtraArgs(desired, []string{remove}).String(); twice != applied.String() {
			t.Fatalf("applying twice changed %q into %q", applied.String(), twice)
		}
		for _, a := range reparsed.Args {
			if a.Name == remove && !slices.Contains(desired, a) {
				t.Fatalf("--%s kept after its removal: %q", remove, applied.String())
			}
		}
		for _, d := range desired {
			if !slices.Contains(reparsed.Args, d) {
				t.Fatalf("%s missing from %q", d, applied.String())
			}
		}
	})
}
