package caddymodule

import (
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("seckill", parseGlobalOption)
}

// parseGlobalOption sets up the seckill app from the global option of the same name. Syntax:
//
//	seckill {
//		store memory
//		store local <dir> {
//			fsync always|no
//		}
//		store redis [<address>...] {
//			address    <host:port>...
//			username   <name>
//			password   <password>
//			db         <n>
//			key_prefix <prefix>
//			sentinel   <master name>
//			cluster
//			auto_pipeline
//			admit_batch <n>
//			pool_size   <n>
//			replicas_ack <n> [<timeout>]
//		}
//		jwt {
//			algorithms      <alg>...
//			hmac_secret     <secret>
//			public_key_file <pem file>
//			jwks_url        <url>
//			jwks_min_refresh <duration>
//			issuer          <iss>
//			audience        <aud>
//			leeway          <duration>
//			user_claim      <claim>
//		}
//		url_secret     <secret>
//		forward_secret <secret>
//		captcha        on|off [{
//			length      <digits>
//			ttl         <duration>
//			max_fetches <n>
//			issue_rate  <events>/<period> [burst <n>]
//		}]
//		orders sqlite|postgres <file or dsn> {
//			sweep_every    <duration>
//			consumer_name  <name>
//			max_deliveries <n>
//			claim_idle     <duration>
//		}
//		rate_limit ip   <events>/<period> [burst <n>]
//		rate_limit user <events>/<period> [burst <n>] [distributed]
//		activity <id> {
//			stock      <n>
//			limit      <n>
//			start      <RFC 3339 time>
//			start_in   <duration>       # instead of start: after the first definition
//			end        <RFC 3339 time>
//			reveal     <duration>
//			pay_within <duration>
//			buckets    <n>              # store redis: split the stock over n shards (2-256)
//		}
//	}
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		d.Next()
		return nil, d.Err("seckill: the global option is given twice: merge the blocks")
	}
	app := new(App)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{
		Name:  "seckill",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// UnmarshalCaddyfile sets up the app from Caddyfile tokens; see parseGlobalOption for the syntax.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume option name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := optionSet{}
	once := func(name string) error { return seen.once(d, name) }
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "store":
			if err := once(opt); err != nil {
				return err
			}
			s, err := parseStore(d)
			if err != nil {
				return err
			}
			a.Store = s
		case "jwt":
			if err := once(opt); err != nil {
				return err
			}
			j, err := parseJWT(d)
			if err != nil {
				return err
			}
			a.JWT = j
		case "url_secret", "forward_secret":
			if err := once(opt); err != nil {
				return err
			}
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			if opt == "url_secret" {
				a.URLSecret = v
			} else {
				a.ForwardSecret = v
			}
		case "captcha":
			if err := once(opt); err != nil {
				return err
			}
			if err := parseCaptcha(d, a); err != nil {
				return err
			}
		case "orders":
			if err := once(opt); err != nil {
				return err
			}
			o, err := parseOrders(d)
			if err != nil {
				return err
			}
			a.Orders = o
		case "rate_limit":
			if err := parseRateLimit(d, a); err != nil {
				return err
			}
		case "activity":
			if !d.NextArg() {
				return d.ArgErr()
			}
			id := d.Val()
			if !admission.ValidActivityID(id) {
				return d.Errf("seckill: activity id %q: want 1-%d of [A-Za-z0-9._-]", id, admission.MaxActivityIDLen)
			}
			if _, dup := a.Activities[id]; dup {
				return d.Errf("seckill: activity %s is defined twice", id)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			act, err := parseActivity(d, id)
			if err != nil {
				return err
			}
			if a.Activities == nil {
				a.Activities = map[string]*ActivityConfig{}
			}
			a.Activities[id] = act
		default:
			return d.Errf("seckill: unrecognized option %q", opt)
		}
	}
	return nil
}

func parseStore(d *caddyfile.Dispenser) (*StoreConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	s := &StoreConfig{Type: d.Val()}
	switch s.Type {
	case storeMemory:
		if d.NextArg() {
			return nil, d.ArgErr()
		}
		if d.NextBlock(d.Nesting()) {
			return nil, d.Err("seckill: store memory takes no options")
		}
		return s, nil
	case storeLocal:
		return parseStoreLocal(d, s)
	case storeRedis:
	default:
		return nil, d.Errf("seckill: unknown store %q: want memory, local or redis", s.Type)
	}
	s.Addresses = append(s.Addresses, d.RemainingArgs()...)
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if sub != "address" { // repeatable: the addresses add up
			if err := seen.once(d, "store redis "+sub); err != nil {
				return nil, err
			}
		}
		switch sub {
		case "address":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			s.Addresses = append(s.Addresses, args...)
		case "username", "password", "key_prefix", "sentinel":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			switch sub {
			case "username":
				s.Username = v
			case "password":
				s.Password = v
			case "key_prefix":
				s.KeyPrefix = v
			case "sentinel":
				s.SentinelMaster = v
			}
		case "db":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, d.Errf("seckill: store redis db %q: want a database number", v)
			}
			s.DB = n
		case "cluster":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			s.Cluster = true
		case "auto_pipeline":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			s.AutoPipeline = true
		case "admit_batch":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxAdmitBatch {
				return nil, d.Errf("seckill: store redis admit_batch %q: want 1 (no grouping) to %d", v, maxAdmitBatch)
			}
			s.AdmitBatch = n
		case "pool_size":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxPoolSize {
				return nil, d.Errf("seckill: store redis pool_size %q: want 1 to %d connections", v, maxPoolSize)
			}
			s.PoolSize = n
		case "replicas_ack":
			if err := parseReplicasAck(d, s); err != nil {
				return nil, err
			}
		default:
			return nil, d.Errf("seckill: unrecognized store redis option %q", sub)
		}
	}
	if len(s.Addresses) == 0 {
		return nil, d.Err("seckill: store redis needs at least one address")
	}
	if err := s.validate(); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return s, nil
}

// parseReplicasAck parses the store redis option
//
//	replicas_ack <n> [<timeout>]
//
// n replicas (1 to 16) must confirm each admission call and release within timeout (default
// 100ms, 1ms to 500ms), else its buyers are answered 503 busy.
func parseReplicasAck(d *caddyfile.Dispenser, s *StoreConfig) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > admission.MaxReplicasAck {
		return d.Errf("seckill: store redis replicas_ack %q: want 1 to %d replicas", args[0], admission.MaxReplicasAck)
	}
	s.ReplicasAck = n
	if len(args) == 2 {
		t, err := caddy.ParseDuration(args[1])
		if err != nil || t < time.Millisecond || t > maxReplicasAckTimeout {
			return d.Errf("seckill: store redis replicas_ack timeout %q: want 1ms to %v", args[1], maxReplicasAckTimeout)
		}
		s.ReplicasAckTimeout = caddy.Duration(t)
	}
	return nil
}

// parseStoreLocal parses the rest of "store local <dir> [{ fsync always|no }]".
func parseStoreLocal(d *caddyfile.Dispenser, s *StoreConfig) (*StoreConfig, error) {
	if !d.AllArgs(&s.Dir) {
		return nil, d.Err("seckill: want store local <folder>, e.g. store local ./seckill-data")
	}
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := seen.once(d, "store local "+sub); err != nil {
			return nil, err
		}
		switch sub {
		case "fsync":
			if !d.AllArgs(&s.Fsync) {
				return nil, d.ArgErr()
			}
			if s.Fsync != fsyncAlways && s.Fsync != fsyncNo {
				return nil, d.Errf("seckill: store local fsync %q: want always (flush to the device: survives a "+
					"power loss) or no (the default: survives a crash of the process)", s.Fsync)
			}
		default:
			return nil, d.Errf("seckill: unrecognized store local option %q", sub)
		}
	}
	if err := s.validate(); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return s, nil
}

func parseJWT(d *caddyfile.Dispenser) (*JWTConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	j := new(JWTConfig)
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if sub != "public_key_file" { // repeatable: the keys add up
			if err := seen.once(d, "jwt "+sub); err != nil {
				return nil, err
			}
		}
		switch sub {
		case "algorithms":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			j.Algorithms = append(j.Algorithms, args...)
		case "public_key_file":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return nil, d.ArgErr()
			}
			j.PublicKeyFiles = append(j.PublicKeyFiles, args...)
		case "hmac_secret", "jwks_url", "issuer", "audience", "user_claim":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			switch sub {
			case "hmac_secret":
				j.HMACSecret = v
			case "jwks_url":
				j.JWKSURL = v
			case "issuer":
				j.Issuer = v
			case "audience":
				j.Audience = v
			case "user_claim":
				j.UserClaim = v
			}
		case "leeway":
			dur, err := durationArg(d, "jwt leeway")
			if err != nil {
				return nil, err
			}
			j.Leeway = caddy.Duration(dur)
		case "jwks_min_refresh":
			dur, err := durationArg(d, "jwt jwks_min_refresh")
			if err != nil {
				return nil, err
			}
			if dur == 0 {
				return nil, d.Err("seckill: jwt jwks_min_refresh must be positive")
			}
			j.JWKSMinRefresh = caddy.Duration(dur)
		default:
			return nil, d.Errf("seckill: unrecognized jwt option %q", sub)
		}
	}
	if len(j.Algorithms) == 0 {
		return nil, d.Err("seckill: jwt needs algorithms (e.g. algorithms HS256)")
	}
	if j.JWKSMinRefresh != 0 && j.JWKSURL == "" {
		return nil, d.Err("seckill: jwt jwks_min_refresh needs a jwks_url")
	}
	return j, nil
}

func parseRateLimit(d *caddyfile.Dispenser, a *App) error {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return d.Err("seckill: want rate_limit ip|user <events>/<period> [burst <n>] [distributed]")
	}
	if a.RateLimits == nil {
		a.RateLimits = new(RateLimits)
	}
	c, err := parseRateArgs(d, "rate_limit", args[1:])
	if err != nil {
		return err
	}
	if _, err := c.parse(); err != nil {
		return d.Errf("seckill: rate_limit %s: %v", args[0], err)
	}
	switch args[0] {
	case "ip":
		if a.RateLimits.IP != nil {
			return d.Err("seckill: rate_limit ip is given twice")
		}
		if c.Distributed {
			return d.Err("seckill: rate_limit ip cannot be distributed (the IP limit is node-local by design)")
		}
		a.RateLimits.IP = c
	case "user":
		if a.RateLimits.User != nil {
			return d.Err("seckill: rate_limit user is given twice")
		}
		a.RateLimits.User = c
	default:
		return d.Errf("seckill: rate_limit %q: want ip or user", args[0])
	}
	return nil
}

// parseRateArgs reads "<events>/<period> [burst <n>] [distributed]" from args, for the option
// named what.
func parseRateArgs(d *caddyfile.Dispenser, what string, args []string) (*RateLimitConfig, error) {
	if len(args) == 0 {
		return nil, d.Errf("seckill: %s needs a rate like 6/m", what)
	}
	c := &RateLimitConfig{Rate: args[0]}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "burst":
			if i+1 >= len(args) {
				return nil, d.Errf("seckill: %s burst needs a number", what)
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n <= 0 {
				return nil, d.Errf("seckill: %s burst %q: want a positive whole number", what, args[i+1])
			}
			c.Burst = n
			i++
		case "distributed":
			c.Distributed = true
		default:
			return nil, d.Errf("seckill: %s: unexpected %q", what, args[i])
		}
	}
	return c, nil
}

func parseActivity(d *caddyfile.Dispenser, id string) (*ActivityConfig, error) {
	c := new(ActivityConfig)
	var haveStock bool
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := seen.once(d, "activity "+id+": "+sub); err != nil {
			return nil, err
		}
		switch sub {
		case "stock", "limit":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, d.Errf("seckill: activity %s: %s %q: want a whole number", id, sub, v)
			}
			if sub == "limit" && n == 0 {
				return nil, d.Errf("seckill: activity %s: limit must be at least 1", id)
			}
			if sub == "stock" {
				c.Stock, haveStock = n, true
			} else {
				c.Limit = n
			}
		case "start", "end":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, d.Errf("seckill: activity %s: %s %q: want an RFC 3339 time like 2026-12-01T20:00:00+08:00", id, sub, v)
			}
			if sub == "start" {
				c.Start = t
			} else {
				c.End = t
			}
		case "buckets":
			n, err := parseBuckets(d, id)
			if err != nil {
				return nil, err
			}
			c.Buckets = n
		case "reveal", "pay_within", "start_in":
			dur, err := durationArg(d, "activity "+id+" "+sub)
			if err != nil {
				return nil, err
			}
			switch sub {
			case "reveal":
				c.Reveal = caddy.Duration(dur)
			case "pay_within":
				c.PayWithin = caddy.Duration(dur)
			case "start_in":
				if dur == 0 {
					return nil, d.Errf("seckill: activity %s: start_in must be positive (for a sale open at once, give a start in the past)", id)
				}
				c.StartIn = caddy.Duration(dur)
			}
		default:
			return nil, d.Errf("seckill: activity %s: unrecognized option %q", id, sub)
		}
	}
	if !haveStock {
		return nil, d.Errf("seckill: activity %s: stock is required", id)
	}
	if err := c.validate(id); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return c, nil
}

// parseBuckets reads the argument of an activity's
//
//	buckets <n>
//
// which splits the stock into n buckets spread over a Redis Cluster's shards (2 to
// admission.MaxBuckets; never more than the stock, checked once the block is read).
func parseBuckets(d *caddyfile.Dispenser, id string) (int, error) {
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < minBuckets || n > admission.MaxBuckets {
		return 0, d.Errf("seckill: activity %s: buckets %q: want %d to %d (leave it out for one)", id, v, minBuckets, admission.MaxBuckets)
	}
	return n, nil
}

// durationArg reads one non-negative duration argument.
func durationArg(d *caddyfile.Dispenser, what string) (time.Duration, error) {
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("seckill: %s %q: %v", what, v, err)
	}
	if dur < 0 {
		return 0, d.Errf("seckill: %s %q is negative", what, v)
	}
	return dur, nil
}

// parseOrders parses "orders sqlite|postgres <file or dsn> [{ ... }]".
func parseOrders(d *caddyfile.Dispenser) (*OrdersConfig, error) {
	var typ, dsn string
	if !d.Args(&typ, &dsn) {
		return nil, d.Err("seckill: want orders sqlite <file> or orders postgres <dsn>")
	}
	if d.NextArg() {
		return nil, d.Errf("seckill: orders %s: unexpected %q (quote a DSN that has spaces)", typ, d.Val())
	}
	o := &OrdersConfig{Type: typ, DSN: dsn}
	seen := optionSet{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if err := seen.once(d, "orders "+sub); err != nil {
			return nil, err
		}
		switch sub {
		case "sweep_every", "claim_idle":
			dur, err := durationArg(d, "orders "+sub)
			if err != nil {
				return nil, err
			}
			if dur == 0 {
				return nil, d.Errf("seckill: orders %s must be positive", sub)
			}
			if sub == "sweep_every" {
				o.SweepEvery = caddy.Duration(dur)
			} else {
				o.ClaimIdle = caddy.Duration(dur)
			}
		case "consumer_name":
			if !d.AllArgs(&o.ConsumerName) {
				return nil, d.ArgErr()
			}
		case "max_deliveries":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return nil, d.Errf("seckill: orders max_deliveries %q: want a whole number of at least 1", v)
			}
			o.MaxDeliveries = n
		default:
			return nil, d.Errf("seckill: unrecognized orders option %q", sub)
		}
	}
	if err := o.validate(); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return o, nil
}
