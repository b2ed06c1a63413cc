package amiselect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Catalog is an in-memory ImageSource for tests and offline use. It answers
// DescribeImages with EC2's filter semantics (image-id, name, state,
// architecture, owner-id, owner-alias, tag-key, tag:<key>; values ORed with
// "*"/"?" wildcards, filters ANDed; owners "self", "amazon",
// "aws-marketplace" or account ids) and GetParameter from a parameter map.
// Images are indexed, so a query costs about the size of its smallest
// matching index, not the catalog. It is safe for concurrent use.
//
// Build one with NewCatalog or LoadCatalog. The zero value is an empty
// catalog (no images, no parameters, the real clock) that does not panic.
type Catalog struct {
	images    []Image
	byID      map[string]int32
	byOwner   map[string][]int32
	byAlias   map[string][]int32
	byTagKey  map[string][]int32
	byTag     map[[2]string][]int32
	byName    []int32 // image indexes sorted by name
	accountID string
	clock     clock.PassiveClock

	mu     sync.RWMutex
	params map[string]string
}

// NewCatalog builds a catalog from images. Every image needs a unique id of
// the form ami-...; other fields may be empty. Options: WithAccountID (what
// the owner "self" means), WithClock (deprecation when a query does not
// include deprecated images).
func NewCatalog(images []Image, opts ...Option) (*Catalog, error) {
	o := newOptions(opts)
	c := &Catalog{
		images:    make([]Image, len(images)),
		byID:      make(map[string]int32, len(images)),
		byOwner:   map[string][]int32{},
		byAlias:   map[string][]int32{},
		byTagKey:  map[string][]int32{},
		byTag:     map[[2]string][]int32{},
		byName:    make([]int32, len(images)),
		accountID: o.accountID,
		clock:     o.clock,
		params:    map[string]string{},
	}
	copy(c.images, images)
	for i := range c.images {
		img := &c.images[i]
		idx := int32(i)
		if !validID(img.ID) {
			return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].ImageId", i), img.ID, "must match ^ami-[0-9a-z]+$")
		}
		if prev, dup := c.byID[img.ID]; dup {
			return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].ImageId", i), img.ID, fmt.Sprintf("duplicate of Images[%d]", prev))
		}
		c.byID[img.ID] = idx
		c.byOwner[img.OwnerID] = append(c.byOwner[img.OwnerID], idx)
		if img.OwnerAlias != "" {
			c.byAlias[img.OwnerAlias] = append(c.byAlias[img.OwnerAlias], idx)
		}
		for k, v := range img.Tags {
			c.byTagKey[k] = append(c.byTagKey[k], idx)
			c.byTag[[2]string{k, v}] = append(c.byTag[[2]string{k, v}], idx)
		}
		c.byName[i] = idx
	}
	sort.SliceStable(c.byName, func(a, b int) bool { return c.images[c.byName[a]].Name < c.images[c.byName[b]].Name })
	return c, nil
}

// now reads the catalog's clock, the real one for a zero Catalog.
func (c *Catalog) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

// SetParameter sets an SSM parameter value for GetParameter.
func (c *Catalog) SetParameter(name, value string) {
	c.mu.Lock()
	if c.params == nil {
		c.params = map[string]string{}
	}
	c.params[name] = value
	c.mu.Unlock()
}

// DeleteParameter removes an SSM parameter.
func (c *Catalog) DeleteParameter(name string) {
	c.mu.Lock()
	delete(c.params, name)
	c.mu.Unlock()
}

// GetParameter implements ImageSource; a missing parameter is
// ErrParameterNotFound.
func (c *Catalog) GetParameter(ctx context.Context, name string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c.mu.RLock()
	v, ok := c.params[name]
	c.mu.RUnlock()
	if !ok {
		return "", fmt.Errorf("parameter %s: %w", errtext.Quote(name), ErrParameterNotFound)
	}
	return v, nil
}

type compiledFilter struct {
	kind     string // "image-id", "name", ..., "tag"
	tagKey   string
	patterns []pattern
}

func (f *compiledFilter) matchAny(s string) bool {
	for i := range f.patterns {
		if f.patterns[i].match(s) {
			return true
		}
	}
	return false
}

func (f *compiledFilter) allLiteral() bool {
	for i := range f.patterns {
		if !f.patterns[i].literal {
			return false
		}
	}
	return true
}

func (f *compiledFilter) matches(img *Image) bool {
	switch f.kind {
	case "image-id":
		return f.matchAny(img.ID)
	case "name":
		return f.matchAny(img.Name)
	case "state":
		return f.matchAny(img.State)
	case "architecture":
		return f.matchAny(img.Architecture)
	case "owner-id":
		return f.matchAny(img.OwnerID)
	case "owner-alias":
		return f.matchAny(img.OwnerAlias)
	case "tag-key":
		for k := range img.Tags {
			if f.matchAny(k) {
				return true
			}
		}
		return false
	case "tag":
		v, ok := img.Tags[f.tagKey]
		return ok && f.matchAny(v)
	}
	return false
}

// compileQuery compiles q's filters into sc.filters (reusing its memory).
func (sc *matchScratch) compileQuery(q Query) error {
	n := 0
	for _, f := range q.Filters {
		n += len(f.Values)
	}
	sc.filters = slices.Grow(sc.filters[:0], len(q.Filters))
	all := slices.Grow(sc.patterns[:0], n)[:n]
	sc.patterns = all
	for i, f := range q.Filters {
		cf := compiledFilter{kind: f.Name}
		switch {
		case f.Name == "image-id", f.Name == "name", f.Name == "state", f.Name == "architecture",
			f.Name == "owner-id", f.Name == "owner-alias", f.Name == "tag-key":
		case strings.HasPrefix(f.Name, "tag:") && len(f.Name) > len("tag:"):
			cf.kind, cf.tagKey = "tag", f.Name[len("tag:"):]
		default:
			return fieldError(ErrInvalidQuery, fmt.Sprintf("Filters[%d].Name", i), f.Name, "unsupported filter name")
		}
		if len(f.Values) == 0 {
			return fieldError(ErrInvalidQuery, fmt.Sprintf("Filters[%d].Values", i), f.Name, "a filter needs at least one value")
		}
		cf.patterns, all = all[:len(f.Values):len(f.Values)], all[len(f.Values):]
		for j, v := range f.Values {
			cf.patterns[j] = compilePattern(v)
		}
		sc.filters = append(sc.filters, cf)
	}
	return nil
}

// matchScratch is the memory of one match: compiled filters, candidate
// lists and hits, pooled across queries (a resolution makes one query per
// term).
type matchScratch struct {
	filters  []compiledFilter
	patterns []pattern
	lists    [][]int32
	ids      []int32
	all      []int32
	hits     []int32
}

var scratchPool = sync.Pool{New: func() any { return new(matchScratch) }}

// release returns sc to the pool, dropping references into the catalog and
// the query so the pool keeps neither alive.
func (sc *matchScratch) release() {
	clear(sc.filters[:cap(sc.filters)])
	clear(sc.patterns[:cap(sc.patterns)])
	clear(sc.lists[:cap(sc.lists)])
	sc.filters, sc.patterns, sc.lists = sc.filters[:0], sc.patterns[:0], sc.lists[:0]
	scratchPool.Put(sc)
}

// DescribeImages implements ImageSource.
func (c *Catalog) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	sc := scratchPool.Get().(*matchScratch)
	defer sc.release()
	hits, err := c.match(ctx, q, sc)
	if err != nil {
		return nil, err
	}
	out := make([]Image, len(hits))
	for i, idx := range hits {
		out[i] = c.images[idx]
	}
	return out, nil
}

// imageVisitor is a source that can show the images matching a query in
// place instead of copying them out: the resolver's fast path for a
// Catalog. visit sees the images DescribeImages would return, in the same
// order, and must not modify or keep them past the source's life.
type imageVisitor interface {
	visitImages(ctx context.Context, q Query, visit func(*Image)) error
}

func (c *Catalog) visitImages(ctx context.Context, q Query, visit func(*Image)) error {
	sc := scratchPool.Get().(*matchScratch)
	defer sc.release()
	hits, err := c.match(ctx, q, sc)
	if err != nil {
		return err
	}
	for _, idx := range hits {
		visit(&c.images[idx])
	}
	return nil
}

// match returns the indexes of the images matching q, in catalog order
// without duplicates, in memory of sc.
func (c *Catalog) match(ctx context.Context, q Query, sc *matchScratch) ([]int32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := sc.compileQuery(q); err != nil {
		return nil, err
	}
	filters := sc.filters
	candidates, sorted, implied := c.candidates(q, sc)
	now := c.now()
	hits := sc.hits[:0]
	for _, idx := range candidates {
		img := &c.images[idx]
		if !q.IncludeDeprecated && img.Deprecated(now) {
			continue
		}
		if len(q.Owners) > 0 && implied != impliedOwners && !c.ownedBy(img, q.Owners) {
			continue
		}
		ok := true
		for i := range filters {
			if i != implied && !filters[i].matches(img) {
				ok = false
				break
			}
		}
		if ok {
			hits = append(hits, idx)
		}
	}
	if !sorted {
		slices.Sort(hits)
		hits = slices.Compact(hits)
	}
	sc.hits = hits
	return hits, nil
}

func (c *Catalog) ownedBy(img *Image, owners []string) bool {
	for _, o := range owners {
		switch o {
		case "self":
			if c.accountID != "" && img.OwnerID == c.accountID {
				return true
			}
		case "amazon", "aws-marketplace":
			if img.OwnerAlias == o {
				return true
			}
		default:
			if img.OwnerID == o {
				return true
			}
		}
	}
	return false
}

// impliedOwners is candidates' answer when the owners' index was used:
// every candidate is owned by one of the query's owners.
const impliedOwners = -2

// candidates picks the smallest index that bounds the answer. sorted is
// true when the result is already in catalog order without duplicates.
// implied is the filter every candidate is known to match because the
// index answers it exactly (impliedOwners for the query's owners, -1 for
// none), so match need not test it again.
func (c *Catalog) candidates(q Query, sc *matchScratch) (_ []int32, sorted bool, implied int) {
	filters := sc.filters
	best := -1
	var bestList [][]int32
	var nameLo, nameHi int
	useName := false
	implied = -1
	// Candidate lists are windows of sc.lists; lists(k) starts a window
	// of room k (earlier windows stay valid: the backing is grown first).
	sc.lists = slices.Grow(sc.lists[:0], len(q.Owners)+len(sc.patterns))
	lists := func(k int) [][]int32 {
		n := len(sc.lists)
		return sc.lists[n : n : n+k]
	}
	consider := func(l [][]int32, exact int) {
		sc.lists = sc.lists[:len(sc.lists)+len(l)]
		n := 0
		for _, x := range l {
			n += len(x)
		}
		if best < 0 || n < best {
			best, bestList, useName, implied = n, l, false, exact
		}
	}
	if len(q.Owners) > 0 {
		l := lists(len(q.Owners))
		for _, o := range q.Owners {
			switch o {
			case "self":
				if c.accountID != "" {
					l = append(l, c.byOwner[c.accountID])
				}
			case "amazon", "aws-marketplace":
				l = append(l, c.byAlias[o])
			default:
				l = append(l, c.byOwner[o])
			}
		}
		consider(l, impliedOwners)
	}
	for i := range filters {
		f := &filters[i]
		switch f.kind {
		case "image-id":
			if f.allLiteral() {
				ids := sc.ids[:0]
				for _, p := range f.patterns {
					if idx, ok := c.byID[p.raw]; ok {
						ids = append(ids, idx)
					}
				}
				sc.ids = ids
				consider(append(lists(1), ids), i)
			}
		case "tag-key":
			if f.allLiteral() {
				l := lists(len(f.patterns))
				for _, p := range f.patterns {
					l = append(l, c.byTagKey[p.raw])
				}
				consider(l, i)
			}
		case "tag":
			l := lists(len(f.patterns))
			exact := -1
			if f.allLiteral() {
				for _, p := range f.patterns {
					l = append(l, c.byTag[[2]string{f.tagKey, p.raw}])
				}
				exact = i
			} else {
				l = append(l, c.byTagKey[f.tagKey])
			}
			consider(l, exact)
		case "name":
			if len(f.patterns) == 1 {
				p := &f.patterns[0]
				lo, hi := c.nameRange(p.prefix)
				if best < 0 || hi-lo < best {
					best, bestList, useName, nameLo, nameHi, implied = hi-lo, nil, true, lo, hi, -1
					if !p.literal && p.raw == p.prefix+"*" {
						implied = i // "prefix*": the range is the answer
					}
				}
			}
		}
	}
	if useName {
		return c.byName[nameLo:nameHi], false, implied
	}
	if best < 0 {
		return c.byName, false, -1
	}
	if len(bestList) == 1 {
		return bestList[0], isAscending(bestList[0]), implied
	}
	all := sc.all[:0]
	for _, l := range bestList {
		all = append(all, l...)
	}
	sc.all = all
	return all, false, implied
}

func isAscending(s []int32) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

// nameRange returns the slice of byName whose names start with prefix.
func (c *Catalog) nameRange(prefix string) (int, int) {
	if prefix == "" {
		return 0, len(c.byName)
	}
	name := func(i int) string { return c.images[c.byName[i]].Name }
	lo := sort.Search(len(c.byName), func(i int) bool { return name(i) >= prefix })
	hi := lo + sort.Search(len(c.byName)-lo, func(i int) bool { return !strings.HasPrefix(name(lo+i), prefix) })
	return lo, hi
}

// describeImagesOutput is the JSON shape of EC2 DescribeImages output (as
// the AWS CLI prints it), plus an optional Parameters list in the shape of
// SSM GetParameters output.
type describeImagesOutput struct {
	Images []struct {
		ImageID         string `json:"ImageId"`
		Name            string `json:"Name"`
		OwnerID         string `json:"OwnerId"`
		ImageOwnerAlias string `json:"ImageOwnerAlias"`
		Architecture    string `json:"Architecture"`
		State           string `json:"State"`
		CreationDate    string `json:"CreationDate"`
		DeprecationTime string `json:"DeprecationTime"`
		Tags            []struct {
			Key   *string `json:"Key"`
			Value *string `json:"Value"`
		} `json:"Tags"`
	} `json:"Images"`
	Parameters []struct {
		Name  string `json:"Name"`
		Value string `json:"Value"`
	} `json:"Parameters"`
}

// LoadCatalog reads a catalog from JSON in the shape of EC2 DescribeImages
// output ({"Images": [{"ImageId": ..., "Name": ..., "OwnerId": ...,
// "ImageOwnerAlias": ..., "Architecture": ..., "State": ...,
// "CreationDate": ..., "DeprecationTime": ..., "Tags": [{"Key": ...,
// "Value": ...}]}]}), with an optional "Parameters": [{"Name": ...,
// "Value": ...}] list for SSM. Unknown fields are ignored. Malformed input is
// an *Error matching ErrInvalidCatalog that names the offending path. Options
// as for NewCatalog.
func LoadCatalog(r io.Reader, opts ...Option) (*Catalog, error) {
	if r == nil {
		return nil, fieldError(ErrInvalidCatalog, "", "", "nil reader")
	}
	var out describeImagesOutput
	dec := json.NewDecoder(r)
	if err := dec.Decode(&out); err != nil {
		return nil, catalogJSONError(err)
	}
	if dec.More() {
		return nil, fieldError(ErrInvalidCatalog, "", "", fmt.Sprintf("trailing data after the JSON document at offset %d", dec.InputOffset()))
	}
	images := make([]Image, len(out.Images))
	for i, in := range out.Images {
		img := Image{
			ID:           in.ImageID,
			Name:         in.Name,
			OwnerID:      in.OwnerID,
			OwnerAlias:   in.ImageOwnerAlias,
			Architecture: in.Architecture,
			State:        in.State,
		}
		var err error
		if img.CreationDate, err = parseEC2Time(in.CreationDate); err != nil {
			return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].CreationDate", i), in.CreationDate, "not an RFC 3339 time")
		}
		if img.DeprecationTime, err = parseEC2Time(in.DeprecationTime); err != nil {
			return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].DeprecationTime", i), in.DeprecationTime, "not an RFC 3339 time")
		}
		if len(in.Tags) > 0 {
			img.Tags = make(map[string]string, len(in.Tags))
			for j, t := range in.Tags {
				if t.Key == nil {
					return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].Tags[%d].Key", i, j), "", "missing tag key")
				}
				if _, dup := img.Tags[*t.Key]; dup {
					return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Images[%d].Tags[%d].Key", i, j), *t.Key, "duplicate tag key")
				}
				v := ""
				if t.Value != nil {
					v = *t.Value
				}
				img.Tags[*t.Key] = v
			}
		}
		images[i] = img
	}
	c, err := NewCatalog(images, opts...)
	if err != nil {
		return nil, err
	}
	for i, p := range out.Parameters {
		if p.Name == "" {
			return nil, fieldError(ErrInvalidCatalog, fmt.Sprintf("Parameters[%d].Name", i), "", "missing parameter name")
		}
		c.params[p.Name] = p.Value
	}
	return c, nil
}

// parseEC2Time parses an EC2 time stamp ("2024-08-07T21:10:08.000Z", any
// RFC 3339 time); the empty string is the zero time.
func parseEC2Time(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339, s)
}

func catalogJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &Error{Kind: ErrInvalidCatalog, Index: -1, Path: fmt.Sprintf("offset %d", syn.Offset), Reason: syn.Error()}
	case errors.As(err, &typ):
		return &Error{Kind: ErrInvalidCatalog, Index: -1, Path: typ.Field, Field: typ.Field, Reason: fmt.Sprintf("expected %s, got JSON %s", typ.Type, typ.Value)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Kind: ErrInvalidCatalog, Index: -1, Reason: "truncated or empty JSON"}
	}
	return &Error{Kind: ErrInvalidCatalog, Index: -1, Reason: err.Error()}
}
