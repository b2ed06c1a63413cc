package amiselect

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Cache is an ImageSource that remembers another source's answers for a
// while: DescribeImages answers for a minute and SSM parameters for 24 hours
// (parameters under /aws/service/, the EKS-optimized ones) or 5 minutes
// (others), as Karpenter does; see WithCacheTTL. Concurrent misses for the
// same key share one call to the source. Errors are not cached. It is safe
// for concurrent use.
//
// Because "latest" parameters are cached for a day, call InvalidateDeprecated
// periodically (Karpenter does every 30 minutes): it forgets cached "latest"
// parameters whose image has been deprecated, so a withdrawn release is
// dropped within that period rather than a day.
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
	done chan struct{}
	imgs []Image
	val  string
	err  error
}

// NewCache wraps src. Options: WithClock, WithCacheTTL.
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

// DescribeImages implements ImageSource. The returned slice is the caller's;
// the images' Tags maps are shared and must not be modified.
func (c *Cache) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	key := "i\x00" + queryKey(q)
	for {
		c.mu.Lock()
		if e, ok := c.images[key]; ok && c.clock.Now().Before(e.expires) {
			c.mu.Unlock()
			return append([]Image(nil), e.value...), nil
		}
		cl, leader := c.join(key)
		c.mu.Unlock()
		if leader {
			cl.imgs, cl.err = c.src.DescribeImages(ctx, q)
			c.finish(key, cl, func() {
				c.images[key] = &entry[[]Image]{value: cl.imgs, expires: c.clock.Now().Add(c.imageTTL)}
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
	key := "p\x00" + name
	for {
		c.mu.Lock()
		if e, ok := c.params[name]; ok && c.clock.Now().Before(e.expires) {
			c.mu.Unlock()
			return e.value, nil
		}
		cl, leader := c.join(key)
		c.mu.Unlock()
		if leader {
			cl.val, cl.err = c.src.GetParameter(ctx, name)
			c.finish(key, cl, func() {
				c.params[name] = &entry[string]{value: cl.val, expires: c.clock.Now().Add(c.parameterTTL(name))}
			})
		} else if retry, err := wait(ctx, cl); retry {
			continue
		} else if err != nil {
			return "", err
		}
		return cl.val, cl.err
	}
}

// finish stores a successful call's answer with store, ends the call and
// wakes its waiters.
func (c *Cache) finish(key string, cl *call, store func()) {
	c.mu.Lock()
	if cl.err == nil {
		store()
	}
	delete(c.inflight, key)
	c.mu.Unlock()
	close(cl.done)
}

// join returns the in-flight call for key, creating it (leader) if there is
// none. c.mu must be held.
func (c *Cache) join(key string) (*call, bool) {
	if cl, ok := c.inflight[key]; ok {
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
	now := c.clock.Now()
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

// queryKey is a canonical string for q: owners, filters and values sorted.
func queryKey(q Query) string {
	var b strings.Builder
	owners := append([]string(nil), q.Owners...)
	sort.Strings(owners)
	for _, o := range owners {
		b.WriteString(o)
		b.WriteByte(0)
	}
	b.WriteByte(1)
	filters := make([]string, 0, len(q.Filters))
	for _, f := range q.Filters {
		vals := append([]string(nil), f.Values...)
		sort.Strings(vals)
		filters = append(filters, f.Name+"\x02"+strings.Join(vals, "\x00"))
	}
	sort.Strings(filters)
	b.WriteString(strings.Join(filters, "\x01"))
	if q.IncludeDeprecated {
		b.WriteString("\x01deprecated")
	}
	return b.String()
}
