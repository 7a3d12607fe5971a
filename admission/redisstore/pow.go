package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// proofSpentMargin keeps a spent proof of work a little past its challenge's expiry, for the
// clocks of the gateways that check the expiry, which are not the store's.
const proofSpentMargin = time.Minute

// maxProofID bounds a challenge id (waitroom's are 22 characters).
const maxProofID = 64

// SpendProof marks the proof-of-work challenge id of activity spent until until (package
// waitroom): true the first time, false when it was already spent. One SET NX PX on
// P:{A}:pow:<id>, in the activity's hash tag: one answer is spent once across every gateway, on
// Cluster too, and the key goes by itself after the expiry.
func (s *Store) SpendProof(ctx context.Context, activity, id string, until time.Time) (bool, error) {
	if !admission.ValidActivityID(activity) {
		return false, fmt.Errorf("spend proof: %w", admission.BadInput("activity id %q", activity))
	}
	if id == "" || len(id) > maxProofID {
		return false, fmt.Errorf("spend proof %s: %w", activity, admission.BadInput("challenge id of %d bytes", len(id)))
	}
	// The value is this call's own: when the client retries the SET after a reply lost with
	// its connection, the key it finds is its own, and the answer is still a first spend.
	var mark [12]byte
	_, _ = rand.Read(mark[:])
	val := base64.RawURLEncoding.EncodeToString(mark[:])
	key := s.key(activity, "pow:"+id)
	ttl := max(time.Until(until), 0) + proofSpentMargin
	ok, err := s.client.SetNX(ctx, key, val, ttl).Result()
	if err == nil && !ok {
		var got string
		got, err = s.client.Get(ctx, key).Result()
		ok = err == nil && got == val
		if errors.Is(err, redis.Nil) { // expired in between: spent, and gone
			err = nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("spend proof %s: %w", activity, err)
	}
	return ok, nil
}
