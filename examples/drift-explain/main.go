// Command drift-explain says which objects have drifted and why, field by
// field, in two modes.
//
//	drift-explain [flags] TEMPLATE.yaml OBJECTS.yaml
//	drift-explain --karpenter [flags] DUMP.yaml...
//	drift-explain --karpenter --live [--kubeconfig F] [--context C] [flags]
//
// The first checks objects upgradekit stamped (Nodes, NodeClaims, CAPI
// Machines) against a pool's template: TEMPLATE.yaml is the pool (a
// NodePool, a MachineDeployment, ...), the part at --path (default
// spec.template) the desired spec; OBJECTS.yaml holds the objects, as a
// YAML list, a kind: List or several documents separated by "---"; with
// --proposed it says what would drift if a proposed template were applied.
//
// With --karpenter it explains a Karpenter cluster as Karpenter stamped it:
// every NodeClaim's static drift (Karpenter's own NodePool hash, with the
// fields that changed when the previous template is known), requirements,
// EC2NodeClass hash and AMI drift, and with --instances security group and
// subnet drift, read from dumps (`kubectl get nodepools,nodeclaims,
// ec2nodeclasses,nodes -o yaml`; v1beta1 objects are converted) or from
// the cluster (--live, which says what it is reading on stderr when that
// is a terminal). This mode lives in its own Go module, beside the
// karpenter module, so upgradekit's core module stays free of Karpenter's
// dependencies.
//
// Both modes print a table, or with -o json|yaml one Kubernetes-shaped
// object: a DriftReport, or with --karpenter a KarpenterDriftReport. See
// README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/examples/buildinfo"
	"github.com/upgradekit/upgradekit/examples/cli"
)

// Exit codes, as in every example (examples/README.md): 0 nothing
// drifted (or -h), 1 an error, 2 a usage error, 3 objects drifted (or, with
// --proposed, would drift).
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitDrifted = 3
)

// usageError is a command line that cannot run; printed says the flag
// package has printed it already.
type usageError struct {
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errDrifted is run's answer when objects drifted: a finding, not a failure.
var errDrifted = errors.New("objects drifted")

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode prints err once and maps it to the exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil || errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.Is(err, errDrifted):
		return exitDrifted
	case errors.As(err, &ue):
		cli.PrintUsageError(stderr, "drift-explain", err)
		return exitUsage
	}
	fmt.Fprintln(stderr, "drift-explain:", err)
	return exitError
}

type options struct {
	version                             bool // --version: print it, explain nothing
	prefix, hashVersion, path, proposed string
	stamp                               bool
	output                              string // -o: table, json or yaml, in both modes
	templateFile, objectsFile           string
	karpenter                           bool
	k                                   karpenterOptions
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("drift-explain")
	fs.Usage = func() {
		cli.WriteHelp(stderr, fs, "usage: drift-explain [flags] TEMPLATE.yaml OBJECTS.yaml",
			"       drift-explain --karpenter [flags] DUMP.yaml...",
			"       drift-explain --karpenter --live [--kubeconfig F] [--context C] [flags]",
			"exit: 0 nothing drifted, 1 error, 2 usage, 3 objects drifted (with --proposed: would drift)")
	}
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.prefix, "prefix", "upgradekit.io", "annotation prefix: <prefix>/hash, <prefix>/hash-version, <prefix>/hash-fields")
	fs.StringVar(&o.hashVersion, "hash-version", "v1", "hash version of the desired stamp; objects stamped with another version need a re-stamp")
	fs.StringVar(&o.path, "path", "spec.template", "dot path of the desired spec inside TEMPLATE.yaml")
	fs.BoolVar(&o.stamp, "stamp", false, "write the objects back to stdout as YAML, stamped with TEMPLATE.yaml")
	fs.StringVar(&o.proposed, "proposed", "", "proposed template (a YAML `FILE`): print what would drift if it were applied")
	fs.BoolVar(&o.karpenter, "karpenter", false, "explain a Karpenter cluster's NodeClaims (dumps as arguments, or --live)")
	fs.BoolVar(&o.k.live, "live", false, "with --karpenter: read the cluster instead of dumps")
	fs.StringVar(&o.k.kubeconfig, "kubeconfig", "", "with --live: kubeconfig `FILE` (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config)")
	fs.StringVar(&o.k.context, "context", "", "with --live: kubeconfig context `NAME` to use")
	fs.StringVar(&o.k.previous, "previous", "", "with --karpenter: earlier NodePools (a YAML `FILE`) to name the fields that changed since a NodeClaim was made")
	fs.StringVar(&o.k.caBundle, "cluster-ca-bundle", "", "with --karpenter: the cluster's CA bundle (a PEM `FILE`, as Karpenter's controller has it), which the EC2NodeClass hash includes: drift is judged against the hash Karpenter will write, not the annotation")
	fs.StringVar(&o.k.offerings, "offerings", "", "with --karpenter: the output of aws ec2 describe-instance-type-offerings --location-type availability-zone (a JSON `FILE`), for InstanceTypeNotFound drift")
	fs.StringVar(&o.k.instances, "instances", "", "with --karpenter: the output of aws ec2 describe-instances (a JSON `FILE`), for security group and subnet drift")
	fs.StringVar(&o.k.images, "images", "", "with --karpenter: image catalog (a JSON `FILE`, as ami-resolve reads) to say why a new AMI won")
	fs.StringVar(&o.k.imagesAt, "images-at", "", "with --images: the `TIME` to resolve at (RFC 3339; default now)")
	fs.StringVar(&o.k.kubernetesVersion, "kubernetes-version", "", "with --images: the cluster's Kubernetes `VERSION`, for alias terms (e.g. 1.31)")
	cli.OutputFlag(fs, &o.output, cli.Table, cli.JSON, cli.YAML)
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
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	if o.karpenter {
		o.k.output = o.output
		var generic []string
		for _, n := range []string{"prefix", "hash-version", "path", "stamp", "proposed"} {
			if set[n] {
				generic = append(generic, "--"+n)
			}
		}
		return o, validateKarpenter(&o.k, fs.Args(), generic)
	}
	for _, n := range []string{"live", "kubeconfig", "context", "previous", "cluster-ca-bundle", "offerings", "instances", "images", "images-at", "kubernetes-version"} {
		if set[n] {
			return o, usageError{err: fmt.Errorf("--%s needs --karpenter", n)}
		}
	}
	if fs.NArg() != 2 {
		return o, usageError{err: fmt.Errorf("want 2 arguments (TEMPLATE.yaml OBJECTS.yaml), got %d", fs.NArg())}
	}
	if o.stamp && o.proposed != "" {
		return o, usageError{err: errors.New("--stamp and --proposed cannot be combined")}
	}
	if o.stamp && o.output != cli.Table {
		// --stamp prints the objects themselves, as YAML documents.
		return o, usageError{err: fmt.Errorf("--stamp and --output %s cannot be combined: --stamp prints the stamped objects as YAML", o.output)}
	}
	o.templateFile, o.objectsFile = fs.Arg(0), fs.Arg(1)
	return o, nil
}

// pool is the desired state read from a template file: the hashed spec and
// the node requirements, which (as in Karpenter) are checked against node
// labels rather than hashed.
type pool struct {
	spec         map[string]any
	requirements drift.Check // nil when the template has none
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Version("drift-explain"))
		return err
	}
	if o.karpenter {
		return runKarpenter(ctx, o.k, stdout, stderr, newKarpenterClient)
	}
	hasher, err := drift.NewHasher(o.hashVersion, drift.IgnorePaths("spec.requirements"))
	if err != nil {
		return usageError{err: fmt.Errorf("--hash-version: %w", err)}
	}
	stamper, err := drift.NewStamper(o.prefix, hasher)
	if err != nil {
		return usageError{err: fmt.Errorf("--prefix: %w", err)}
	}
	desired, err := readPool(o.templateFile, o.path)
	if err != nil {
		return err
	}
	objs, err := readObjects(o.objectsFile)
	if err != nil {
		return err
	}
	if err := notKarpenters(objs, o.prefix, o.objectsFile); err != nil {
		return err
	}

	switch {
	case o.stamp:
		return writeStamped(stdout, stamper, desired.spec, objs)
	case o.proposed != "":
		proposed, err := readPool(o.proposed, o.path)
		if err != nil {
			return err
		}
		return whatIf(ctx, stdout, o, stamper, desired, proposed, objs)
	default:
		return explain(ctx, stdout, o, stamper, desired, objs)
	}
}

// explain prints, per object, its stamp state and every drift reason with
// the fields that changed.
func explain(ctx context.Context, w io.Writer, o options, s *drift.Stamper, desired pool, objs []*unstructured.Unstructured) error {
	static, err := drift.NewStaticHash(s, desired.spec)
	if err != nil {
		return err
	}
	checks := []drift.Check{static}
	if desired.requirements != nil {
		checks = append(checks, desired.requirements)
	}
	report, err := drift.DryRun(ctx, drift.NewDetector(checks...), metaObjects(objs))
	if err != nil {
		return err
	}
	out := driftReport{Template: o.templateFile, Objects: make([]objectDrift, len(objs))}
	for i, obj := range objs {
		out.Objects[i] = objectResult(obj, s.Compare(obj, static.Desired().Hash), report.Objects[i], "drifted", "current")
	}
	out.Summary = driftSummary{Total: report.Total, Drifted: report.Drifted, Failed: report.Failed}
	return printReport(w, o.output, "VERDICT", "drifted", out)
}

// whatIf prints, per object, whether it would drift if proposed replaced
// the current template (drift.Stamper.DryRun).
func whatIf(ctx context.Context, w io.Writer, o options, s *drift.Stamper, current, proposed pool, objs []*unstructured.Unstructured) error {
	var extra []drift.Check
	if proposed.requirements != nil {
		extra = append(extra, proposed.requirements)
	}
	report, err := s.DryRun(ctx, proposed.spec, metaObjects(objs), extra...)
	if err != nil {
		return err
	}
	now, err := s.Compute(current.spec)
	if err != nil {
		return err
	}
	out := driftReport{Template: o.templateFile, Proposed: o.proposed, Objects: make([]objectDrift, len(objs))}
	for i, obj := range objs {
		out.Objects[i] = objectResult(obj, s.Compare(obj, now.Hash), report.Objects[i], "would drift", "would not drift")
	}
	out.Summary = driftSummary{Total: report.Total, Drifted: report.Drifted, Failed: report.Failed}
	return printReport(w, o.output, "IF APPLIED", "would drift", out)
}

// driftReport is what the mode without --karpenter prints with -o
// json|yaml, as kind DriftReport: the table's rows per object, and the
// count under them.
type driftReport struct {
	// Template is TEMPLATE.yaml; Proposed the --proposed file, with which
	// drifted means "would drift if Proposed replaced Template".
	Template string `json:"template"`
	Proposed string `json:"proposed,omitempty"`
	// Objects are the objects of OBJECTS.yaml, in its order.
	Objects []objectDrift `json:"objects"`
	Summary driftSummary  `json:"summary"`
}

// driftSummary counts the objects: all, drifted (with --proposed: would
// drift) and those a check failed on.
type driftSummary struct {
	Total   int `json:"total"`
	Drifted int `json:"drifted"`
	Failed  int `json:"failed"`
}

// objectDrift is one object's verdict, as the table prints it.
type objectDrift struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Stamp is the stamp compared with the (current) template: Current,
	// Drifted, NeedsRestamp or Unknown.
	Stamp string `json:"stamp"`
	// Verdict is the table's: drifted, current, needs re-stamp, unknown
	// or error; with --proposed would drift, would not drift, needs
	// re-stamp, unknown or error.
	Verdict string `json:"verdict"`
	// Drifted says whether it has drifted (with --proposed: would drift).
	Drifted bool `json:"drifted"`
	// Reasons are why, each with the changes behind it.
	Reasons []reasonDrift `json:"reasons"`
	// Message says why an object without reasons was not compared, or
	// the error a check failed with.
	Message string `json:"message,omitempty"`
}

// reasonDrift is one drift reason of an object.
type reasonDrift struct {
	Name    string   `json:"name"`
	Message string   `json:"message"`
	Changes []change `json:"changes"`
}

// change is one field or label behind a reason: the table's FIELDS.
type change struct {
	// Kind is Field, Label or Image.
	Kind string `json:"kind"`
	// Key is the field's path (metadata.labels), the label's key or
	// "image".
	Key string `json:"key"`
	// Want and Got are the desired and the object's values, when known
	// (named as drift.Evidence names them, which the Karpenter report
	// prints): field changes are told from fingerprints, which keep no
	// values.
	Want string `json:"want,omitempty"`
	Got  string `json:"got,omitempty"`
	// Detail is how a field changed (Modified, Added, Removed) or why a
	// label fails its requirement.
	Detail string `json:"detail,omitempty"`
}

// objectResult is one object's verdict: its drift reasons, or why it is
// not drifted.
func objectResult(obj *unstructured.Unstructured, check drift.Comparison, rep drift.ObjectReport, drifted, notDrifted string) objectDrift {
	r := objectDrift{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Stamp: check.State.String(), Reasons: []reasonDrift{},
	}
	if rep.Err != nil {
		r.Verdict, r.Message = "error", rep.Err.Error()
		return r
	}
	for _, reason := range rep.Reasons {
		r.Reasons = append(r.Reasons, reasonDrift{Name: string(reason.Name), Message: reason.Message, Changes: changes(reason)})
	}
	if len(rep.Reasons) > 0 {
		r.Verdict, r.Drifted = drifted, true
		return r
	}
	switch check.State {
	case drift.StateNeedsRestamp:
		r.Verdict = "needs re-stamp"
		r.Message = fmt.Sprintf("stamped with %s, desired %s: not compared, not drifted", check.Stamped.Version, check.Desired.Version)
	case drift.StateUnknown:
		why := "not stamped"
		if check.Err != nil && !errors.Is(check.Err, drift.ErrNotStamped) {
			why = check.Err.Error()
		}
		r.Verdict, r.Message = "unknown", why+": not drifted"
	default:
		r.Verdict = notDrifted
	}
	return r
}

// changes is a reason's evidence but the hashes: changed fields and failed
// labels.
func changes(r drift.Reason) []change {
	out := []change{}
	for _, e := range r.Evidence {
		if e.Kind == drift.EvidenceKindHash {
			continue
		}
		out = append(out, change{Kind: string(e.Kind), Key: e.Key, Want: e.Want, Got: e.Got, Detail: e.Detail})
	}
	return out
}

// printReport prints rep as a table, one row per drift reason (or one row
// saying why an object is not drifted) and the count, or as a DriftReport
// with -o json|yaml. It returns errDrifted when objects drifted.
func printReport(w io.Writer, output, verdictHeader, drifted string, rep driftReport) error {
	if output != cli.Table {
		if err := cli.WriteObject(w, output, "DriftReport", rep); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "OBJECT\tSTAMP\t%s\tREASON\tFIELDS\n", verdictHeader)
		for _, o := range rep.Objects {
			obj := o.Name
			if o.Kind != "" {
				obj = o.Kind + "/" + o.Name
			}
			for _, r := range o.Reasons {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", obj, o.Stamp, o.Verdict, r.Name, fields(r.Changes))
			}
			if len(o.Reasons) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\n", obj, o.Stamp, o.Verdict, orDash(o.Message))
			}
		}
		tw.Flush()
		fmt.Fprintf(w, "\n%d of %d objects %s\n", rep.Summary.Drifted, rep.Summary.Total, drifted)
	}
	if rep.Summary.Drifted > 0 {
		return errDrifted
	}
	return nil
}

// fields renders a reason's changes for the table: changed fields and
// failed labels.
func fields(changes []change) string {
	var out []string
	for _, c := range changes {
		switch drift.EvidenceKind(c.Kind) {
		case drift.EvidenceKindLabel:
			out = append(out, fmt.Sprintf("%s=%q (need %s)", c.Key, c.Got, c.Want))
		default:
			f := c.Key
			if c.Detail != "" {
				f += " (" + c.Detail + ")"
			}
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// writeStamped stamps every object with spec and prints them as YAML
// documents.
func writeStamped(w io.Writer, s *drift.Stamper, spec map[string]any, objs []*unstructured.Unstructured) error {
	for i, obj := range objs {
		if _, err := s.Stamp(obj, spec); err != nil {
			return fmt.Errorf("%s: %w", name(obj), err)
		}
		b, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// readPool reads the desired spec at path from a template file, and its
// spec.requirements if it has any.
func readPool(file, path string) (pool, error) {
	docs, err := readDocs(file)
	if err != nil {
		return pool{}, err
	}
	if len(docs) != 1 {
		return pool{}, fmt.Errorf("%s: want one template document, got %d", file, len(docs))
	}
	doc, ok := docs[0].(map[string]any)
	if !ok {
		return pool{}, fmt.Errorf("%s: template is not a YAML object", file)
	}
	spec := doc
	if path != "" {
		for _, key := range strings.Split(path, ".") {
			next, ok := spec[key].(map[string]any)
			if !ok {
				return pool{}, fmt.Errorf("%s: no object at %s (see --path)", file, path)
			}
			spec = next
		}
	}
	p := pool{spec: spec}
	inner, _ := spec["spec"].(map[string]any)
	raw, ok := inner["requirements"]
	if !ok {
		return p, nil
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return pool{}, err
	}
	var reqs []corev1.NodeSelectorRequirement
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&reqs); err != nil {
		return pool{}, fmt.Errorf("%s: %s.spec.requirements: %w", file, path, err)
	}
	check, err := drift.NewRequirements(reqs, drift.WithLabelAliases(drift.KarpenterLabelAliases()))
	if err != nil {
		return pool{}, fmt.Errorf("%s: %s.spec.requirements: %w", file, path, err)
	}
	p.requirements = check
	return p, nil
}

// readObjects reads objects from a YAML list, a kind: List, or several
// documents.
// notKarpenters refuses objects that Karpenter stamped (its nodepool-hash
// annotation) and this prefix did not: read with this mode's rules they
// would all be "not stamped", while Karpenter judges them by its own.
func notKarpenters(objs []*unstructured.Unstructured, prefix, file string) error {
	for _, obj := range objs {
		a := obj.GetAnnotations()
		_, karpenters := a["karpenter.sh/nodepool-hash"]
		_, ours := a[prefix+"/hash"]
		if karpenters && !ours {
			return usageError{err: fmt.Errorf("%s: %s %s is stamped by Karpenter (karpenter.sh/nodepool-hash), not with %s: explain it with Karpenter's rules: drift-explain --karpenter DUMP.yaml",
				file, obj.GetKind(), obj.GetName(), prefix)}
		}
	}
	return nil
}

func readObjects(file string) ([]*unstructured.Unstructured, error) {
	docs, err := readDocs(file)
	if err != nil {
		return nil, err
	}
	var items []any
	for _, d := range docs {
		switch v := d.(type) {
		case []any:
			items = append(items, v...)
		case map[string]any:
			if list, ok := v["items"].([]any); ok && strings.HasSuffix(fmt.Sprint(v["kind"]), "List") {
				items = append(items, list...)
			} else {
				items = append(items, v)
			}
		default:
			return nil, fmt.Errorf("%s: document is neither an object nor a list", file)
		}
	}
	var objs []*unstructured.Unstructured
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: object %d is not a YAML object", file, i)
		}
		obj := &unstructured.Unstructured{Object: m}
		if obj.GetName() == "" {
			return nil, fmt.Errorf("%s: object %d has no metadata.name", file, i)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%s: no objects", file)
	}
	return objs, nil
}

// readDocs decodes every non-empty YAML document of a file.
func readDocs(file string) ([]any, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var docs []any
	for {
		var d any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: empty", file)
	}
	return docs, nil
}

func metaObjects(objs []*unstructured.Unstructured) []metav1.Object {
	out := make([]metav1.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

func name(obj *unstructured.Unstructured) string {
	if k := obj.GetKind(); k != "" {
		return k + "/" + obj.GetName()
	}
	return obj.GetName()
}
