package kubeadm

import "testing"

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
