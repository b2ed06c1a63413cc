package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/examples/cli"
	"github.com/upgradekit/upgradekit/karpenter"
)

// karpenterOptions are the flags of the --karpenter mode.
type karpenterOptions struct {
	live                      bool
	kubeconfig, context       string
	previous, instances       string
	caBundle, offerings       string
	images, kubernetesVersion string
	imagesAt                  string
	output                    string
	dumps                     []string
}

// runKarpenter explains the drift of every NodeClaim of a Karpenter
// cluster, read from dumps or, with --live, from the cluster (saying on
// stderr what it reads, when that is a terminal).
func runKarpenter(ctx context.Context, o karpenterOptions, stdout, stderr io.Writer, newClient func(*rest.Config) (client.Reader, error)) error {
	var snap *karpenter.Snapshot
	if o.live {
		cfg, err := restConfig(o.kubeconfig, o.context)
		if err != nil {
			return err
		}
		c, err := newClient(cfg)
		if err != nil {
			return err
		}
		// On a terminal only: listing a large cluster takes a while.
		prog := cli.NewProgress(stderr, "drift-explain")
		if c != nil { // else karpenter.Read says what is wrong
			c = &progressReader{Reader: c, prog: prog}
		}
		snap, err = karpenter.Read(ctx, c)
		prog.Done()
		if err != nil {
			return err
		}
	} else {
		snap = &karpenter.Snapshot{}
		for _, f := range o.dumps {
			s, err := readDumpFile(f)
			if err != nil {
				return err
			}
			snap.NodePools = append(snap.NodePools, s.NodePools...)
			snap.NodeClaims = append(snap.NodeClaims, s.NodeClaims...)
			snap.Nodes = append(snap.Nodes, s.Nodes...)
			snap.EC2NodeClasses = append(snap.EC2NodeClasses, s.EC2NodeClasses...)
			snap.Converted = append(snap.Converted, s.Converted...)
		}
	}
	var opts []karpenter.ExplainOption
	if o.previous != "" {
		prev, err := readDumpFile(o.previous)
		if err != nil {
			return err
		}
		if len(prev.NodePools) == 0 {
			return fmt.Errorf("--previous %s: no NodePools", o.previous)
		}
		opts = append(opts, karpenter.WithPreviousNodePools(prev.NodePools...))
	}
	if o.caBundle != "" {
		pem, err := os.ReadFile(o.caBundle)
		if err != nil {
			return err
		}
		opts = append(opts, karpenter.WithClusterCABundle(string(pem)))
	}
	if o.offerings != "" {
		f, err := os.Open(o.offerings)
		if err != nil {
			return err
		}
		offerings, err := karpenter.ReadOfferings(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--offerings %s: %w", o.offerings, err)
		}
		opts = append(opts, karpenter.WithOfferings(offerings))
	}
	if o.instances != "" {
		f, err := os.Open(o.instances)
		if err != nil {
			return err
		}
		list, err := karpenter.ReadInstances(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--instances %s: %w", o.instances, err)
		}
		opts = append(opts, karpenter.WithInstances(karpenter.Instances(list)))
	}
	if o.images != "" {
		r, err := imageResolver(o)
		if err != nil {
			return err
		}
		opts = append(opts, karpenter.WithImageResolver(r))
	}
	rep, err := karpenter.Explain(ctx, snap, opts...)
	if err != nil {
		return err
	}
	if o.output != cli.Table {
		if err := cli.WriteObject(stdout, o.output, "KarpenterDriftReport", rep); err != nil {
			return err
		}
	} else {
		printKarpenter(stdout, rep)
	}
	if rep.Drifted > 0 {
		return errDrifted
	}
	return nil
}

// progressReader is a client.Reader that draws on prog which kind it is
// listing and how many of each kind it has read: "drift-explain: NodePools
// 3, NodeClaims 120, reading Nodes...".
type progressReader struct {
	client.Reader
	prog *cli.Progress
	read []string // "NodePools 3", one per kind listed
}

// List lists as the Reader does, saying so before and counting after.
func (r *progressReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	kinds := pluralKind(list)
	r.prog.Printf("%s", strings.Join(append(slices.Clone(r.read), "reading "+kinds+"..."), ", "))
	if err := r.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	r.read = append(r.read, fmt.Sprintf("%s %d", kinds, meta.LenList(list)))
	r.prog.Printf("%s", strings.Join(r.read, ", "))
	return nil
}

// pluralKind names the kind a list holds, in the plural: NodePools,
// EC2NodeClasses.
func pluralKind(list client.ObjectList) string {
	t := reflect.TypeOf(list)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kind := strings.TrimSuffix(t.Name(), "List")
	if strings.HasSuffix(kind, "s") {
		return kind + "es"
	}
	return kind + "s"
}

// readDumpFile reads a Karpenter dump from a file.
func readDumpFile(file string) (*karpenter.Snapshot, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := karpenter.ReadDump(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

// imageResolver loads --images, an image catalog as ami-resolve reads it.
func imageResolver(o karpenterOptions) (karpenter.ImageResolver, error) {
	f, err := os.Open(o.images)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var opts []amiselect.Option
	if o.imagesAt != "" {
		at, err := time.Parse(time.RFC3339, o.imagesAt)
		if err != nil {
			return nil, usageError{err: fmt.Errorf("--images-at: %w", err)}
		}
		opts = append(opts, amiselect.WithClock(clocktesting.NewFakePassiveClock(at)))
	}
	catalog, err := amiselect.LoadCatalog(f, opts...)
	if err != nil {
		return nil, fmt.Errorf("--images %s: %w", o.images, err)
	}
	if o.kubernetesVersion != "" {
		opts = append(opts, amiselect.WithKubernetesVersion(o.kubernetesVersion))
	}
	return karpenter.CatalogResolver(catalog, opts...)
}

// restConfig is the cluster's config: --kubeconfig, else client-go's
// loading rules, with --context.
func restConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("cluster config (--kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster): %w", err)
	}
	return cfg, nil
}

// newKarpenterClient is a client for the kinds karpenter.Read lists.
func newKarpenterClient(cfg *rest.Config) (client.Reader, error) {
	scheme, err := karpenter.Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// printKarpenter prints a summary table, then every reason and note.
func printKarpenter(w io.Writer, rep *karpenter.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODECLAIM\tNODE\tNODEPOOL\tVERDICT\tREASONS\tKARPENTER SAYS")
	for _, c := range rep.NodeClaims {
		verdict, reasons := "not drifted", "-"
		if len(c.CannotTell) > 0 {
			verdict = "unknown" // what was given cannot settle it; the details say why
		}
		if c.Drifted() {
			verdict = "drifted"
			names := make([]string, len(c.Reasons))
			for i, r := range c.Reasons {
				names[i] = string(r.Name)
			}
			reasons = strings.Join(names, ",")
		}
		says := "-"
		if c.Condition != "" {
			says = "Drifted: " + c.Condition
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, orDash(c.Node), orDash(c.NodePool), verdict, reasons, says)
	}
	tw.Flush()
	for _, c := range rep.NodeClaims {
		if len(c.Reasons) == 0 && len(c.CannotTell) == 0 && len(c.Notes) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", c.Name)
		for _, r := range c.Reasons {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Message)
			for _, e := range r.Evidence {
				if e.Kind == drift.EvidenceKindLabel {
					// Which label, and which requirement it no longer meets.
					got := e.Key + "=" + e.Got
					if e.Got == "" {
						got = e.Key + " (absent)"
					} else if strings.Contains(e.Got, "=") {
						got = e.Got // both keys of a label, already spelled out
					}
					fmt.Fprintf(w, "    label %s: needs %s (%s)\n", got, e.Want, e.Detail)
					continue
				}
				if e.Kind == drift.EvidenceKindField && (e.Got != "" || e.Want != "") {
					fmt.Fprintf(w, "    %s: %s -> %s\n", e.Key, orAbsent(e.Got), orAbsent(e.Want))
				}
			}
		}
		for _, s := range c.CannotTell {
			fmt.Fprintf(w, "  cannot tell: %s\n", s)
		}
		for _, s := range c.Notes {
			fmt.Fprintf(w, "  note: %s\n", s)
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w)
		for _, s := range rep.Notes {
			fmt.Fprintf(w, "note: %s\n", s)
		}
	}
	if len(rep.NodePools) > 1 || len(rep.NodePools) == 1 && rep.Drifted > 0 {
		fmt.Fprintln(w)
		for _, p := range rep.NodePools {
			fmt.Fprintf(w, "NodePool %s: %s\n", orDash(p.Name), nodePoolLine(p))
		}
	}
	fmt.Fprintf(w, "\n%d of %d NodeClaims drifted\n", rep.Drifted, len(rep.NodeClaims))
}

// nodePoolLine says how far a NodePool's drift has gone: "3 of 11
// NodeClaims drifted (AMIDrift 2, SubnetDrift 1), 1 being replaced".
func nodePoolLine(p karpenter.NodePoolSummary) string {
	line := fmt.Sprintf("%d of %d NodeClaims drifted", p.Drifted, p.NodeClaims)
	if len(p.ByReason) > 0 {
		parts := make([]string, 0, len(p.ByReason))
		for _, r := range slices.Sorted(maps.Keys(p.ByReason)) {
			parts = append(parts, fmt.Sprintf("%s %d", r, p.ByReason[r]))
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	if p.Unknown > 0 {
		line += fmt.Sprintf(", %d unknown", p.Unknown)
	}
	if p.Replacing > 0 {
		line += fmt.Sprintf(", %d being replaced", p.Replacing)
	}
	return line
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// validateKarpenter checks the --karpenter mode's flags and arguments.
func validateKarpenter(o *karpenterOptions, args []string, generic []string) error {
	if len(generic) > 0 {
		return usageError{err: fmt.Errorf("%s cannot be combined with --karpenter", strings.Join(generic, ", "))}
	}
	if o.live {
		if len(args) > 0 {
			return usageError{err: errors.New("--live reads the cluster: give no dump files")}
		}
	} else {
		if o.kubeconfig != "" || o.context != "" {
			return usageError{err: errors.New("--kubeconfig and --context need --live")}
		}
		if len(args) == 0 {
			return usageError{err: errors.New("--karpenter needs dump files (DUMP.yaml...) or --live; --help for usage")}
		}
		o.dumps = args
	}
	if (o.kubernetesVersion != "" || o.imagesAt != "") && o.images == "" {
		return usageError{err: errors.New("--kubernetes-version and --images-at need --images")}
	}
	if o.kubernetesVersion != "" {
		if _, _, err := amiselect.ParseKubernetesVersion(o.kubernetesVersion); err != nil {
			return usageError{err: fmt.Errorf("--kubernetes-version: %w", err)}
		}
	}
	for _, f := range append([]string{o.previous, o.instances, o.images, o.caBundle, o.offerings}, o.dumps...) {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return usageError{err: err}
		}
	}
	return nil
}
