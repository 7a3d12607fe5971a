package captcha

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMaxIDs bounds a memory store whose maxIDs is not positive. A captcha of the default
// 400x160 holds about 3 KB, its PNG included, so the default costs at most about 150 MB.
const DefaultMaxIDs = 50_000

// memoryStore keeps captchas in a map, oldest first in a list: expired captchas are dropped from
// the front when new ones arrive, and when the store is full the oldest captcha is evicted.
type memoryStore struct {
	mu    sync.Mutex
	max   int
	items map[string]*list.Element // of *memItem
	order *list.List
}

type memItem struct {
	id      string
	c       Challenge
	expires time.Time
	fetches int64
}

// NewMemoryStore returns a Store for a single node holding at most maxIDs captchas (the oldest is
// evicted first when full); maxIDs <= 0 means DefaultMaxIDs.
func NewMemoryStore(maxIDs int) Store {
	if maxIDs <= 0 {
		maxIDs = DefaultMaxIDs
	}
	return &memoryStore{max: maxIDs, items: make(map[string]*list.Element), order: list.New()}
}

func (s *memoryStore) Put(_ context.Context, id string, c Challenge, ttl time.Duration) error {
	if !validID(id) {
		return fmt.Errorf("put captcha %q: invalid id", id)
	}
	if ttl <= 0 {
		return fmt.Errorf("put captcha %s: ttl %v is not positive", id, ttl)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.items[id]; ok {
		s.remove(e)
	}
	for e := s.order.Front(); e != nil && (len(s.items) >= s.max || !now.Before(e.Value.(*memItem).expires)); e = s.order.Front() {
		s.remove(e)
	}
	s.items[id] = s.order.PushBack(&memItem{id: id, c: clone(c), expires: now.Add(ttl)})
	return nil
}

func (s *memoryStore) Take(_ context.Context, id string, owner Owner) (Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.get(id)
	if err != nil {
		return Challenge{}, err
	}
	if it.c.owner() != owner {
		return Challenge{}, ErrNotFound
	}
	s.remove(s.items[id])
	return Challenge{User: it.c.User, Activity: it.c.Activity, Digits: it.c.Digits}, nil
}

func (s *memoryStore) Peek(_ context.Context, id string) (Challenge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.get(id)
	if err != nil {
		return Challenge{}, err
	}
	return clone(it.c), nil
}

func (s *memoryStore) CountFetch(_ context.Context, id string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, err := s.get(id)
	if err != nil {
		return 0, err
	}
	it.fetches++
	return it.fetches, nil
}

// get returns a live item, dropping it when it has expired. s.mu must be held.
func (s *memoryStore) get(id string) (*memItem, error) {
	e, ok := s.items[id]
	if !ok {
		return nil, ErrNotFound
	}
	it := e.Value.(*memItem)
	if !time.Now().Before(it.expires) {
		s.remove(e)
		return nil, ErrNotFound
	}
	return it, nil
}

func (s *memoryStore) remove(e *list.Element) {
	delete(s.items, e.Value.(*memItem).id)
	s.order.Remove(e)
}

// clone copies c so that callers cannot change what the store holds.
func clone(c Challenge) Challenge {
	c.Digits = append([]byte(nil), c.Digits...)
	c.PNG = append([]byte(nil), c.PNG...)
	return c
}
