package amiselect

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// countingSource counts calls to the source underneath a Cache.
type countingSource struct {
	ImageSource
	describes, params atomic.Int32
	gate              chan struct{} // when set, calls wait on it
}

func (s *countingSource) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	s.describes.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	return s.ImageSource.DescribeImages(ctx, q)
}

func (s *countingSource) GetParameter(ctx context.Context, name string) (string, error) {
	s.params.Add(1)
	return s.ImageSource.GetParameter(ctx, name)
}

func TestCacheTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(day(30))
	cat := newTestCatalog(t, img("ami-1", "a", day(1)), img("ami-2", "b", day(2)))
	cat.SetParameter("/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", "ami-1")
	cat.SetParameter("/custom/ami", "ami-2")
	src := &countingSource{ImageSource: cat}
	c := NewCache(src, WithClock(clk))
	ctx := context.Background()
	q := Query{Filters: []Filter{{Name: "image-id", Values: []string{"ami-1", "ami-2"}}}}

	for i := 0; i < 3; i++ {
		imgs, err := c.DescribeImages(ctx, q)
		require.NoError(t, err)
		require.Len(t, imgs, 2)
	}
	require.EqualValues(t, 1, src.describes.Load())
	// The same query with values and filters in another order is the same key.
	_, err := c.DescribeImages(ctx, Query{Filters: []Filter{{Name: "image-id", Values: []string{"ami-2", "ami-1"}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, src.describes.Load())
	clk.Step(time.Minute)
	_, err = c.DescribeImages(ctx, q)
	require.NoError(t, err)
	require.EqualValues(t, 2, src.describes.Load(), "image answers expire after a minute")

	eks := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
	for _, name := range []string{eks, "/custom/ami", eks, "/custom/ami"} {
		_, err := c.GetParameter(ctx, name)
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, src.params.Load())
	clk.Step(5 * time.Minute)
	_, _ = c.GetParameter(ctx, eks)
	_, _ = c.GetParameter(ctx, "/custom/ami")
	require.EqualValues(t, 3, src.params.Load(), "custom parameters expire after 5 minutes, EKS ones do not")
	clk.Step(24 * time.Hour)
	_, _ = c.GetParameter(ctx, eks)
	require.EqualValues(t, 4, src.params.Load(), "EKS parameters expire after 24 hours")

	// Errors are not cached.
	_, err = c.GetParameter(ctx, "/missing")
	require.ErrorIs(t, err, ErrParameterNotFound)
	_, err = c.GetParameter(ctx, "/missing")
	require.ErrorIs(t, err, ErrParameterNotFound)
	require.EqualValues(t, 6, src.params.Load())
}

func TestCacheTTLOption(t *testing.T) {
	clk := clocktesting.NewFakeClock(day(30))
	cat := newTestCatalog(t)
	cat.SetParameter("/custom/ami", "ami-2")
	src := &countingSource{ImageSource: cat}
	c := NewCache(src, WithClock(clk), WithCacheTTL(time.Second, time.Hour))
	_, _ = c.GetParameter(context.Background(), "/custom/ami")
	clk.Step(30 * time.Minute)
	_, _ = c.GetParameter(context.Background(), "/custom/ami")
	require.EqualValues(t, 1, src.params.Load())
}

func TestCacheInvalidateDeprecated(t *testing.T) {
	clk := clocktesting.NewFakeClock(day(30))
	latest := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
	pinned := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v1/image_id"
	cat := newTestCatalog(t, img("ami-bad", "regressed", day(29), deprecatedAt(day(30).Add(time.Hour))), img("ami-good", "fixed", day(30).Add(time.Hour)))
	cat.SetParameter(latest, "ami-bad")
	cat.SetParameter(pinned, "ami-bad")
	src := &countingSource{ImageSource: cat}
	c := NewCache(src, WithClock(clk))
	ctx := context.Background()
	v, _ := c.GetParameter(ctx, latest)
	require.Equal(t, "ami-bad", v)
	_, _ = c.GetParameter(ctx, pinned)

	n, err := c.InvalidateDeprecated(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not deprecated yet")

	// AWS withdraws the release: the image is deprecated and the parameter moves on.
	clk.Step(2 * time.Hour)
	cat.SetParameter(latest, "ami-good")
	v, _ = c.GetParameter(ctx, latest)
	require.Equal(t, "ami-bad", v, "still cached: the 24h TTL has not run out")
	n, err = c.InvalidateDeprecated(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the mutable 'recommended' parameter is invalidated")
	v, _ = c.GetParameter(ctx, latest)
	require.Equal(t, "ami-good", v)

	// Source errors come back.
	boom := errors.New("boom")
	c2 := NewCache(SourceFuncs{
		Parameter: func(context.Context, string) (string, error) { return "ami-1", nil },
		Describe:  func(context.Context, Query) ([]Image, error) { return nil, boom },
	})
	_, _ = c2.GetParameter(ctx, latest)
	_, err = c2.InvalidateDeprecated(ctx)
	require.ErrorIs(t, err, boom)
}

func TestCacheConcurrentMissesShareOneCall(t *testing.T) {
	cat := newTestCatalog(t, img("ami-1", "a", day(1)))
	src := &countingSource{ImageSource: cat, gate: make(chan struct{})}
	c := NewCache(src)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgs, err := c.DescribeImages(context.Background(), Query{})
			if err == nil && len(imgs) != 1 {
				err = errors.New("wrong answer")
			}
			errs <- err
		}()
	}
	// Let the leader through once every goroutine has had the chance to join.
	require.Eventually(t, func() bool { return src.describes.Load() >= 1 }, time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	close(src.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, src.describes.Load())
}

func TestCacheWaiterHonoursContext(t *testing.T) {
	cat := newTestCatalog(t)
	src := &countingSource{ImageSource: cat, gate: make(chan struct{})}
	c := NewCache(src)
	go func() { _, _ = c.DescribeImages(context.Background(), Query{}) }()
	require.Eventually(t, func() bool { return src.describes.Load() == 1 }, time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.DescribeImages(ctx, Query{})
	require.ErrorIs(t, err, context.Canceled)
	close(src.gate)
}

func TestCacheResolveUnderRace(t *testing.T) {
	c := NewCache(aliasCatalog(t))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Resolve(context.Background(), c, []Term{{Alias: "al2023@latest"}}, WithKubernetesVersion("1.31"), WithClock(clocktesting.NewFakePassiveClock(day(30))))
			if err != nil || len(res.Images) != 5 {
				t.Errorf("resolve: %v", err)
			}
		}()
	}
	wg.Wait()
}

// A waiter does not inherit the leader's cancellation: it asks again.
func TestCacheWaiterRetriesAfterLeaderCancelled(t *testing.T) {
	cat := newTestCatalog(t, img("ami-1", "a", day(1)))
	src := &countingSource{ImageSource: cat, gate: make(chan struct{})}
	c := NewCache(src)
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := c.DescribeImages(leaderCtx, Query{})
		leaderErr <- err
	}()
	require.Eventually(t, func() bool { return src.describes.Load() == 1 }, time.Second, time.Millisecond)
	waiterDone := make(chan []Image, 1)
	go func() {
		imgs, err := c.DescribeImages(context.Background(), Query{})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiterDone <- imgs
	}()
	time.Sleep(10 * time.Millisecond) // let the waiter join the leader's call
	cancelLeader()
	close(src.gate) // the leader's call now fails with its cancelled context
	require.ErrorIs(t, <-leaderErr, context.Canceled)
	require.Len(t, <-waiterDone, 1)
	require.EqualValues(t, 2, src.describes.Load())
}

// A source that panics must not strand callers waiting on its answer: they
// get an error, and the panic still reaches the leader.
func TestCacheSourcePanicReleasesWaiters(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	src := SourceFuncs{
		Describe: func(context.Context, Query) ([]Image, error) {
			close(entered)
			<-release
			panic("boom")
		},
		Parameter: func(context.Context, string) (string, error) {
			close(entered)
			<-release
			panic("boom")
		},
	}
	for _, kind := range []string{"describe", "parameter"} {
		t.Run(kind, func(t *testing.T) {
			entered, release = make(chan struct{}), make(chan struct{})
			c := NewCache(src)
			call := func(ctx context.Context) error {
				if kind == "describe" {
					_, err := c.DescribeImages(ctx, Query{Owners: []string{"self"}})
					return err
				}
				_, err := c.GetParameter(ctx, "/p")
				return err
			}
			recovered := make(chan any, 1)
			go func() {
				defer func() { recovered <- recover() }()
				_ = call(context.Background())
			}()
			<-entered
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			waiterErr := make(chan error, 1)
			go func() { waiterErr <- call(ctx) }()
			require.Eventually(t, func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, cl := range c.inflight {
					if cl.waiters > 0 {
						return true
					}
				}
				return false
			}, 5*time.Second, time.Millisecond)
			close(release)
			require.Equal(t, "boom", <-recovered, "the panic goes on up the leader's stack")
			err := <-waiterErr
			require.ErrorIs(t, err, ErrInvalidSource)
			require.Contains(t, err.Error(), "panicked")
			require.NoError(t, ctx.Err(), "the waiter was released by the panic, not by its deadline")
			c.mu.Lock()
			require.Empty(t, c.inflight)
			c.mu.Unlock()
		})
	}
}

func TestCacheZeroValueAndNilSource(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*Cache{"zero": {}, "NewCache(nil)": NewCache(nil)} {
		t.Run(name, func(t *testing.T) {
			_, err := c.DescribeImages(ctx, Query{})
			require.ErrorIs(t, err, ErrInvalidSource)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, "src", e.Path)
			_, err = c.GetParameter(ctx, "/p")
			require.ErrorIs(t, err, ErrInvalidSource)
			_, err = c.InvalidateDeprecated(ctx)
			require.ErrorIs(t, err, ErrInvalidSource)
		})
	}
	// A literal with only a source caches with the defaults.
	cat := newTestCatalog(t, img("ami-1", "a", day(1)))
	cat.SetParameter("/p", "ami-1")
	src := &countingSource{ImageSource: cat}
	c := &Cache{src: src}
	for i := 0; i < 2; i++ {
		imgs, err := c.DescribeImages(ctx, Query{})
		require.NoError(t, err)
		require.Len(t, imgs, 1)
		v, err := c.GetParameter(ctx, "/p")
		require.NoError(t, err)
		require.Equal(t, "ami-1", v)
	}
	require.EqualValues(t, 1, src.describes.Load())
	require.EqualValues(t, 1, src.params.Load())
}

func TestQueryKeyIsUnambiguous(t *testing.T) {
	pairs := []struct {
		name string
		a, b Query
	}{
		{"owners", Query{Owners: []string{"a\x00b"}}, Query{Owners: []string{"a", "b"}}},
		{"values", Query{Filters: []Filter{{Name: "name", Values: []string{"a\x00b"}}}}, Query{Filters: []Filter{{Name: "name", Values: []string{"a", "b"}}}}},
		{"filter name and value", Query{Filters: []Filter{{Name: "a\x02b", Values: []string{"c"}}}}, Query{Filters: []Filter{{Name: "a", Values: []string{"b\x02c"}}}}},
		{"filters", Query{Filters: []Filter{{Name: "n", Values: []string{"a\x01n\x02b"}}}}, Query{Filters: []Filter{{Name: "n", Values: []string{"a"}}, {Name: "n", Values: []string{"b"}}}}},
		{"owners and filters", Query{Owners: []string{"\x01name\x02x"}}, Query{Filters: []Filter{{Name: "name", Values: []string{"x"}}}}},
		{"deprecated", Query{Owners: []string{"x\x01deprecated"}}, Query{Owners: []string{"x"}, IncludeDeprecated: true}},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			require.NotEqual(t, queryKey(p.a), queryKey(p.b))
		})
	}
	// Order still does not matter.
	require.Equal(t,
		queryKey(Query{Owners: []string{"b", "a"}, Filters: []Filter{{Name: "y", Values: []string{"2", "1"}}, {Name: "x"}}}),
		queryKey(Query{Owners: []string{"a", "b"}, Filters: []Filter{{Name: "x"}, {Name: "y", Values: []string{"1", "2"}}}}))

	// Through the cache: colliding keys would answer the second query
	// from the first one's entry.
	var calls atomic.Int32
	c := NewCache(SourceFuncs{Describe: func(_ context.Context, q Query) ([]Image, error) {
		calls.Add(1)
		return []Image{{ID: "ami-" + string(rune('a'+len(q.Owners)))}}, nil
	}})
	a, err := c.DescribeImages(context.Background(), Query{Owners: []string{"a\x00b"}})
	require.NoError(t, err)
	b, err := c.DescribeImages(context.Background(), Query{Owners: []string{"a", "b"}})
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
	require.NotEqual(t, a[0].ID, b[0].ID)
}

func TestCachePrunesExpiredEntries(t *testing.T) {
	clk := clocktesting.NewFakeClock(day(30))
	src := SourceFuncs{
		Describe:  func(context.Context, Query) ([]Image, error) { return nil, nil },
		Parameter: func(_ context.Context, name string) (string, error) { return "ami-" + name, nil },
	}
	c := NewCache(src, WithClock(clk), WithCacheTTL(time.Second, time.Second))
	ctx := context.Background()
	for i := 0; i < pruneBatch/2; i++ {
		_, err := c.DescribeImages(ctx, Query{Owners: []string{string(rune('a' + i))}})
		require.NoError(t, err)
		_, err = c.GetParameter(ctx, string(rune('a'+i)))
		require.NoError(t, err)
	}
	require.Len(t, c.images, pruneBatch/2)
	require.Len(t, c.params, pruneBatch/2)
	clk.Step(2 * time.Second)
	_, err := c.DescribeImages(ctx, Query{Owners: []string{"new"}})
	require.NoError(t, err)
	_, err = c.GetParameter(ctx, "new")
	require.NoError(t, err)
	require.Len(t, c.images, 1, "storing a miss dropped the expired image answers")
	require.Len(t, c.params, 1, "storing a miss dropped the expired parameters")

	// Work per store is bounded: a big cache is pruned a batch at a time.
	for i := 0; i < 10*pruneBatch; i++ {
		_, err := c.GetParameter(ctx, "bulk"+strconv.Itoa(i))
		require.NoError(t, err)
	}
	clk.Step(2 * time.Second)
	_, err = c.GetParameter(ctx, "one-more")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(c.params), 10*pruneBatch+2-pruneBatch)
}
