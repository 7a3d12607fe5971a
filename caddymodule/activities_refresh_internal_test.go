package caddymodule

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

// slowListing is a real store whose Activities answer is held back until release is closed, as
// a loaded store answers late: it lists the store as it was when asked.
type slowListing struct {
	admission.Store
	listed  chan struct{} // closed once the listing is read
	release chan struct{}
}

func (s *slowListing) Activities(ctx context.Context) ([]string, error) {
	ids, err := s.Store.Activities(ctx)
	close(s.listed)
	<-s.release
	return ids, err
}

// TestRefreshKeepsNewerDefinitions: a refresh that read the store before a definition (the app's
// start defining its activities while a request's miss refreshes, or the admin API during the
// periodic refresh) must not install its older view over it. It did: the activity defined
// meanwhile answered 404 until the next refresh (a seckill-bench run's status of bench-1 after
// every activity had answered), and a redefinition's old window came back.
func TestRefreshKeepsNewerDefinitions(t *testing.T) {
	ctx := context.Background()
	mem := localstore.NewMemory(localstore.MemoryOptions{})
	t.Cleanup(func() { _ = mem.Close() })
	now := time.Now()
	define := func(id string, start time.Time) admission.Activity {
		t.Helper()
		a, err := mem.Define(ctx, admission.Activity{ID: id, Stock: 5, Limit: 1, Start: start, End: now.Add(48 * time.Hour)}, true)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	moved := define("moved", now.Add(24*time.Hour))
	define("gone", now.Add(time.Hour))
	store := &slowListing{Store: mem}
	c := newActivities(store, nil)
	refresh := func(during func()) {
		t.Helper()
		store.listed, store.release = make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- c.refresh(ctx) }()
		<-store.listed
		during()
		close(store.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.refreshMu.Lock()
		c.refreshed = time.Time{} // the next refresh runs at once
		c.refreshMu.Unlock()
	}
	refresh(func() {})
	if _, ok := c.lookup("moved"); !ok {
		t.Fatal("the first refresh missed an activity")
	}

	refresh(func() {
		c.put(define("fresh", now))                  // the app's start, or the admin API
		c.put(define("moved", now.Add(time.Second))) // the bench moving a start
		if err := mem.Delete(ctx, "gone", true); err != nil {
			t.Fatal(err)
		}
		c.forget("gone")
	})
	if _, ok := c.lookup("fresh"); !ok {
		t.Error("an activity defined during a refresh is unknown after it")
	}
	if a, _ := c.lookup("moved"); !a.Start.Before(moved.Start) {
		t.Errorf("a redefinition during a refresh was undone: start %v, want the new one", a.Start)
	}
	if _, ok := c.lookup("gone"); ok {
		t.Error("an activity deleted during a refresh is back after it")
	}

	// The next refresh reads all three from the store and no longer needs the marks.
	refresh(func() {})
	if _, ok := c.lookup("fresh"); !ok {
		t.Error("fresh unknown after a later refresh")
	}
	c.mu.RLock()
	marks := len(c.changed)
	c.mu.RUnlock()
	if marks != 0 {
		t.Errorf("%d change marks left after a refresh that saw them all", marks)
	}
}
