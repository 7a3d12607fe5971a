package redisclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/clusterslot"
)

// ErrNotMaster is the error of a command whose answer came from a node that another node no
// longer names as the master of the command's slot: a master stopped long enough to be replaced
// runs the commands waiting in its sockets when it continues, before it learns that it was
// replaced. Such an answer is never taken: a stream read would hand the order backend wins that
// exist only on the replaced master (docs/failover.md).
var ErrNotMaster = errors.New("redisclient: the answering node is no longer the master of the key's slot")

const (
	// slowAnswer: a script or claim answered later than this may have waited in a stopped
	// master's socket, so its node's mastership is confirmed before the answer is taken. Stream
	// reads that deliver entries are always confirmed (they block by design), and so are
	// delivery scripts marked with ConfirmDelivery.
	slowAnswer = time.Second
	// confirmTimeout bounds the question to the other nodes; without an answer in time the
	// answer is taken (a rush must not stall on a slow peer: the map monitor still cuts a
	// replaced master within about a second).
	confirmTimeout = 300 * time.Millisecond
)

// deliveryKey is the context key of ConfirmDelivery's predicate.
type deliveryKey struct{}

// ConfirmDelivery returns ctx marked so that a script answered on it is confirmed however fast it
// answered, when delivered reports that the answer hands out stream entries: a script that
// delivers entries (the store's read_new.lua) is a stream read by other means, and its answer
// must not come from a replaced master any more than an XREADGROUP's may.
func ConfirmDelivery(ctx context.Context, delivered func(redis.Cmder) bool) context.Context {
	return context.WithValue(ctx, deliveryKey{}, delivered)
}

// Delivers reports whether ctx carries ConfirmDelivery's mark and cmd's answer delivered entries:
// what the node hook asks of a script's answer before it takes it.
func Delivers(ctx context.Context, cmd redis.Cmder) bool {
	f, _ := ctx.Value(deliveryKey{}).(func(redis.Cmder) bool)
	return f != nil && f(cmd)
}

// confirmKey returns the key whose slot's master must confirm cmd's answer, or "" when the
// answer needs no confirmation.
func confirmKey(ctx context.Context, cmd redis.Cmder, elapsed time.Duration) string {
	args := cmd.Args()
	switch cmd.Name() {
	// Answered without error: it returned entries. A plain XREAD delivers nothing, but the store
	// waits with it for new entries (redisstore.Store.ReadGroup) and delivers them with a
	// script sent at once to the same node: a replaced master that answers the wait must be
	// refused before that script reaches it.
	case "xreadgroup", "xread":
		for i := 1; i+1 < len(args); i++ {
			if s, ok := args[i].(string); ok && strings.EqualFold(s, "streams") {
				return argString(args[i+1])
			}
		}
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if (elapsed >= slowAnswer || Delivers(ctx, cmd)) && len(args) > 3 && argString(args[2]) != "0" {
			return argString(args[3])
		}
	case "xclaim", "xautoclaim":
		if elapsed >= slowAnswer && len(args) > 1 {
			return argString(args[1])
		}
	}
	return ""
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(a)
}

// confirm asks the other masters of the last slot map (every other node before the first map)
// which node is the master of key's slot, and returns ErrNotMaster when the first to answer names
// another node than the one that answered (node, at addr). Nodes are told apart by id, not
// address: go-redis may reach a node by another address than the one it announces (a seed's host
// name, a loopback address replaced by the host), and a node reached by two addresses must not
// vouch for itself.
func (m *monitor) confirm(node *redis.Client, addr, key string) error {
	slot := clusterslot.Of(key)
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	self, err := m.nodeID(ctx, node)
	if err != nil {
		return nil // cannot tell; the map monitor's cut still follows
	}
	m.mu.Lock()
	var others []*redis.Client
	for a, n := range m.nodes {
		if a != addr && (len(m.masters) == 0 || m.masters[a]) {
			others = append(others, n)
		}
	}
	m.mu.Unlock()
	answers := make(chan string, len(others))
	for _, n := range others {
		go func() {
			if id, err := m.nodeID(ctx, n); err != nil || id == self {
				answers <- ""
				return
			}
			master, err := clusterslot.Master(ctx, n, slot)
			if err != nil {
				answers <- ""
				return
			}
			answers <- master.ID
		}()
	}
	for range others {
		select {
		case <-ctx.Done():
			return nil
		case master := <-answers:
			switch {
			case master == "":
				continue
			case master != self:
				select {
				case m.wake <- struct{}{}:
				default:
				}
				return fmt.Errorf("%s (node %s) answered for slot %d, whose master is node %s: %w", addr, self, slot, master, ErrNotMaster)
			default:
				return nil
			}
		}
	}
	return nil
}

// nodeID returns node's cluster id, asked once per node client.
func (m *monitor) nodeID(ctx context.Context, node *redis.Client) (string, error) {
	m.mu.Lock()
	id, ok := m.ids[node]
	m.mu.Unlock()
	if ok {
		return id, nil
	}
	id, err := clusterslot.ID(ctx, node)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	m.ids[node] = id
	m.mu.Unlock()
	return id, nil
}
