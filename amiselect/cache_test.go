package amiselect

import (
	"context"
	"errors"
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
