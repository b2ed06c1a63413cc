package amiselect

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Cache is an ImageSource that remembers another source's answers for a
// while: DescribeImages answers for a minute and SSM parameters for 24 hours
// (parameters under /aws/service/, the EKS-optimized ones) or 5 minutes
// (others), as Karpenter does; see WithCacheTTL. Concurrent misses for the
// same key share one call to the source. Errors are not cached. Expired
// entries are pruned a few at a time whenever a miss is stored, so a cache
// that sees ever-new keys does not grow without bound. It is safe for
// concurrent use.
//
// Because "latest" parameters are cached for a day, call InvalidateDeprecated
// periodically (Karpenter does every 30 minutes): it forgets cached "latest"
// parameters whose image has been deprecated, so a withdrawn release is
// dropped within that period rather than a day.
//
// Build one with NewCache. The zero value, or a Cache around a nil source,
// does not panic: every call returns an error matching ErrInvalidSource.
type Cache struct {
	src          ImageSource
	clock        clock.PassiveClock
	imageTTL     time.Duration
	parameterTTL func(string) time.Duration

	mu       sync.Mutex
	images   map[string]*entry[[]Image]
	params   map[string]*entry[string]
	inflight map[string]*call
}

type entry[T any] struct {
	value   T
	expires time.Time
}

type call struct {
	done    chan struct{}
	imgs    []Image
	val     string
	err     error
	waiters int // callers that joined the leader's call (read by tests)
}

// pruneBatch is how many cached entries storing a miss looks at, at most,
// to drop expired ones.
const pruneBatch = 16

// NewCache wraps src. Options: WithClock, WithCacheTTL. A nil src gives a
// Cache whose every call returns an error matching ErrInvalidSource.
func NewCache(src ImageSource, opts ...Option) *Cache {
	o := newOptions(opts)
	return &Cache{
		src:          src,
		clock:        o.clock,
		imageTTL:     o.imageTTL,
		parameterTTL: o.parameterTTL,
		images:       map[string]*entry[[]Image]{},
		params:       map[string]*entry[string]{},
		inflight:     map[string]*call{},
	}
}

func defaultParameterTTL(name string) time.Duration {
	if strings.HasPrefix(name, "/aws/service/") {
		return 24 * time.Hour
	}
	return 5 * time.Minute
}

// mutableParameter reports whether a parameter's value moves with releases
// ("latest" and "recommended" parameters).
func mutableParameter(name string) bool {
	return strings.Contains(name, "/recommended/") || strings.Contains(name, "/latest/") ||
		strings.HasPrefix(name, "/aws/service/ami-windows-latest/")
}

// now reads the clock, the real one for a zero Cache.
func (c *Cache) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

func (c *Cache) imageTTLOrDefault() time.Duration {
	if c.imageTTL <= 0 {
		return time.Minute
	}
	return c.imageTTL
}

func (c *Cache) parameterTTLFor(name string) time.Duration {
	if c.parameterTTL == nil {
		return defaultParameterTTL(name)
	}
	return c.parameterTTL(name)
}

// initLocked makes the maps of a zero Cache. c.mu must be held.
func (c *Cache) initLocked() {
	if c.images == nil {
		c.images = map[string]*entry[[]Image]{}
	}
	if c.params == nil {
		c.params = map[string]*entry[string]{}
	}
	if c.inflight == nil {
		c.inflight = map[string]*call{}
	}
}

// DescribeImages implements ImageSource. The returned slice is the caller's;
// the images' Tags maps are shared and must not be modified.
func (c *Cache) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	if isNilSource(c.src) {
		return nil, nilSourceError("Cache")
	}
	key := "i" + queryKey(q)
	for {
		c.mu.Lock()
		c.initLocked()
		if e, ok := c.images[key]; ok && c.now().Before(e.expires) {
			c.mu.Unlock()
			return append([]Image(nil), e.value...), nil
		}
		cl, leader := c.join(key)
		c.mu.Unlock()
		if leader {
			c.lead(key, cl, func() { cl.imgs, cl.err = c.src.DescribeImages(ctx, q) }, func(now time.Time) {
				c.images[key] = &entry[[]Image]{value: cl.imgs, expires: now.Add(c.imageTTLOrDefault())}
				pruneExpired(c.images, now)
			})
		} else if retry, err := wait(ctx, cl); retry {
			continue
		} else if err != nil {
			return nil, err
		}
		if cl.err != nil {
			return nil, cl.err
		}
		return append([]Image(nil), cl.imgs...), nil
	}
}

// GetParameter implements ImageSource.
func (c *Cache) GetParameter(ctx context.Context, name string) (string, error) {
	if isNilSource(c.src) {
		return "", nilSourceError("Cache")
	}
	key := "p" + name
	for {
		c.mu.Lock()
		c.initLocked()
		if e, ok := c.params[name]; ok && c.now().Before(e.expires) {
			c.mu.Unlock()
			return e.value, nil
		}
		cl, leader := c.join(key)
		c.mu.Unlock()
		if leader {
			c.lead(key, cl, func() { cl.val, cl.err = c.src.GetParameter(ctx, name) }, func(now time.Time) {
				c.params[name] = &entry[string]{value: cl.val, expires: now.Add(c.parameterTTLFor(name))}
				pruneExpired(c.params, now)
			})
		} else if retry, err := wait(ctx, cl); retry {
			continue
		} else if err != nil {
			return "", err
		}
		return cl.val, cl.err
	}
}

// lead runs fetch for the in-flight call cl, stores a successful answer with
// store (under c.mu), ends the call and wakes its waiters. If fetch panics,
// the waiters are released with an error matching ErrInvalidSource and the
// panic goes on up the leader's stack: it is the source's, not the cache's.
func (c *Cache) lead(key string, cl *call, fetch func(), store func(now time.Time)) {
	defer func() {
		if p := recover(); p != nil {
			cl.imgs, cl.val = nil, ""
			cl.err = &Error{Kind: ErrInvalidSource, Path: "src", Index: -1, Field: "src",
				Reason: fmt.Sprintf("the image source panicked while answering %q: %v", key, p)}
			c.finish(key, cl, nil)
			panic(p)
		}
	}()
	fetch()
	c.finish(key, cl, store)
}

// finish stores a successful call's answer with store, ends the call and
// wakes its waiters.
func (c *Cache) finish(key string, cl *call, store func(now time.Time)) {
	c.mu.Lock()
	if cl.err == nil && store != nil {
		store(c.now())
	}
	delete(c.inflight, key)
	c.mu.Unlock()
	close(cl.done)
}

// pruneExpired drops expired entries among at most pruneBatch entries of m
// (Go's map order starts at a random place, so over many stores every entry
// is visited). c.mu must be held.
func pruneExpired[T any](m map[string]*entry[T], now time.Time) {
	n := 0
	for k, e := range m {
		if !now.Before(e.expires) {
			delete(m, k)
		}
		if n++; n >= pruneBatch {
			return
		}
	}
}

// join returns the in-flight call for key, creating it (leader) if there is
// none. c.mu must be held.
func (c *Cache) join(key string) (*call, bool) {
	if cl, ok := c.inflight[key]; ok {
		cl.waiters++
		return cl, false
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[key] = cl
	return cl, true
}

// wait waits for another caller's call. retry is true when that call failed
// only because its own context ended while ours has not: then this caller
// tries again rather than inherit someone else's cancellation.
func wait(ctx context.Context, cl *call) (retry bool, err error) {
	select {
	case <-cl.done:
		ctxErr := errors.Is(cl.err, context.Canceled) || errors.Is(cl.err, context.DeadlineExceeded)
		return ctxErr && ctx.Err() == nil, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// InvalidateDeprecated forgets cached "latest"/"recommended" SSM parameters
// whose image is deprecated now, so the next GetParameter asks the source
// again, and returns how many it forgot. It asks the underlying source about
// those images in one query (deprecated images included).
func (c *Cache) InvalidateDeprecated(ctx context.Context) (int, error) {
	if isNilSource(c.src) {
		return 0, nilSourceError("Cache")
	}
	c.mu.Lock()
	byImage := map[string][]string{}
	var ids []string
	for name, e := range c.params {
		if !mutableParameter(name) || !strings.HasPrefix(e.value, "ami-") {
			continue
		}
		if _, ok := byImage[e.value]; !ok {
			ids = append(ids, e.value)
		}
		byImage[e.value] = append(byImage[e.value], name)
	}
	c.mu.Unlock()
	if len(ids) == 0 {
		return 0, nil
	}
	sort.Strings(ids)
	imgs, err := c.src.DescribeImages(ctx, Query{Filters: []Filter{{Name: "image-id", Values: ids}}, IncludeDeprecated: true})
	if err != nil {
		return 0, err
	}
	now := c.now()
	n := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range imgs {
		if !imgs[i].Deprecated(now) {
			continue
		}
		for _, name := range byImage[imgs[i].ID] {
			if e, ok := c.params[name]; ok && e.value == imgs[i].ID {
				delete(c.params, name)
				n++
			}
		}
	}
	return n, nil
}

// queryKey is a canonical string for q: owners, filters and values sorted,
// each string length-prefixed so that no two different queries share a key
// (["a\x00b"] and ["a", "b"] are different values lists).
func queryKey(q Query) string {
	var b strings.Builder
	owners := append([]string(nil), q.Owners...)
	sort.Strings(owners)
	writeParts(&b, owners)
	filters := make([]string, 0, len(q.Filters))
	var fb strings.Builder
	for _, f := range q.Filters {
		fb.Reset()
		writePart(&fb, f.Name)
		vals := append([]string(nil), f.Values...)
		sort.Strings(vals)
		writeParts(&fb, vals)
		filters = append(filters, fb.String())
	}
	sort.Strings(filters)
	// Each encoded filter is self-delimiting, so sorting and concatenating
	// them keeps the key unambiguous.
	b.WriteString(strconv.Itoa(len(filters)))
	b.WriteByte('#')
	for _, f := range filters {
		b.WriteString(f)
	}
	if q.IncludeDeprecated {
		b.WriteByte('d')
	} else {
		b.WriteByte('-')
	}
	return b.String()
}

// writeParts writes a count then each string length-prefixed.
func writeParts(b *strings.Builder, parts []string) {
	b.WriteString(strconv.Itoa(len(parts)))
	b.WriteByte('#')
	for _, p := range parts {
		writePart(b, p)
	}
}

// writePart writes one string as "<len>:<bytes>".
func writePart(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}
