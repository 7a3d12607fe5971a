package admission

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
