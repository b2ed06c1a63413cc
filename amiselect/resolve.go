package amiselect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Resolution is the outcome of Resolve and, as JSON, the record of it: what
// was chosen, from which terms, when. Store it to compare with a later
// resolution (Changes) or to pin a later stage to it (WithPin).
type Resolution struct {
	// ResolvedAt is when Resolve ran (by the configured clock).
	ResolvedAt time.Time `json:"resolvedAt"`
	// KubernetesVersion is the normalised version aliases were resolved
	// for, or empty.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Terms are the selector terms as given.
	Terms []Term `json:"terms"`
	// Images holds one image per distinct requirement set, newest first
	// (CreationDate descending, then id ascending).
	Images []Selected `json:"images"`
	// Skipped says what was passed over and why: missing SSM parameters,
	// values that are not image ids, unusable architectures, images too
	// young or not pinned, and terms that matched nothing.
	Skipped []Skip `json:"skipped,omitempty"`
}

// Selected is one chosen image and the requirement set it serves.
type Selected struct {
	// ID is the image id (ami-...).
	ID string `json:"id"`
	// Name is the image name.
	Name string `json:"name,omitempty"`
	// OwnerID is the account that owns the image.
	OwnerID string `json:"ownerId,omitempty"`
	// CreationDate is when EC2 says the image was created.
	CreationDate time.Time `json:"creationDate"`
	// Deprecated is true when the image was deprecated at ResolvedAt (it
	// was chosen only because nothing non-deprecated fits).
	Deprecated bool `json:"deprecated,omitempty"`
	// Requirements is the requirement set this image serves.
	Requirements Requirements `json:"requirements"`
	// Terms are the indexes of the selector terms that matched this image.
	Terms []int `json:"terms"`
}

// Skip records something Resolve passed over. Term is the selector term
// index; Parameter is set for SSM parameters; Images lists up to ten of the
// affected image ids and Count how many there were.
type Skip struct {
	// Term is the index of the selector term.
	Term int `json:"term"`
	// Parameter is the SSM parameter skipped, if any.
	Parameter string `json:"parameter,omitempty"`
	// Images are up to ten of the image ids passed over, sorted.
	Images []string `json:"images,omitempty"`
	// Count is how many images were passed over in all.
	Count int `json:"count,omitempty"`
	// Reason says why.
	Reason string `json:"reason"`
}

// String renders the skip for messages.
func (s Skip) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "amiSelectorTerms[%d]", s.Term)
	if s.Parameter != "" {
		fmt.Fprintf(&b, " parameter %q", s.Parameter)
	}
	b.WriteString(": ")
	b.WriteString(s.Reason)
	if len(s.Images) > 0 {
		fmt.Fprintf(&b, " (%s", strings.Join(s.Images, ", "))
		if s.Count > len(s.Images) {
			fmt.Fprintf(&b, ", ... %d in all", s.Count)
		}
		b.WriteString(")")
	}
	return b.String()
}

const maxSkipImages = 10

// Skip reasons Resolve records.
const (
	reasonNoMatch        = "matched no image"
	reasonParamNotFound  = "SSM parameter not found"
	reasonParamNotAMI    = "SSM parameter value does not start with \"ami-\""
	reasonArchitecture   = "image architecture is not x86_64 or arm64"
	reasonNotAvailable   = "image state is not available"
	reasonNotPinned      = "image is not in the pinned resolution"
	reasonTooYoungFormat = "image created less than %s ago (minimum age)"
)

// Resolve turns selector terms into images, with Karpenter's semantics:
// terms are ORed and the fields of a term ANDed; name takes "*" wildcards;
// a tag value "*" only needs the key; owners default to self and amazon only
// when name is set; id and ssmParameter values go into one image-id query; an
// SSM parameter that is missing or whose value does not start with "ami-" is
// skipped and recorded; only available images count; deprecated images are
// kept but lose ties. For each distinct requirement set (architecture,
// accelerator variant, Windows build) the image chosen is the non-deprecated
// one first, then the newest CreationDate, then the greatest Name (then the
// smallest id, so the choice never depends on the source's order).
//
// The terms are validated first (see Validate). Options: WithKubernetesVersion
// (required for aliases), WithFamily, WithClock, WithMinAge, WithPin,
// WithLogger. It returns a *NoImagesError when nothing was selected.
//
// Where Karpenter ignores an error fetching an alias's SSM parameter and
// carries on with fewer images, Resolve fails instead: a throttled call must
// not look like a release that dropped an architecture (which would drift
// nodes). Only ErrParameterNotFound is skipped.
func Resolve(ctx context.Context, src ImageSource, terms []Term, opts ...Option) (*Resolution, error) {
	o := newOptions(opts)
	if isNilSource(src) {
		return nil, nilSourceError("Resolve")
	}
	if err := Validate(terms, WithFamily(o.family)); err != nil {
		return nil, err
	}
	r := &resolver{
		ctx:     ctx,
		src:     src,
		o:       o,
		now:     o.clock.Now(),
		terms:   terms,
		hits:    make([]int, len(terms)),
		skipped: map[skipKey]*Skip{},
	}
	if o.pin != nil {
		r.pinned = make(map[string]struct{}, len(o.pin.Images))
		for _, img := range o.pin.Images {
			r.pinned[img.ID] = struct{}{}
		}
	}
	res := &Resolution{ResolvedAt: r.now, Terms: terms}
	var err error
	if len(terms) == 1 && terms[0].Alias != "" {
		res.KubernetesVersion, err = r.alias()
	} else {
		err = r.selectors()
	}
	if err != nil {
		return nil, err
	}
	res.Images = r.result()
	res.Skipped = r.skips()
	if len(res.Images) == 0 {
		return nil, &NoImagesError{Unmatched: res.Skipped}
	}
	return res, nil
}

type slot struct {
	img   *Image
	dep   bool
	terms []int
}

// reqSlot is the best image so far for one requirement set.
type reqSlot struct {
	req  Requirements
	slot *slot
}

type skipKey struct {
	term      int
	parameter string
	reason    string
}

type resolver struct {
	ctx     context.Context
	src     ImageSource
	o       *options
	now     time.Time
	terms   []Term
	pinned  map[string]struct{}
	slots   []reqSlot // few (one per requirement set): a slice beats a map
	hits    []int
	skipped map[skipKey]*Skip
	order   []skipKey
}

// known is what an SSM path says about the image it names.
type known struct {
	variants []Variant
	build    string
}

func (r *resolver) skip(term int, parameter, reason, image string) {
	k := skipKey{term, parameter, reason}
	s, ok := r.skipped[k]
	if !ok {
		s = &Skip{Term: term, Parameter: parameter, Reason: reason}
		r.skipped[k] = s
		r.order = append(r.order, k)
		r.o.log.V(1).Info("amiselect: skipped", "term", term, "parameter", parameter, "reason", reason, "image", image)
	}
	if image != "" {
		s.Count++
		if len(s.Images) < maxSkipImages {
			s.Images = append(s.Images, image)
		}
	}
}

// parameter reads an SSM parameter; ok is false when it was skipped.
func (r *resolver) parameter(term int, name string) (string, bool, error) {
	v, err := r.src.GetParameter(r.ctx, name)
	if err != nil {
		if errors.Is(err, ErrParameterNotFound) {
			r.skip(term, name, reasonParamNotFound, "")
			return "", false, nil
		}
		return "", false, fmt.Errorf("amiselect: resolving amiSelectorTerms[%d] SSM parameter %q: %w", term, name, err)
	}
	if !strings.HasPrefix(v, "ami-") {
		r.skip(term, name, reasonParamNotAMI+": "+truncate(v, 64), "")
		return "", false, nil
	}
	return v, true, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:n])
}

func (r *resolver) alias() (string, error) {
	a, err := ParseAlias(r.terms[0].Alias)
	if err != nil {
		return "", err
	}
	if r.o.k8sVersion == "" {
		return "", &Error{Kind: ErrInvalidKubernetesVersion, Path: "amiSelectorTerms[0].alias", Index: 0, Field: "alias", Value: r.terms[0].Alias,
			Reason: "an alias resolves per Kubernetes version: pass WithKubernetesVersion"}
	}
	k8s, _, err := ParseKubernetesVersion(r.o.k8sVersion)
	if err != nil {
		return "", err
	}
	params, err := a.Parameters(k8s)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Path, e.Index, e.Field = "amiSelectorTerms[0].alias", 0, "alias"
		}
		return "", err
	}
	byID := map[string][]known{}
	var ids []string
	for _, p := range params {
		id, ok, err := r.parameter(0, p.Path)
		if err != nil {
			return "", err
		}
		if !ok {
			continue
		}
		if _, seen := byID[id]; !seen {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], known{variants: p.Variants, build: p.WindowsBuild})
	}
	if len(ids) == 0 {
		return k8s, nil
	}
	err = r.each(Query{Filters: []Filter{{Name: "image-id", Values: ids}}}, func(img *Image) {
		arch, ok := r.eligible(0, img)
		if !ok {
			return
		}
		for _, k := range byID[img.ID] {
			if len(k.variants) == 0 {
				r.offer(Requirements{Architecture: arch, WindowsBuild: k.build}, img, 0)
			}
			for _, v := range k.variants {
				r.offer(Requirements{Architecture: arch, Variant: v, WindowsBuild: k.build}, img, 0)
			}
		}
	})
	if err != nil {
		return "", err
	}
	return k8s, nil
}

func (r *resolver) selectors() error {
	var ids []string
	idTerms := map[string][]int{}
	addID := func(id string, term int) {
		if _, ok := idTerms[id]; !ok {
			ids = append(ids, id)
		}
		idTerms[id] = append(idTerms[id], term)
	}
	type termQuery struct {
		term int
		q    Query
	}
	// The queries' filters and values are carved from two arrays sized
	// for every term at once (termToQuery), and one callback serves them
	// all: a resolution makes a few allocations, not a few per term.
	queries := make([]termQuery, 0, len(r.terms))
	var nf, nv int
	for _, t := range r.terms {
		if t.ID == "" && t.SSMParameter == "" {
			nf, nv = nf+queryFilters(t), nv+queryValues(t)
		}
	}
	arena := queryArena{filters: make([]Filter, 0, nf), vals: make([]string, 0, nv)}
	for i, t := range r.terms {
		switch {
		case t.ID != "":
			addID(t.ID, i)
		case t.SSMParameter != "":
			id, ok, err := r.parameter(i, t.SSMParameter)
			if err != nil {
				return err
			}
			if ok {
				addID(id, i)
			}
		default:
			queries = append(queries, termQuery{term: i, q: arena.termToQuery(t)})
		}
	}
	var term int
	offer := func(img *Image) {
		if arch, ok := r.eligible(term, img); ok {
			r.offer(Requirements{Architecture: arch}, img, term)
		}
	}
	for _, tq := range queries {
		term = tq.term
		if err := r.each(tq.q, offer); err != nil {
			return fmt.Errorf("amiSelectorTerms[%d]: %w", tq.term, err)
		}
	}
	if len(ids) > 0 {
		err := r.each(Query{Filters: []Filter{{Name: "image-id", Values: ids}}}, func(img *Image) {
			for _, term := range idTerms[img.ID] {
				if arch, ok := r.eligible(term, img); ok {
					r.offer(Requirements{Architecture: arch}, img, term)
				}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// queryArena holds the filters and values of every term's query in two
// arrays. Each query's slices are capped: its filters have room for the
// one filter each adds (the state), and appending more copies instead of
// writing into the next query's.
type queryArena struct {
	filters []Filter
	vals    []string
}

// queryFilters is how many filters termToQuery makes for t, with the slot
// it keeps for the state filter each adds. It and queryValues size the
// arena exactly (an upper bound per term cost 5% of a resolution's time in
// the larger arrays); a count that fell short would only make the arena
// grow, as its slices are capped.
func queryFilters(t Term) int {
	n := len(t.Tags) + 1
	if t.Name != "" {
		n++
	}
	return n
}

// queryValues is how many values and owners termToQuery takes for t.
func queryValues(t Term) int {
	n := len(t.Tags)
	switch {
	case t.Owner != "" && t.Name != "":
		n += 2
	case t.Owner != "":
		n++
	case t.Name != "":
		n += 3 // self, amazon and the name
	}
	return n
}

// termToQuery builds the DescribeImages query of a name/owner/tags term
// in the arena's arrays.
func (a *queryArena) termToQuery(t Term) Query {
	take := func(v ...string) []string {
		n := len(a.vals)
		a.vals = append(a.vals, v...)
		return a.vals[n:len(a.vals):len(a.vals)]
	}
	start := len(a.filters)
	var q Query
	if t.Owner != "" {
		q.Owners = take(t.Owner)
	}
	if t.Name != "" {
		if t.Owner == "" {
			// Only with a name, so publicly shared images matching a
			// name pattern are not picked up by accident.
			q.Owners = take("self", "amazon")
		}
		a.filters = append(a.filters, Filter{Name: "name", Values: take(t.Name)})
	}
	if len(t.Tags) > 0 {
		var buf [8]string
		keys := buf[:0]
		for k := range t.Tags {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if v := t.Tags[k]; v == "*" {
				a.filters = append(a.filters, Filter{Name: "tag-key", Values: take(k)})
			} else {
				a.filters = append(a.filters, Filter{Name: "tag:" + k, Values: take(v)})
			}
		}
	}
	// One slot more, for the state filter each adds.
	end := len(a.filters)
	a.filters = append(a.filters, Filter{})
	q.Filters = a.filters[start : end : end+1]
	return q
}

// each calls fn with every available image matching q (deprecated ones
// included), in the source's order. A Catalog shows its own images in
// place (imageVisitor); the resolver keeps pointers to them only while it
// runs, and copies what its result needs.
func (r *resolver) each(q Query, fn func(*Image)) error {
	q.Filters = append(q.Filters, Filter{Name: "state", Values: []string{StateAvailable}})
	q.IncludeDeprecated = true
	if v, ok := r.src.(imageVisitor); ok {
		if err := v.visitImages(r.ctx, q, fn); err != nil {
			return fmt.Errorf("amiselect: describing images: %w", err)
		}
		return nil
	}
	imgs, err := r.src.DescribeImages(r.ctx, q)
	if err != nil {
		return fmt.Errorf("amiselect: describing images: %w", err)
	}
	for i := range imgs {
		fn(&imgs[i])
	}
	return nil
}

// eligible applies the per-image gates and returns the Kubernetes
// architecture.
func (r *resolver) eligible(term int, img *Image) (string, bool) {
	if img.State != "" && img.State != StateAvailable {
		r.skip(term, "", reasonNotAvailable, img.ID)
		return "", false
	}
	arch, ok := kubeArch(img.Architecture)
	if !ok {
		r.skip(term, "", reasonArchitecture, img.ID)
		return "", false
	}
	if r.o.minAge > 0 && r.now.Sub(img.CreationDate) < r.o.minAge {
		r.skip(term, "", fmt.Sprintf(reasonTooYoungFormat, r.o.minAge), img.ID)
		return "", false
	}
	if r.pinned != nil {
		if _, ok := r.pinned[img.ID]; !ok {
			r.skip(term, "", reasonNotPinned, img.ID)
			return "", false
		}
	}
	r.hits[term]++
	return arch, true
}

// offer puts img forward for the requirement set req.
func (r *resolver) offer(req Requirements, img *Image, term int) {
	dep := img.Deprecated(r.now)
	var s *slot
	for i := range r.slots {
		if r.slots[i].req == req {
			s = r.slots[i].slot
			break
		}
	}
	if s == nil {
		r.slots = append(r.slots, reqSlot{req: req, slot: &slot{img: img, dep: dep, terms: []int{term}}})
		return
	}
	if s.img == img || s.img.ID == img.ID {
		if n := len(s.terms); s.terms[n-1] != term {
			s.terms = append(s.terms, term)
		}
		return
	}
	if better(img, dep, s.img, s.dep) {
		s.img, s.dep, s.terms = img, dep, append(s.terms[:0], term)
	}
}

// better reports whether image a beats image b for one requirement set:
// non-deprecated first, then newer CreationDate (seconds, as EC2 reports it),
// then greater Name, then smaller id.
func better(a *Image, aDep bool, b *Image, bDep bool) bool {
	if aDep != bDep {
		return !aDep
	}
	if at, bt := a.CreationDate.Unix(), b.CreationDate.Unix(); at != bt {
		return at > bt
	}
	if a.Name != b.Name {
		return a.Name > b.Name
	}
	return a.ID < b.ID
}

func (r *resolver) result() []Selected {
	out := make([]Selected, 0, len(r.slots))
	for _, rs := range r.slots {
		req, s := rs.req, rs.slot
		terms := s.terms
		sort.Ints(terms)
		terms = slices.Compact(terms)
		out = append(out, Selected{
			ID:           s.img.ID,
			Name:         s.img.Name,
			OwnerID:      s.img.OwnerID,
			CreationDate: s.img.CreationDate,
			Deprecated:   s.dep,
			Requirements: req,
			Terms:        terms,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if at, bt := a.CreationDate.Unix(), b.CreationDate.Unix(); at != bt {
			return at > bt
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Requirements.less(b.Requirements)
	})
	return out
}

func (r *resolver) skips() []Skip {
	var out []Skip
	for i := range r.terms {
		if r.hits[i] == 0 {
			if _, any := r.anySkipFor(i); !any {
				out = append(out, Skip{Term: i, Reason: reasonNoMatch})
			}
		}
	}
	for _, k := range r.order {
		s := r.skipped[k]
		sort.Strings(s.Images)
		out = append(out, *s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Term < out[j].Term })
	return out
}

func (r *resolver) anySkipFor(term int) (Skip, bool) {
	for _, k := range r.order {
		if k.term == term {
			return *r.skipped[k], true
		}
	}
	return Skip{}, false
}

// ImageFor returns the image a new node described by node gets: the first
// image, in the resolution's order, whose requirement set fits the node (as
// Karpenter maps instance types to images). ok is false when none fits.
func (r *Resolution) ImageFor(node Requirements) (img Selected, ok bool) {
	if r == nil {
		return Selected{}, false
	}
	for _, s := range r.Images {
		if s.Requirements.compatible(node) {
			return s, true
		}
	}
	return Selected{}, false
}

// ReasonAMIDrift is the drift reason Karpenter uses for a node whose image is
// not the one a new node would get.
const ReasonAMIDrift = "AMIDrift"

// IsDrifted answers AMI drift for a node running nodeImageID with the
// requirements node: it is drifted when that is not the image a new node with
// the same requirements gets. The answer is plain values, so the drift package
// can take it through a func without importing this package: the reason
// starts with "AMIDrift: " when drifted.
//
// Missing data is never drift: an unknown node image (empty id), a nil
// Resolution, or a resolution in which no image fits the node's requirements
// (Karpenter treats "no image for these requirements" as an error, not drift)
// are all reported as not drifted, with a reason starting "cannot decide: ".
func (r *Resolution) IsDrifted(nodeImageID string, node Requirements) (drifted bool, reason string) {
	if nodeImageID == "" {
		return false, "cannot decide: node image id is unknown"
	}
	if r == nil {
		return false, "cannot decide: no resolution (nil *Resolution)"
	}
	want, ok := r.ImageFor(node)
	if !ok {
		return false, fmt.Sprintf("cannot decide: no image resolved for %s (node runs %s)", node, nodeImageID)
	}
	if want.ID != nodeImageID {
		return true, fmt.Sprintf("%s: node runs %s, a new %s node gets %s (%s, created %s)",
			ReasonAMIDrift, nodeImageID, node, want.ID, want.Name, want.CreationDate.UTC().Format(time.RFC3339))
	}
	return false, fmt.Sprintf("node runs %s, the image a new %s node gets", nodeImageID, node)
}

// Change is one requirement set whose image differs between two resolutions.
// From is nil when the set is new, To is nil when it is no longer served.
type Change struct {
	// Requirements is the requirement set whose image changes.
	Requirements Requirements `json:"requirements"`
	// From is the image chosen before, nil when the set is new.
	From *Selected `json:"from,omitempty"`
	// To is the image chosen after, nil when the set is no longer served.
	To *Selected `json:"to,omitempty"`
}

// String renders the change as "arch/variant: ami-a -> ami-b".
func (c Change) String() string {
	from, to := "(none)", "(none)"
	if c.From != nil {
		from = c.From.ID
	}
	if c.To != nil {
		to = c.To.ID
	}
	return c.Requirements.String() + ": " + from + " -> " + to
}

// Changes lists what would change going from r to next: per requirement set,
// the image that would be replaced, sorted by requirement set. No changes
// means nodes resolved under r would not drift under next. A nil Resolution
// counts as empty.
func (r *Resolution) Changes(next *Resolution) []Change {
	index := func(res *Resolution) map[Requirements]*Selected {
		m := map[Requirements]*Selected{}
		if res == nil {
			return m
		}
		for i := range res.Images {
			if _, ok := m[res.Images[i].Requirements]; !ok {
				m[res.Images[i].Requirements] = &res.Images[i]
			}
		}
		return m
	}
	before, after := index(r), index(next)
	var out []Change
	for req, f := range before {
		t := after[req]
		if t == nil || t.ID != f.ID {
			out = append(out, Change{Requirements: req, From: f, To: t})
		}
	}
	for req, t := range after {
		if before[req] == nil {
			out = append(out, Change{Requirements: req, To: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Requirements.less(out[j].Requirements) })
	return out
}
