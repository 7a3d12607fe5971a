package caddymodule

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/ratelimit"
)

// JWTConfig configures how buyers' bearer tokens are verified.
type JWTConfig struct {
	// Algorithms accepted, pinned (e.g. HS256, RS256, ES256, EdDSA); a token signed with any
	// other algorithm is refused.
	Algorithms []string `json:"algorithms,omitempty"`

	// HMACSecret verifies HS* tokens. Placeholders such as {env.SECKILL_JWT_SECRET} are replaced
	// when the app is provisioned.
	HMACSecret string `json:"hmac_secret,omitempty"`

	// PublicKeyFiles are PEM files of the keys that verify RS*, PS*, ES* and EdDSA tokens.
	PublicKeyFiles []string `json:"public_key_files,omitempty"`

	// JWKSURL is fetched (and refreshed) for the verification keys.
	JWKSURL string `json:"jwks_url,omitempty"`

	// JWKSMinRefresh is the least time between two fetches of the JWKS (a token with an unknown
	// kid asks for one); default 30s.
	JWKSMinRefresh caddy.Duration `json:"jwks_min_refresh,omitempty"`

	// Issuer and Audience, when set, must be in the token's iss and aud claims.
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`

	// Leeway tolerates this much clock skew on exp, nbf and iat.
	Leeway caddy.Duration `json:"leeway,omitempty"`

	// UserClaim names the claim holding the user id; default "sub".
	UserClaim string `json:"user_claim,omitempty"`
}

// RateLimits are the per-client-IP and per-user rate limits; a nil limit means none.
type RateLimits struct {
	IP   *RateLimitConfig `json:"ip,omitempty"`
	User *RateLimitConfig `json:"user,omitempty"`
}

// RateLimitConfig is one rate limit.
type RateLimitConfig struct {
	// Rate is "<events>/<period>", e.g. "20/s", "100/m", "10/100ms".
	Rate string `json:"rate"`

	// Burst is the bucket size; default the number of events.
	Burst int `json:"burst,omitempty"`

	// Distributed enforces the limit across every node with a GCRA in Redis (user limit and
	// store redis only), on top of the node-local bucket.
	Distributed bool `json:"distributed,omitempty"`
}

// parse returns the rate the configuration describes.
func (c *RateLimitConfig) parse() (ratelimit.Rate, error) {
	r, err := ratelimit.ParseRate(c.Rate)
	if err != nil {
		return ratelimit.Rate{}, err
	}
	if c.Burst != 0 {
		r.Burst = c.Burst
		if err := r.Validate(); err != nil {
			return ratelimit.Rate{}, fmt.Errorf("rate %q burst %d: %w", c.Rate, c.Burst, err)
		}
	}
	return r, nil
}

// ActivityConfig defines one sale in the configuration.
type ActivityConfig struct {
	// Stock is the number of items on sale.
	Stock int64 `json:"stock"`

	// Limit is the most items one user may buy; default 1.
	Limit int64 `json:"limit,omitempty"`

	// Start and End bound the sale window (RFC 3339).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end"`

	// StartIn, instead of Start, opens the sale this long after the activity is first defined in
	// the store. The store keeps that start: a reload, a restart with store redis, or another node
	// defining the same activity later never moves it (a restart with store memory is a new sale).
	StartIn caddy.Duration `json:"start_in,omitempty"`

	// Reveal is how long before Start the hashed buy path is handed out.
	Reveal caddy.Duration `json:"reveal,omitempty"`

	// PayWithin is how long a winner has to pay; default 15m.
	PayWithin caddy.Duration `json:"pay_within,omitempty"`

	// Buckets splits the stock into this many buckets under as many Redis hash tags, so that one
	// hot activity's admissions spread over a Redis Cluster's shards instead of one (store redis
	// only; 2 to 256, at most the stock). Every call still sees one activity; see README.
	Buckets int `json:"buckets,omitempty"`

	// Price is what one item costs (Caddyfile `price 199.00 USD`): the sale page, the activity's
	// JSON and every order carry it, and the payment provider charges it. Optional: an activity
	// without a price sells without showing one. When set, the amount is positive and the currency
	// a current ISO 4217 code in upper case.
	Price *money.Price `json:"price,omitempty"`

	// Title names the item on the sale page and in orders: at most 200 bytes of UTF-8 text, no
	// control characters. Optional.
	Title string `json:"title,omitempty"`

	// WaitingRoom, when set, puts a waiting room in front of the buy step (see WaitingRoomConfig).
	WaitingRoom *WaitingRoomConfig `json:"waiting_room,omitempty"`
}

// minBuckets is the least split of ActivityConfig.Buckets (at most admission.MaxBuckets); left
// out, the stock stays in one place.
const minBuckets = 2

// Defaults of an activity definition.
const (
	defaultLimit     = 1
	defaultPayWithin = 15 * time.Minute
)

// definition returns the store definition of activity id.
func (c *ActivityConfig) definition(id string) admission.Activity {
	a := admission.Activity{
		ID:        id,
		Stock:     c.Stock,
		Limit:     c.Limit,
		Start:     c.Start,
		End:       c.End,
		PayWithin: time.Duration(c.PayWithin),
		Buckets:   c.Buckets,
	}
	if a.Limit == 0 {
		a.Limit = defaultLimit
	}
	if a.PayWithin == 0 {
		a.PayWithin = defaultPayWithin
	}
	return a
}

// validate checks what the store does not: the id, the window, the reveal lead, the pay window
// and the buckets. Every field is checked whatever the others hold (a start_in window included),
// and an error names the option at fault.
func (c *ActivityConfig) validate(id string) error {
	if !admission.ValidActivityID(id) {
		return fmt.Errorf("activity id %q: want 1-%d of [A-Za-z0-9._-]", id, admission.MaxActivityIDLen)
	}
	if c == nil {
		return fmt.Errorf("activity %s: empty definition", id)
	}
	switch {
	case c.Stock < 0:
		return fmt.Errorf("activity %s: stock %d is negative", id, c.Stock)
	case c.Limit < 0:
		return fmt.Errorf("activity %s: limit %d is negative", id, c.Limit)
	case c.Reveal < 0:
		return fmt.Errorf("activity %s: reveal %s is negative", id, time.Duration(c.Reveal))
	case c.PayWithin < 0:
		return fmt.Errorf("activity %s: pay_within %s is negative", id, time.Duration(c.PayWithin))
	}
	if err := c.validateWindow(id); err != nil {
		return err
	}
	if c.Price != nil {
		if err := validatePrice(*c.Price); err != nil {
			return fmt.Errorf("activity %s: price: %w", id, err)
		}
	}
	if err := validateTitle(c.Title); err != nil {
		return fmt.Errorf("activity %s: title: %w", id, err)
	}
	if c.WaitingRoom != nil {
		if _, err := c.WaitingRoom.room(); err != nil {
			return fmt.Errorf("activity %s: waiting_room: %w", id, err)
		}
	}
	return c.validateBuckets(id)
}

// validateWindow checks start, start_in and end. With start_in the start is known only when the
// activity is defined; defineActivity checks the end against it then.
func (c *ActivityConfig) validateWindow(id string) error {
	switch {
	case c.StartIn < 0:
		return fmt.Errorf("activity %s: start_in %s is negative", id, time.Duration(c.StartIn))
	case c.StartIn > 0 && !c.Start.IsZero():
		return fmt.Errorf("activity %s: start and start_in are exclusive: give one", id)
	case (c.Start.IsZero() && c.StartIn == 0) || c.End.IsZero():
		return fmt.Errorf("activity %s: start (or start_in) and end are required", id)
	case c.StartIn == 0 && !c.End.After(c.Start):
		return fmt.Errorf("activity %s: %w", id, endNotAfterStart{c.End, c.Start})
	}
	return nil
}

// endNotAfterStart is validateWindow's refusal of the end, a type so that the Caddyfile parser
// can point at the end line.
type endNotAfterStart struct{ end, start time.Time }

func (e endNotAfterStart) Error() string {
	return fmt.Sprintf("end %s is not after start %s", e.end.Format(time.RFC3339), e.start.Format(time.RFC3339))
}

// validateBuckets checks the bucket count against its bounds and the stock.
func (c *ActivityConfig) validateBuckets(id string) error {
	switch {
	case c.Buckets == 0:
		return nil
	case c.Buckets < minBuckets || c.Buckets > admission.MaxBuckets:
		return fmt.Errorf("activity %s: buckets %d: want %d to %d (leave it out for one)", id, c.Buckets, minBuckets, admission.MaxBuckets)
	case int64(c.Buckets) > c.Stock:
		return fmt.Errorf("activity %s: buckets %d is more than the stock %d: every bucket needs an item", id, c.Buckets, c.Stock)
	}
	return nil
}

// validateStore checks what the activity needs of the store: buckets need a store that splits
// the stock (StockSplitter: store redis, over its shards), a waiting room one that keeps a line
// (LineKeeper).
func (c *ActivityConfig) validateStore(id string, m StoreModule) error {
	if c.WaitingRoom != nil && !keepsLine(m) {
		return c.WaitingRoom.noLine(id, m)
	}
	if s, ok := m.(StockSplitter); c.Buckets > 1 && (!ok || !s.SplitsStock()) {
		return fmt.Errorf("activity %s: buckets %d needs store redis (it spreads the stock over Redis "+
			"shards); %s keeps an activity in one place: remove buckets", id, c.Buckets, storeDirective(m))
	}
	return nil
}
