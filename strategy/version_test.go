package strategy_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/strategy"
)

func TestParseKubernetesVersion(t *testing.T) {
	for _, tc := range []struct {
		in, str, kubeadm, minor string
	}{
		{"v1.31.4", "v1.31.4", "v1.31.4", "1.31"},
		{"1.31.4", "v1.31.4", "v1.31.4", "1.31"},
		{"v1.31", "v1.31", "", "1.31"},
		{"1.9", "v1.9", "", "1.9"},
		{"v1.31.4-eks-1-31-5", "v1.31.4-eks-1-31-5", "v1.31.4-eks-1-31-5", "1.31"},
		{"1.32.0-rc.1", "v1.32.0-rc.1", "v1.32.0-rc.1", "1.32"},
	} {
		v, err := strategy.ParseKubernetesVersion(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.str, v.String(), tc.in)
		require.Equal(t, tc.minor, v.Minor(), tc.in)
		k, err := v.Kubeadm()
		if tc.kubeadm == "" {
			require.ErrorIs(t, err, strategy.ErrInvalidVersion, tc.in)
			require.False(t, v.HasPatch())
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.kubeadm, k)
	}
	for _, bad := range []string{"", "v", "2.1.0", "1", "1.31.4.5", " v1.31.4", "v1.31.4+abc", "v1.031.4", "v1.31.x", "v1.31-rc.1", "v1.31.4-", "vv1.31.4", "1.-1.0"} {
		_, err := strategy.ParseKubernetesVersion(bad)
		require.ErrorIs(t, err, strategy.ErrInvalidVersion, "%q", bad)
	}
}

func TestKubernetesVersionCompare(t *testing.T) {
	order := []string{"v1.30", "v1.30.0-rc.1", "v1.30.0", "v1.30.9", "v1.31", "v1.31.0", "v1.31.10"}
	for i := range order {
		for j := range order {
			a, err := strategy.ParseKubernetesVersion(order[i])
			require.NoError(t, err)
			b, err := strategy.ParseKubernetesVersion(order[j])
			require.NoError(t, err)
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			require.Equal(t, want, a.Compare(b), "%s vs %s", order[i], order[j])
		}
	}
}

// One version, the spelling each package needs.
func ExampleParseKubernetesVersion() {
	v, err := strategy.ParseKubernetesVersion("1.31.4")
	if err != nil {
		fmt.Println(err)
		return
	}
	k, _ := v.Kubeadm()
	fmt.Println(v, k, v.Minor())
	_, err = strategy.ParseKubernetesVersion("v1.31.4+abc")
	fmt.Println(err)
	// Output:
	// v1.31.4 v1.31.4 1.31
	// invalid Kubernetes version: "v1.31.4+abc": no spaces or build metadata
}

// FuzzParseKubernetesVersion: whatever parses prints in a form that parses
// to the same version, and nothing panics.
func FuzzParseKubernetesVersion(f *testing.F) {
	for _, s := range []string{"v1.31.4", "1.31", "v1.31.4-eks-1-31-5", "v1.31.4+x", "", "1.-1.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := strategy.ParseKubernetesVersion(s)
		if err != nil {
			return
		}
		again, err := strategy.ParseKubernetesVersion(v.String())
		if err != nil || again.Compare(v) != 0 || again.String() != v.String() {
			t.Fatalf("%q -> %q -> %q (%v)", s, v, again, err)
		}
	})
}
