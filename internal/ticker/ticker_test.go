package ticker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery: fn runs again and again, and never after Every has returned.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if calls.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("Every did not return a minute after its third call's cancel (%d calls)", calls.Load())
	}
	after := calls.Load()
	if after < 3 {
		t.Fatalf("Every returned after %d calls, before ctx was done", after)
	}
	time.Sleep(10 * time.Millisecond)
	if n := calls.Load(); n != after {
		t.Fatalf("fn ran %d more times after Every returned", n-after)
	}
}

// TestEveryDoneContext: a context already done returns at once, without a call.
func TestEveryDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, time.Hour, func() { t.Error("fn ran on a done context") })
}
