package localstore

import (
	"context"
	"fmt"
	"sync"
)

// restockSub is one Restocks subscription. Release only marks the activity in pending and pokes
// notify, so a slow subscriber never blocks it; the subscriber's own goroutine delivers. Restocks
// of one activity that pile up while the subscriber is busy are coalesced into one delivery: a
// restock says "look again", and one look is enough. Nothing is dropped, and memory stays bounded
// by the number of activities.
type restockSub struct {
	mu      sync.Mutex
	pending map[string]struct{}
	notify  chan struct{} // capacity 1: a pending wake-up is never lost, never doubled
}

// Restocks implements Store. The channel is closed when ctx is done or the store is closed.
func (s *Memory) Restocks(ctx context.Context) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("restocks: %w", err)
	}
	sub := &restockSub{pending: make(map[string]struct{}), notify: make(chan struct{}, 1)}
	s.subsMu.Lock()
	if s.closed.Load() {
		s.subsMu.Unlock()
		return nil, errMemoryClosed
	}
	s.subs[sub] = struct{}{}
	s.subsMu.Unlock()

	out := make(chan string)
	go func() {
		defer close(out)
		defer func() {
			s.subsMu.Lock()
			delete(s.subs, sub)
			s.subsMu.Unlock()
		}()
		for {
			select {
			case <-sub.notify:
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
			sub.mu.Lock()
			batch := sub.pending
			sub.pending = make(map[string]struct{}, len(batch))
			sub.mu.Unlock()
			for id := range batch {
				select {
				case out <- id:
				case <-ctx.Done():
					return
				case <-s.done:
					return
				}
			}
		}
	}()
	return out, nil
}

// publish announces a restock of activity to every subscriber without waiting for any of them.
func (s *Memory) publish(activity string) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for sub := range s.subs {
		sub.mu.Lock()
		sub.pending[activity] = struct{}{}
		sub.mu.Unlock()
		select {
		case sub.notify <- struct{}{}:
		default: // a wake-up is already pending and will see this activity too
		}
	}
}
