package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func testFlags() (*pflag.FlagSet, *struct {
	cluster, ns, out string
	version          bool
}) {
	v := &struct {
		cluster, ns, out string
		version          bool
	}{}
	fs := NewFlagSet("t")
	fs.StringVar(&v.cluster, "cluster", "", "")
	fs.StringVarP(&v.ns, "namespace", "n", "default", "")
	fs.BoolVar(&v.version, "version", false, "")
	OutputFlag(fs, &v.out, Table, JSON, YAML)
	return fs, v
}

func TestParseReadsKubectlAndOneDashCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		cluster, ns, out string
		version          bool
		rest             []string
	}{
		{[]string{"--cluster=demo", "-ojson"}, "demo", "default", "json", false, nil},
		{[]string{"a", "--output", "yaml", "-n", "ns", "b"}, "", "ns", "yaml", false, []string{"a", "b"}},
		{[]string{"-cluster", "demo", "-version"}, "demo", "default", "table", true, nil},
		{[]string{"-cluster=demo", "-o=json", "-nkube-system"}, "demo", "kube-system", "json", false, nil},
		// A value that looks like a flag is a value.
		{[]string{"-cluster", "-version"}, "-version", "default", "table", false, nil},
		{[]string{"--", "-cluster"}, "", "default", "table", false, []string{"-cluster"}},
	} {
		fs, v := testFlags()
		require.NoError(t, Parse(fs, tc.args), "%q", tc.args)
		require.Equal(t, []any{tc.cluster, tc.ns, tc.out, tc.version}, []any{v.cluster, v.ns, v.out, v.version}, "%q", tc.args)
		require.Empty(t, cmp.Diff(tc.rest, fs.Args(), cmp.Comparer(func(a, b []string) bool { return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b)) })))
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, "unknown flag: --bogus"},
		// As in kubectl: -n takes the rest of the word as its value.
		{[]string{"-nfoo", "x", "-bogus"}, "unknown flag: --bogus"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"--cluster"}, "flag needs an argument: --cluster"},
	} {
		fs, _ := testFlags()
		err := Parse(fs, tc.args)
		var ue *UsageError
		require.ErrorAs(t, err, &ue, "%q", tc.args)
		require.Equal(t, tc.want, err.Error())
	}
	for _, help := range []string{"-h", "--help", "-help"} {
		fs, _ := testFlags()
		require.ErrorIs(t, Parse(fs, []string{help}), ErrHelp)
	}
}

func TestPrintUsageErrorIsOneLineAndTheHint(t *testing.T) {
	var b bytes.Buffer
	PrintUsageError(&b, "kubectl upgradekit preview", Usagef("--cluster is required"))
	require.Equal(t, "kubectl upgradekit preview: --cluster is required\nSee 'kubectl upgradekit preview --help' for usage.\n", b.String())
}

func TestObjectIsKubernetesShaped(t *testing.T) {
	type inner struct {
		Took time.Duration `json:"took"`
	}
	type result struct {
		Name    string            `json:"name"`
		Items   []inner           `json:"items"`
		Notes   []string          `json:"notes,omitempty"`
		Labels  map[string]string `json:"labels"`
		Ptr     *inner            `json:"ptr"`
		At      time.Time         `json:"at"`
		private int
	}
	obj, err := Object("Thing", result{Name: "x", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), private: 1})
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(map[string]any{
		"apiVersion": APIVersion, "kind": "Thing", "name": "x",
		"items": []any{}, "labels": map[string]any{}, "at": "2026-01-02T03:04:05Z",
	}, obj))

	obj, err = Object("Thing", []inner{{Took: 8 * time.Minute}})
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(map[string]any{
		"apiVersion": APIVersion, "kind": "ThingList",
		"items": []any{map[string]any{"apiVersion": APIVersion, "kind": "Thing", "took": "8m0s"}},
	}, obj))

	var b bytes.Buffer
	require.NoError(t, Write(&b, YAML, obj))
	require.Equal(t, "apiVersion: "+APIVersion+"\nitems:\n- apiVersion: "+APIVersion+"\n  kind: Thing\n  took: 8m0s\nkind: ThingList\n", b.String())
	require.Error(t, Write(&b, "xml", obj))
	var ue *UsageError
	require.ErrorAs(t, CheckOutput("xml", JSON, YAML), &ue)
	require.EqualError(t, ue, `--output "xml": want json, yaml`)
	require.NoError(t, CheckOutput("yaml", JSON, YAML))
}

func TestProgressIsSilentOffATerminal(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "t")
	p.Printf("%d of %d", 1, 2)
	p.Done()
	require.Empty(t, b.String())
}
