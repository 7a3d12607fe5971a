package linetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// proofSpender is the spent set of a waiting room's proofs of work (package waitroom), a role a
// store with a line may also play; the gateway asks it when proof_of_work is on.
type proofSpender interface {
	SpendProof(ctx context.Context, activity, id string, until time.Time) (bool, error)
}

// testSpentProofs: an answer is spent once, across many goroutines; the set is per activity and
// per challenge id; bad ids change nothing.
func testSpentProofs(t *testing.T, s Store) {
	sp, ok := s.(proofSpender)
	if !ok {
		t.Skip("the store keeps no spent set of proofs of work (proof_of_work is refused with it)")
	}
	ctx := context.Background()
	define(t, s, "a", time.Now().Add(time.Hour), false)
	define(t, s, "b", time.Now().Add(time.Hour), false)
	until := time.Now().Add(time.Minute)

	const ids, workers = 20, 16
	var firsts [ids]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("challenge-%d", (i+w)%ids)
				fresh, err := sp.SpendProof(ctx, "a", id, until)
				if err != nil {
					errs <- err
					return
				}
				if fresh {
					firsts[(i+w)%ids].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("spend: %v", err)
	}
	for i := range firsts {
		if n := firsts[i].Load(); n != 1 {
			t.Fatalf("challenge-%d: spent first %d times by %d goroutines, want once", i, n, workers)
		}
	}
	if fresh, err := sp.SpendProof(ctx, "b", "challenge-0", until); err != nil || !fresh {
		t.Fatalf("the same id in another activity: %v, %v; want a first spend", fresh, err)
	}
	if fresh, err := sp.SpendProof(ctx, "a", "challenge-0", until); err != nil || fresh {
		t.Fatalf("a spent id again: %v, %v; want spent", fresh, err)
	}
	for _, bad := range []struct{ act, id string }{{"a", ""}, {"a b", "x"}, {"a", string(make([]byte, 65))}} {
		if _, err := sp.SpendProof(ctx, bad.act, bad.id, until); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("spend %q %q: %v, want ErrBadInput", bad.act, bad.id, err)
		}
	}
}
