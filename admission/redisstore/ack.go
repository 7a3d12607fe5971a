package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
)

// Acknowledged writes (Options.ReplicasAck). Redis replicates asynchronously: a master
// answers a script before any replica has its writes, so a master that dies right after a win
// takes the win, and its stream entry, with it, and the promoted replica sells the item again.
// WAIT n timeout blocks its connection until n replicas have acknowledged every write made on
// that connection (and only on that one: a fresh connection's returns at once; on Redis 7.0 a
// connection's last command of any kind, not only a write, sets the offset it waits for).
// So the script and its WAIT travel together, pipelined on one connection of the master that
// owns the activity's slot: go-redis v9 runs a Client's (single or Sentinel) pipeline on one
// pooled connection, while a ClusterClient's would send the keyless WAIT to any node, so there
// the activity's master is picked first (MasterForKey).
//
// The WAIT rides in the same round trip as the script, so it is sent whatever the script
// decides, and counts only for the answers that wrote: wins, replays and releases. A replay, or
// a release of a reservation already released, writes its stored answer again (admit.lua,
// release.lua) so that its WAIT covers the first write too: replication is in order, and the
// retry's write comes after it on the master.

const (
	// defaultReplicasAckTimeout is ReplicasAckTimeout's default: a replica on the same network
	// acknowledges within a millisecond or two (the master asks at once, REPLCONF GETACK), and
	// 100 ms leaves room for a replica's fsync or fork stall while a buyer still gets an answer
	// well inside the edge's one-second admission deadline.
	defaultReplicasAckTimeout = 100 * time.Millisecond

	// MaxReplicasAck bounds Options.ReplicasAck: more replicas than this per master is a
	// typing error, not a topology.
	MaxReplicasAck = 16

	// MaxReplicasAckTimeout bounds Options.ReplicasAckTimeout: a buyer waiting longer for
	// replicas is worse off than one told busy.
	MaxReplicasAckTimeout = 10 * time.Second

	// readBlockSlice is the longest a blocking stream read waits in one command (readNew): go-redis
	// cannot interrupt a blocking command when its context ends.
	readBlockSlice = 500 * time.Millisecond
)

// replicasAck sends writes with their WAIT.
type replicasAck struct {
	n, timeoutMs int64
	single       *redis.Client        // a single server or Sentinel's failover client
	cluster      *redis.ClusterClient // or a cluster
	// reload is the cluster client's ReloadState, run once per pipeline a master redirected; a
	// test counts its calls.
	reload func(context.Context)

	waits, shortfalls atomic.Uint64
}

// newReplicasAck returns nil when n is 0 (off).
func newReplicasAck(client redis.UniversalClient, n int, timeout time.Duration) (*replicasAck, error) {
	if n == 0 {
		if timeout != 0 {
			return nil, admission.BadInput("replicas ack timeout %v without replicas ack", timeout)
		}
		return nil, nil
	}
	if n < 0 || n > MaxReplicasAck {
		return nil, admission.BadInput("replicas ack %d: want 1 to %d replicas", n, MaxReplicasAck)
	}
	if timeout == 0 {
		timeout = defaultReplicasAckTimeout
	}
	if timeout < time.Millisecond || timeout > MaxReplicasAckTimeout {
		return nil, admission.BadInput("replicas ack timeout %v: want 1ms to %v", timeout, MaxReplicasAckTimeout)
	}
	a := &replicasAck{n: int64(n), timeoutMs: timeout.Milliseconds()}
	switch c := client.(type) {
	case *redis.Client:
		a.single = c
	case *redis.ClusterClient:
		a.cluster = c
	case interface{ Unwrap() *redis.ClusterClient }: // redisclient's monitored Cluster client
		a.cluster = c.Unwrap()
	default:
		return nil, admission.BadInput("replicas ack needs a single-server, Sentinel or Cluster client, not %T", client)
	}
	if a.cluster != nil {
		a.reload = a.cluster.ReloadState
	}
	return a, nil
}

// send runs cmd, which writes keys of the slot of key, and a WAIT behind it on one connection,
// and returns how many replicas acknowledged. cmd's own error is left in cmd; the error returned
// is WAIT's (or the pipeline's when cmd succeeded).
func (a *replicasAck) send(ctx context.Context, key string, cmd redis.Cmder) (int64, error) {
	var acked [1]int64
	var errs [1]error
	a.sendAll(ctx, func(int) string { return key }, []redis.Cmder{cmd}, acked[:], errs[:])
	return acked[0], errs[0]
}

// sendAll runs cmds, cmds[i] writing keys of the slot of key(i), with one WAIT behind the
// commands of each master on the same connection (a WAIT covers every write made before it on
// its connection), and sets acked[i] to how many replicas acknowledged cmds[i] and errs[i] to
// its WAIT's error. Each command's own error is left in it. Commands of one master, which is
// every pipeline but a Cluster's that spans masters, go on the caller's goroutine.
func (a *replicasAck) sendAll(ctx context.Context, key func(int) string, cmds []redis.Cmder, acked []int64, errs []error) {
	if a.single != nil {
		a.sendOn(ctx, a.single, cmds, nil, acked, errs)
		return
	}
	var only *redis.Client
	for i := range cmds {
		node, err := a.cluster.MasterForKey(ctx, key(i))
		if err != nil || (only != nil && node != only) {
			a.fanOut(ctx, key, cmds, acked, errs)
			return
		}
		only = node
	}
	a.sendOn(ctx, only, cmds, nil, acked, errs)
}

// fanOut is sendAll for a Cluster pipeline whose commands span masters (or whose masters are not
// all known): each master's share goes at the same time, one on the caller's goroutine.
func (a *replicasAck) fanOut(ctx context.Context, key func(int) string, cmds []redis.Cmder, acked []int64, errs []error) {
	type share struct {
		node *redis.Client
		idx  []int
	}
	var shares []share // a few masters: a scan beats a map
	for i, cmd := range cmds {
		node, err := a.cluster.MasterForKey(ctx, key(i))
		if err != nil {
			cmd.SetErr(err)
			continue
		}
		j := slices.IndexFunc(shares, func(sh share) bool { return sh.node == node })
		if j < 0 {
			j = len(shares)
			shares = append(shares, share{node: node})
		}
		shares[j].idx = append(shares[j].idx, i)
	}
	send := func(sh share) {
		sub := make([]redis.Cmder, len(sh.idx))
		for j, i := range sh.idx {
			sub[j] = cmds[i]
		}
		a.sendOn(ctx, sh.node, sub, sh.idx, acked, errs)
	}
	var wg sync.WaitGroup
	for _, sh := range shares[min(1, len(shares)):] {
		wg.Go(func() { send(sh) })
	}
	if len(shares) > 0 {
		send(shares[0])
	}
	wg.Wait()
}

// sendOn runs cmds and a WAIT in one pipeline on client and records each command's
// acknowledgement in acked and errs, at idx[j] for cmds[j] (at j when idx is nil).
func (a *replicasAck) sendOn(ctx context.Context, client *redis.Client, cmds []redis.Cmder, idx []int, acked []int64, errs []error) {
	pipe := client.Pipeline()
	wait := redis.NewIntCmd(ctx, "wait", a.n, a.timeoutMs)
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	n, waitErr := wait.Result()
	counted, redirected := false, false
	for j, cmd := range cmds {
		at := j
		if idx != nil {
			at = idx[j]
		}
		if err := cmd.Err(); err != nil {
			redirected = redirected || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
			continue
		}
		if waitErr != nil {
			errs[at] = fmt.Errorf("wait for %d replicas: %w", a.n, waitErr)
			continue
		}
		acked[at] = n
		if !counted {
			counted = true
			a.waits.Add(1)
			if n < a.n {
				a.shortfalls.Add(1)
			}
		}
	}
	if redirected && a.reload != nil {
		// The node client does not follow redirects; the cluster client learns the new owner
		// for the next call. One reload serves every command the move redirected.
		a.reload(ctx)
	}
}

// runDelivery runs a script that delivers entries (read_new.lua, read_pending.lua, claim.lua).
// With ReplicasAck a WAIT follows it on the same connection, and a reply that delivered entries
// is returned only when that many replicas acknowledged: the script's write (the delivery, which
// replication carries after the entries' XADDs) is then on them, and so are the entries. Entries
// the replicas did not confirm stay pending in the group, and a *ReplicationError tells the
// caller to re-read its pending entries later. op names the call in errors.
func (s *Store) runDelivery(ctx context.Context, op, activity string, script *redis.Script, src string, keys []string, args ...any) ([]any, error) {
	// On a Cluster, an answer that delivers entries is taken only once another node confirms
	// that the node answering is still the master of the stream's slot, as a plain XREADGROUP's
	// is: a replaced master that continues must not hand out wins the new master never had.
	ctx = redisclient.ConfirmDelivery(ctx, deliveredCmd)
	if s.ack == nil {
		return script.Run(ctx, s.client, keys, args...).Slice()
	}
	cmd, acked, waitErr := s.evalAcked(ctx, script, src, keys, args...)
	reply, err := cmd.Slice()
	switch {
	case err != nil:
		return nil, err
	case waitErr != nil:
		return nil, waitErr
	case delivered(reply) && acked < s.ack.n:
		return nil, &admission.ReplicationError{Op: op, Activity: activity, Wanted: s.ack.n, Acked: acked}
	}
	return reply, nil
}

// deliveredCmd is delivered for a delivery script's command, for redisclient.ConfirmDelivery.
func deliveredCmd(c redis.Cmder) bool {
	cmd, ok := c.(*redis.Cmd)
	if !ok {
		return false
	}
	reply, err := cmd.Slice()
	return err == nil && delivered(reply)
}

// delivered reports whether a delivery script's reply holds entries (read_new.lua answers
// {top}, a string, when it delivered none).
func delivered(reply []any) bool {
	if len(reply) == 0 {
		return false
	}
	_, entry := reply[0].([]any)
	return entry
}

// ReplicaAcks reports how many WAITs the store has sent for Options.ReplicasAck and how
// many of them fewer replicas than asked acknowledged in time; both are 0 when it is off.
func (s *Store) ReplicaAcks() (waits, shortfalls uint64) {
	if s.ack == nil {
		return 0, 0
	}
	return s.ack.waits.Load(), s.ack.shortfalls.Load()
}

// ReplicasAckEnabled reports whether the store waits for replicas (Options.ReplicasAck).
func (s *Store) ReplicasAckEnabled() bool { return s.ack != nil }

// checkAcked turns a decision that wrote into a *ReplicationError when its call's WAIT counted
// fewer than ReplicasAck replicas; refusals wrote nothing and pass.
func (s *Store) checkAcked(activity string, d admission.Decision, acked int64) (admission.Decision, error) {
	if s.ack == nil || d.Outcome != admission.Won || acked >= s.ack.n {
		return d, nil
	}
	return admission.Decision{}, &admission.ReplicationError{
		Op: "admit", Activity: activity, Wanted: s.ack.n, Acked: acked, ReservationID: d.ReservationID,
	}
}

// evalAcked runs script (source src) with keys and args followed by a WAIT, as Script.Run does
// (EVALSHA, then EVAL on NOSCRIPT), and returns the script's reply and the replicas that
// acknowledged.
func (s *Store) evalAcked(ctx context.Context, script *redis.Script, src string, keys []string, args ...any) (*redis.Cmd, int64, error) {
	build := func(name string, body any) *redis.Cmd {
		a := make([]any, 0, 3+len(keys)+len(args))
		a = append(a, name, body, len(keys))
		for _, k := range keys {
			a = append(a, k)
		}
		a = append(a, args...)
		c := redis.NewCmd(ctx, a...)
		c.SetFirstKeyPos(3)
		return c
	}
	cmd := build("evalsha", script.Hash())
	acked, err := s.ack.send(ctx, keys[0], cmd)
	if cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = build("eval", src)
		acked, err = s.ack.send(ctx, keys[0], cmd)
	}
	return cmd, acked, err
}
