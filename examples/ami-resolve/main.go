// Command ami-resolve shows which machine image (AMI) each requirement set
// gets from Karpenter amiSelectorTerms, and why the other matching images
// lost, using an offline image catalog.
//
//	ami-resolve [flags] TERMS.yaml CATALOG.json
//
// TERMS.yaml is either a bare list of amiSelectorTerms or a whole
// EC2NodeClass (spec.amiSelectorTerms and spec.amiFamily are read).
// CATALOG.json has the shape of `aws ec2 describe-images` output, with an
// optional "Parameters" list for SSM aliases. See README.md, which also
// shows how to resolve against a real AWS account instead.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
)

// Exit codes, as in every example (examples/README.md): 0 resolved (or
// -h), 1 an error, 2 a usage error, 3 the terms are invalid (each problem
// printed on its own line).
const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitInvalidTerms = 3
)

// usageError is a command line that cannot run.
type usageError struct {
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode prints err once and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	var it *invalidTermsError
	switch {
	case err == nil || errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		cli.PrintUsageError(stderr, "ami-resolve", err)
		return exitUsage
	case errors.As(err, &it):
		fmt.Fprintln(stderr, "ami-resolve:", err)
		return exitInvalidTerms
	}
	fmt.Fprintln(stderr, "ami-resolve:", err)
	return exitError
}

type options struct {
	version                bool // --version: print it, resolve nothing
	output                 string
	kubernetesVersion      string
	minAge                 time.Duration
	now                    time.Time
	pin, record, previous  string
	termsFile, catalogFile string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var minAge, now string
	fs := cli.NewFlagSet("ami-resolve")
	fs.Usage = func() {
		cli.WriteHelp(stderr, fs, "usage: ami-resolve [flags] TERMS.yaml CATALOG.json",
			"exit: 0 resolved, 1 error, 2 usage, 3 the terms are invalid")
	}
	fs.StringVar(&o.kubernetesVersion, "kubernetes-version", "", "cluster Kubernetes version, e.g. 1.31 (needed for aliases)")
	fs.StringVar(&minAge, "min-age", "", "do not choose images younger than this (Go duration, or days: 7d)")
	fs.StringVar(&now, "now", "", "resolve as of this RFC 3339 time instead of the current time")
	fs.StringVar(&o.pin, "pin", "", "stored resolution record (JSON): choose only images it chose")
	fs.StringVar(&o.record, "record", "", "write the resolution record (JSON) to this file")
	fs.StringVar(&o.previous, "previous", "", "earlier resolution record (JSON): print what would change")
	cli.OutputFlag(fs, &o.output, cli.Table, cli.JSON, cli.YAML)
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, cli.ErrHelp) {
			return o, err
		}
		return o, usageError{err: err}
	}
	if o.version {
		return o, nil
	}
	if err := cli.CheckOutput(o.output, cli.Table, cli.JSON, cli.YAML); err != nil {
		return o, usageError{err: err}
	}
	if fs.NArg() != 2 {
		return o, usageError{err: fmt.Errorf("want 2 arguments (TERMS.yaml CATALOG.json), got %d", fs.NArg())}
	}
	o.termsFile, o.catalogFile = fs.Arg(0), fs.Arg(1)
	var err error
	if o.minAge, err = parseAge(minAge); err != nil {
		return o, usageError{err: fmt.Errorf("--min-age: %w", err)}
	}
	if o.kubernetesVersion != "" {
		if _, _, err := amiselect.ParseKubernetesVersion(o.kubernetesVersion); err != nil {
			return o, usageError{err: fmt.Errorf("--kubernetes-version: %w", err)}
		}
	}
	o.now = time.Now().UTC()
	if now != "" {
		if o.now, err = time.Parse(time.RFC3339, now); err != nil {
			return o, usageError{err: fmt.Errorf("--now: %w", err)}
		}
	}
	return o, nil
}

// parseAge accepts Go durations and whole days ("7d").
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && n >= 0 && fmt.Sprint(n) == days {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("must not be negative")
	}
	return d, err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Version("ami-resolve"))
		return err
	}
	terms, family, err := readTerms(o.termsFile)
	if err != nil {
		return err
	}
	clock := clocktesting.NewFakePassiveClock(o.now)
	opts := []amiselect.Option{amiselect.WithClock(clock), amiselect.WithMinAge(o.minAge)}
	if family != "" {
		opts = append(opts, amiselect.WithFamily(family))
	}
	if o.kubernetesVersion != "" {
		opts = append(opts, amiselect.WithKubernetesVersion(o.kubernetesVersion))
	}
	if err := amiselect.Validate(terms, opts...); err != nil {
		n := printErrors(stderr, err)
		return &invalidTermsError{file: o.termsFile, count: n, err: err}
	}
	if o.kubernetesVersion == "" && slices.ContainsFunc(terms, func(t amiselect.Term) bool { return t.Alias != "" }) {
		return usageError{err: fmt.Errorf("%s: an alias resolves per Kubernetes version: pass --kubernetes-version", o.termsFile)}
	}
	if o.pin != "" {
		pinned, err := readRecord(o.pin)
		if err != nil {
			return err
		}
		opts = append(opts, amiselect.WithPin(pinned))
	}
	f, err := os.Open(o.catalogFile)
	if err != nil {
		return err
	}
	defer f.Close()
	catalog, err := amiselect.LoadCatalog(f, amiselect.WithClock(clock))
	if err != nil {
		return fmt.Errorf("%s: %w", o.catalogFile, err)
	}

	// Swap the catalog for the amiselect/aws adapter to ask a real account
	// (see README.md). The recorder remembers every image the terms matched,
	// so losers can be explained next to the winners.
	src := &recorder{src: catalog}
	res, err := amiselect.Resolve(ctx, src, terms, opts...)
	if err != nil {
		var none *amiselect.NoImagesError
		if errors.As(err, &none) {
			for _, s := range none.Unmatched {
				fmt.Fprintln(stderr, " ", s)
			}
		}
		return err
	}
	if o.output != cli.Table {
		// The resolution as --record writes it, as an object.
		if err := cli.WriteObject(stdout, o.output, "AMIResolution", res); err != nil {
			return err
		}
	} else {
		printTable(stdout, res, src.images(), o.now)
	}

	if o.previous != "" && o.output == cli.Table {
		prev, err := readRecord(o.previous)
		if err != nil {
			return err
		}
		printChanges(stdout, prev, res)
	}
	if o.record != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.record, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readTerms reads a bare list of amiSelectorTerms or an EC2NodeClass.
// Unknown fields inside a term are refused, so a typo is not silently
// ignored.
func readTerms(path string) ([]amiselect.Term, amiselect.Family, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	rawTerms, family := doc, ""
	if m, ok := doc.(map[string]any); ok {
		spec, _ := m["spec"].(map[string]any)
		if spec == nil || spec["amiSelectorTerms"] == nil {
			return nil, "", fmt.Errorf("%s: neither a list of amiSelectorTerms nor an EC2NodeClass with spec.amiSelectorTerms", path)
		}
		rawTerms = spec["amiSelectorTerms"]
		if f, ok := spec["amiFamily"].(string); ok {
			family = f
		} else if spec["amiFamily"] != nil {
			return nil, "", fmt.Errorf("%s: spec.amiFamily must be a string", path)
		}
	}
	if _, ok := rawTerms.([]any); !ok {
		return nil, "", fmt.Errorf("%s: amiSelectorTerms must be a list, got %T", path, rawTerms)
	}
	js, err := json.Marshal(rawTerms)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var terms []amiselect.Term
	if err := dec.Decode(&terms); err != nil {
		return nil, "", fmt.Errorf("%s: amiSelectorTerms: %w", path, err)
	}
	if family == "" {
		return terms, "", nil
	}
	fam, err := amiselect.ParseFamily(family)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return terms, fam, nil
}

func readRecord(path string) (*amiselect.Resolution, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r amiselect.Resolution
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a resolution record: %w", path, err)
	}
	return &r, nil
}

// invalidTermsError says how many terms were refused; the details were
// printed, one per line. It unwraps to the amiselect errors.
type invalidTermsError struct {
	file  string
	count int
	err   error
}

func (e *invalidTermsError) Error() string {
	return fmt.Sprintf("%s: %d invalid amiSelectorTerms problem(s), listed above", e.file, e.count)
}

func (e *invalidTermsError) Unwrap() error { return e.err }

// printErrors prints each validation error on its own line and returns
// how many there were.
func printErrors(w io.Writer, err error) int {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var ae *amiselect.Error
		if errors.As(e, &ae) {
			fmt.Fprintf(w, "invalid: %s: %s\n", ae.Path, ae.Reason)
			continue
		}
		fmt.Fprintln(w, "invalid:", e)
	}
	return len(errs)
}

// recorder is an ImageSource that remembers the images it returned.
type recorder struct {
	src  amiselect.ImageSource
	mu   sync.Mutex
	seen map[string]amiselect.Image
}

func (r *recorder) DescribeImages(ctx context.Context, q amiselect.Query) ([]amiselect.Image, error) {
	imgs, err := r.src.DescribeImages(ctx, q)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]amiselect.Image{}
	}
	for _, img := range imgs {
		r.seen[img.ID] = img
	}
	return imgs, err
}

func (r *recorder) GetParameter(ctx context.Context, name string) (string, error) {
	return r.src.GetParameter(ctx, name)
}

func (r *recorder) images() map[string]amiselect.Image {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// printTable prints one block per requirement set: the chosen image, then
// every other matched image of that architecture and why it lost.
func printTable(w io.Writer, res *amiselect.Resolution, seen map[string]amiselect.Image, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUIREMENTS\tIMAGE\tCREATED\tVERDICT\tWHY")
	chosen := map[string]bool{}
	for _, s := range res.Images {
		chosen[s.ID] = true
	}
	skipped := map[string]amiselect.Skip{}
	for _, s := range res.Skipped {
		for _, id := range s.Images {
			skipped[id] = s
		}
	}
	placed := map[string]bool{}
	for _, s := range res.Images {
		why := "matched " + termList(s.Terms, res.Terms)
		if s.Deprecated {
			why += "; deprecated, but nothing newer fits"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tchosen\t%s\n", s.Requirements, s.ID, day(s.CreationDate), why)
		for _, img := range losers(seen, chosen, placed, s) {
			placed[img.ID] = true
			fmt.Fprintf(tw, "%s\t%s\t%s\tlost\t%s\n", s.Requirements, img.ID, day(img.CreationDate), whyLost(img, s, skipped, now))
		}
	}
	// Images no chosen set explains (e.g. every image of an architecture
	// was too young).
	var rest []amiselect.Image
	for id, img := range seen {
		if !chosen[id] && !placed[id] {
			rest = append(rest, img)
		}
	}
	sortImages(rest)
	for _, img := range rest {
		why := "no image of this architecture was chosen"
		if s, ok := skipped[img.ID]; ok {
			why = fmt.Sprintf("term %d: %s", s.Term, s.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tlost\t%s\n", kubeArch(img.Architecture), img.ID, day(img.CreationDate), why)
	}
	tw.Flush()
	first := true
	for _, s := range res.Skipped {
		if len(s.Images) == 0 {
			if first {
				fmt.Fprintln(w)
				first = false
			}
			fmt.Fprintln(w, "note:", s)
		}
	}
}

// losers are the matched, unchosen images with the chosen image's
// architecture, newest first.
func losers(seen map[string]amiselect.Image, chosen, placed map[string]bool, s amiselect.Selected) []amiselect.Image {
	var out []amiselect.Image
	for id, img := range seen {
		if !chosen[id] && !placed[id] && kubeArch(img.Architecture) == s.Requirements.Architecture {
			out = append(out, img)
		}
	}
	sortImages(out)
	return out
}

func whyLost(img amiselect.Image, won amiselect.Selected, skipped map[string]amiselect.Skip, now time.Time) string {
	switch {
	case skipped[img.ID].Reason != "":
		s := skipped[img.ID]
		return fmt.Sprintf("term %d: %s", s.Term, s.Reason)
	case img.State != "" && img.State != amiselect.StateAvailable:
		return "state " + img.State
	case img.Deprecated(now):
		return "deprecated since " + day(img.DeprecationTime)
	case img.CreationDate.Before(won.CreationDate):
		return "older than " + won.ID
	default:
		return "same age as " + won.ID + ", loses the tie (name, then id)"
	}
}

func printChanges(w io.Writer, prev, next *amiselect.Resolution) {
	changes := prev.Changes(next)
	if len(changes) == 0 {
		fmt.Fprintln(w, "\nno change from the previous record: nodes would not drift")
		return
	}
	fmt.Fprintln(w, "\nwhat would change from the previous record (nodes on the old image drift):")
	for _, c := range changes {
		fmt.Fprintln(w, " ", c)
	}
}

func termList(idx []int, terms []amiselect.Term) string {
	var parts []string
	for _, i := range idx {
		desc := fmt.Sprintf("term %d", i)
		if i >= 0 && i < len(terms) {
			desc += " (" + describeTerm(terms[i]) + ")"
		}
		parts = append(parts, desc)
	}
	return strings.Join(parts, ", ")
}

func describeTerm(t amiselect.Term) string {
	var f []string
	for _, kv := range [][2]string{{"alias", t.Alias}, {"id", t.ID}, {"name", t.Name}, {"owner", t.Owner}, {"ssmParameter", t.SSMParameter}} {
		if kv[1] != "" {
			f = append(f, kv[0]+"="+kv[1])
		}
	}
	keys := make([]string, 0, len(t.Tags))
	for k := range t.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f = append(f, "tags."+k+"="+t.Tags[k])
	}
	return strings.Join(f, " ")
}

func sortImages(imgs []amiselect.Image) {
	slices.SortFunc(imgs, func(a, b amiselect.Image) int {
		if c := b.CreationDate.Compare(a.CreationDate); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func kubeArch(ec2 string) string {
	switch ec2 {
	case amiselect.EC2ArchX86:
		return amiselect.ArchAMD64
	case amiselect.EC2ArchARM64:
		return amiselect.ArchARM64
	}
	return ec2
}

func day(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.DateOnly)
}
