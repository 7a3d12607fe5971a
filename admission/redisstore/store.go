package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Options configures a Store.
type Options struct {
	// KeyPrefix starts every key the store writes; default "seckill". It must not contain '{' or
	// '}', which would break the per-activity hash tag.
	KeyPrefix string

	// RestockChannel is the pub/sub channel on which released stock is announced; default
	// KeyPrefix + ":restock".
	RestockChannel string

	// AutoPipeline sends the hot-path calls Release, Remaining and GetResult through the
	// client's auto-pipeliner, which batches concurrent callers onto shared connections, so the
	// client and the server pay the per-round-trip system calls once per batch instead of once
	// per call (figures: docs/admission.md, "Group admission"). Admit's script calls never use it:
	// they travel in the store's own pipelines (admit.go), which with AdmitBatch 1 carry one call
	// each, so concurrent ungrouped Admits are not combined. go-redis marks the auto-pipeliner
	// experimental; a Ring has none.
	AutoPipeline bool

	// AdmitBatch is the most Admit calls for one activity that share one script call (group
	// admission: while a call for the activity is in flight, newcomers queue and go together in
	// the next one; see admit.go). Default 64; 1 turns grouping off, so that every Admit is
	// its own script call; at most MaxAdmitBatch.
	AdmitBatch int

	// AdmitInFlight is how many pipelines of grouped script calls (each with at most one call
	// per activity) may be in flight at once; default 2. Ignored when AdmitBatch is 1.
	AdmitInFlight int

	// ReplicasAck, when positive, makes every admission script call (one per group) and every
	// release wait until that many replicas have its writes (Redis WAIT, sent on the same
	// connection right behind the script, or behind a pipeline's admission scripts for one
	// master) before answering. A call they do not confirm within
	// ReplicasAckTimeout answers ErrNotReplicated for its wins: they are on the master, but a
	// failover now could lose them. 0 (the default) answers as soon as the master has decided.
	// The wins queue's reads (ReadGroup, Claim) wait the same way and deliver only entries the
	// replicas confirmed, else answer ErrNotReplicated and leave them pending.
	// It needs a single-server, Sentinel or Cluster client (not a Ring), and turns the
	// auto-pipeliner off for admissions and releases. See ack.go.
	ReplicasAck int

	// ReplicasAckTimeout bounds the wait for ReplicasAck; default 100 ms. It must stay well
	// below the client's read timeout, which also covers WAIT's reply.
	ReplicasAckTimeout time.Duration

	// RebalanceInterval is how often the store's rebalancer levels the stock of the split
	// activities (Activity.Buckets) it has served and completes transfers left pending by a
	// crashed runner; default 250 ms, negative turns it off (admissions still pull stock into a
	// dry bucket themselves). The rebalancer runs inside the store, from its first split
	// activity until Close.
	RebalanceInterval time.Duration
}

// Store is the production Store: all state lives in Redis and every decision is one Lua
// script, so any number of nodes can share a sale. It works with a single server, Sentinel or
// Cluster: every key of one activity carries the hash tag {ACT}, so each script touches one slot.
//
// Keys, for prefix P and activity A: P:{A}:meta (hash: stock_total, limit, start_ms, end_ms,
// pay_ms, salt, layout 2, and the counters wins and buyers), P:{A}:stock (int), P:{A}:users (hash
// user → the items held, the request ids' first answers and the reservations: lua/admit.lua),
// P:{A}:orders (stream: the wins queue, one entry per admission call with wins, whose k-th win is
// reservation "<entry id>-k"), P:{A}:acked (hash: the wins a consumer group acknowledged),
// P:{A}:dead (dead-letter stream), P:{A}:released (hash reservation id → token of the releasing
// call), P:{A}:results (hash user → result JSON, and the per-reservation records of
// docs/admission.md), P:{A}:line and :line_state (the waiting room's line: line.go), and
// P:activities (set of activity ids, in its own slot).
//
// An activity an earlier build created without layout 2 in its :meta (the key layout with
// P:{A}:buyers, :req and :resv, one stream entry per win) is not served: New refuses a Redis that
// lists one, and every script refuses it (ErrOldLayout, oldlayout.go).
type Store struct {
	client  redis.UniversalClient
	hot     redis.Cmdable // client, or its auto-pipeliner (Options.AutoPipeline)
	prefix  string
	channel string

	define, admit, release, del, ensureGroup, readPending, claim, deadLetter, setResult *redis.Script

	groups       *admitGroups  // nil when AdmitBatch is 1
	calls        admitCallPool // Admit's calls, grouped or not
	admitScratch sync.Pool     // *admitScratch, a pipeline's arrays (runAdmitBatches)

	ack *replicasAck // nil unless Options.ReplicasAck

	keyCache redisKeyCache // per-activity prebuilt arguments of the hot calls

	bucketCounters bucketCounters // BucketStats
	bucketCache    sync.Map       // activity id -> its bucket count (int), see bucketCount
	rebalance      bucketRebalancer
	pulls          pullFlight
	bucketLevels   sync.Map // activity id -> []int64, its buckets' stock at the last read (BucketLevels)
	// afterPull, when set (tests only), runs after a pull moved stock into an admission's home
	// bucket and before the admission tries again: a test makes other buyers win that stock.
	afterPull func(activity string, home int)
	// bucketReadStart rotates the bucket a queue sweep starts at, so that a busy bucket does
	// not starve the others of a reader asking for few entries.
	bucketReadStart atomic.Uint32

	closeOnce sync.Once
	closed    chan struct{}
}

var _ admission.Store = (*Store)(nil)

// New returns a store that keeps its state in the Redis behind client. The store takes
// ownership of client: Close closes it. Give the store its own client if the rest of the program
// outlives the store.
//
// New refuses (ErrOldLayout, an *OldLayoutError per activity) a Redis that holds an activity an
// earlier build created in its own key layout under the prefix; it looks at the activities listed
// in <prefix>:activities, for up to a few seconds.
//
// Commands are retried by the client after a dropped connection (see redis.Options.MaxRetries);
// every write script is idempotent under such a retry, so keep MaxRetries above zero.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("new redis store: %w: nil client", admission.ErrBadInput)
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "seckill"
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("new redis store: %w: key prefix %q contains a brace", admission.ErrBadInput, opts.KeyPrefix)
	}
	if opts.RestockChannel == "" {
		opts.RestockChannel = opts.KeyPrefix + ":restock"
	}
	if opts.AdmitBatch < 0 || opts.AdmitInFlight < 0 {
		return nil, fmt.Errorf("new redis store: %w: admit batch %d and in-flight %d must not be negative", admission.ErrBadInput, opts.AdmitBatch, opts.AdmitInFlight)
	}
	if opts.AdmitBatch > MaxAdmitBatch {
		return nil, fmt.Errorf("new redis store: %w: admit batch %d is above %d", admission.ErrBadInput, opts.AdmitBatch, MaxAdmitBatch)
	}
	ack, err := newReplicasAck(client, opts.ReplicasAck, opts.ReplicasAckTimeout)
	if err != nil {
		return nil, fmt.Errorf("new redis store: %w", err)
	}
	if opts.AdmitBatch == 0 {
		opts.AdmitBatch = defaultAdmitBatch
	}
	if opts.AdmitInFlight == 0 {
		opts.AdmitInFlight = defaultAdmitInFlight
	}
	var hot redis.Cmdable = client
	if opts.AutoPipeline {
		// The client caches its auto-pipeliner and closes it with itself.
		ap, err := client.AutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("new redis store: auto-pipeline: %w", err)
		}
		hot = ap
	}
	s := &Store{
		client:      client,
		hot:         hot,
		prefix:      opts.KeyPrefix,
		channel:     opts.RestockChannel,
		define:      redis.NewScript(luaDefine),
		admit:       redis.NewScript(luaAdmit),
		release:     redis.NewScript(luaRelease),
		del:         redis.NewScript(luaDelete),
		ensureGroup: redis.NewScript(luaEnsureGroup),
		readPending: redis.NewScript(luaReadPending),
		claim:       redis.NewScript(luaClaim),
		deadLetter:  redis.NewScript(luaDeadLetter),
		setResult:   redis.NewScript(luaSetResult),
		closed:      make(chan struct{}),
		ack:         ack,
	}
	s.rebalance.interval = opts.RebalanceInterval
	if s.rebalance.interval == 0 {
		s.rebalance.interval = defaultRebalanceInterval
	}
	if opts.AdmitBatch > 1 {
		s.groups = newAdmitGroups(opts.AdmitBatch, opts.AdmitInFlight, &s.calls, s.runAdmitBatches)
	}
	// An activity an earlier build created in its own key layout is refused now, when the store
	// is made (oldlayout.go). When Redis cannot be read now, New does not fail for that: a store
	// may be made before its Redis is up (the order backend retries until it is), and every call
	// on such an activity is refused anyway.
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	err = s.checkLayouts(ctx)
	cancel()
	if errors.Is(err, ErrOldLayout) {
		return nil, fmt.Errorf("new redis store: %w", err)
	}
	return s, nil
}

// Close ends every Restocks subscription and closes the client given to New. Calls
// after the first do nothing.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		// No rebalancer starts after this; a running one ends before the client closes.
		s.rebalance.once.Do(func() {})
		if s.rebalance.done != nil {
			<-s.rebalance.done
		}
		err = s.client.Close()
	})
	return err
}

// key names one of an activity's keys; the braces make the activity id the Cluster hash tag.
func (s *Store) key(activity, name string) string {
	return s.prefix + ":{" + activity + "}:" + name
}

// activitiesKey names the global set of activity ids (its own slot: never touched by a script).
func (s *Store) activitiesKey() string {
	return s.prefix + ":activities"
}

// redisScriptErr maps the error words the scripts reply with (see the lua/ headers) to the
// sentinel errors; any other error is returned as it is.
func redisScriptErr(err error) error {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return err
	}
	// Redis puts "ERR " before an error reply that is a single word.
	msg := strings.TrimPrefix(re.Error(), "ERR ")
	word, _, _ := strings.Cut(msg, " ")
	switch word {
	case "UNKNOWN_ACTIVITY":
		return admission.ErrUnknownActivity
	case "BAD_INPUT":
		return fmt.Errorf("%w: %s", admission.ErrBadInput, strings.TrimPrefix(msg, "BAD_INPUT "))
	case "NOT_FOUND":
		return admission.ErrNotFound
	case "RUNNING":
		return admission.ErrActivityRunning
	case "BELOW_SOLD":
		return admission.ErrStockBelowSold
	case "BUCKETS":
		return fmt.Errorf("%w: bucket count: %s", admission.ErrBadInput, strings.TrimPrefix(msg, "BUCKETS "))
	case "LAYOUT":
		return oldLayoutErr(msg)
	case "NOGROUP":
		return fmt.Errorf("%w: %s", admission.ErrNotFound, msg)
	}
	return err
}

// redisCheckName bounds the free-form names (users, groups, consumers, entry ids) that become
// hash fields or command arguments.
func redisCheckName(what, v string, max int) error {
	if v == "" || len(v) > max {
		return admission.BadInput("%s must be 1-%d bytes", what, max)
	}
	return nil
}
