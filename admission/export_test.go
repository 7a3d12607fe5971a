package admission

import "context"

// AdmitQueue reports, for tests, how many Admit calls for activity wait in the store's group
// admission queue and how many script calls for it are in flight.
func (s *RedisStore) AdmitQueue(activity string) (pending, inFlight int) {
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

// Transfer runs one stock transfer between buckets of a split activity, for tests.
func (s *RedisStore) Transfer(ctx context.Context, activity string, from, to int, qty int64) (int64, error) {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		return 0, err
	}
	return s.transfer(ctx, activity, n, from, to, qty)
}

// RecoverTransfers completes every pending transfer of a split activity, however young, for tests.
func (s *RedisStore) RecoverTransfers(ctx context.Context, activity string) error {
	n, err := s.bucketCount(ctx, activity)
	if err != nil {
		return err
	}
	_, err = s.recoverTransfers(ctx, activity, n, 0)
	return err
}
