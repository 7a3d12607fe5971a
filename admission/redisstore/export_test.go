package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// AdmitQueue reports, for tests, how many Admit calls for activity wait in the store's group
// admission queue and how many script calls for it are in flight.
func (s *Store) AdmitQueue(activity string) (pending, inFlight int) {
	if s.groups == nil {
		return 0, 0
	}
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	if q := s.groups.queues[activity]; q != nil {
		return len(q.pending), q.inFlight
	}
	return 0, 0
}

// CountAdmitPipelines makes the store count, for tests, its pipelines of grouped script calls
// and the most activities one of them carried; call it before the store is used.
func (s *Store) CountAdmitPipelines() (pipelines, widest *atomic.Int64) {
	pipelines, widest = new(atomic.Int64), new(atomic.Int64)
	run := s.groups.run
	s.groups.run = func(ctx context.Context, batches []admitBatch) {
		pipelines.Add(1)
		for n := int64(len(batches)); ; {
			if w := widest.Load(); n <= w || widest.CompareAndSwap(w, n) {
				break
			}
		}
		run(ctx, batches)
	}
	return pipelines, widest
}

// Transfer runs one stock transfer between buckets of a split activity, for tests.
func (s *Store) Transfer(ctx context.Context, activity string, from, to int, qty int64) (int64, error) {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		return 0, err
	}
	return s.transfer(ctx, activity, n, from, to, qty)
}

// RecoverTransfers completes every pending transfer of a split activity, however young, for tests.
func (s *Store) RecoverTransfers(ctx context.Context, activity string) error {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		return err
	}
	_, err = s.recoverTransfers(ctx, activity, n, 0)
	return err
}

// HalfTransfer records a transfer between buckets of a split activity and runs only its take, as
// a runner that died after the take (or whose give failed on a failover) leaves it, for tests.
func (s *Store) HalfTransfer(ctx context.Context, activity string, from, to int, qty int64) error {
	_, err := s.TransferInHalves(ctx, activity, from, to, qty)
	return err
}

// TransferInHalves records a transfer between buckets of a split activity, runs its take and
// returns the rest (the give and the finish), for tests that put something between the two.
func (s *Store) TransferInHalves(ctx context.Context, activity string, from, to int, qty int64) (rest func() error, err error) {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		return nil, err
	}
	id := admission.NewSalt()[:16]
	gen, err := scriptBucketIntent.Run(ctx, s.client, []string{s.key(activity, "meta"), s.intentsKey(activity)},
		id, from, to, qty, time.Now().UnixMilli()).Text()
	if err != nil {
		return nil, redisScriptErr(err)
	}
	b := bucketID(activity, from, n)
	cmd, err := s.transferStep(ctx, scriptBucketTake, luaBucketTake,
		[]string{s.key(b, "meta"), s.key(b, "stock"), s.transferLogKey(b)}, id, qty, gen)
	if err != nil {
		return nil, err
	}
	q, err := cmd.Int64()
	if err != nil {
		return nil, err
	}
	return func() error {
		_, err := s.runTransfer(ctx, activity, n, id, gen, -1, to, q)
		return err
	}, nil
}

// SetAfterPull makes f run after every pull that moved stock into an admission's home bucket,
// before the admission tries again, for tests that make it lose the race for that stock. Set it
// before the store is used concurrently.
func (s *Store) SetAfterPull(f func(activity string, home int)) { s.afterPull = f }

// AdmitScript returns the admission script (admit.lua) and its KEYS for activity, for benchmarks
// that call it directly.
func (s *Store) AdmitScript(activity string) (src string, keys []string) {
	return luaAdmit, s.admitKeys(activity)
}
