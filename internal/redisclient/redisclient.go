// Package redisclient builds the go-redis clients of the gateway and of the order backend, so
// that both survive a Redis Cluster failover within about a second of the promotion.
//
// go-redis (v9.23.0) re-reads a Cluster's slot map only when a node answers MOVED or READONLY, or
// when the map is older than ClusterStateReloadInterval (60 s by default). A master killed by
// SIGKILL answers nothing, so every command for its slots keeps going to the dead address until
// the periodic reload: 30 to 60 s of failures after the replica took over (docs/failover.md). New
// adds a watch: once a command to a node fails at the connection (refused, reset, timed out), the
// slot map is re-read every WatchInterval until the map no longer names that node as a master or
// the node answers again.
package redisclient

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Watch timing. A CLUSTER SLOTS every 250 ms per client during an outage costs Redis nothing
// noticeable; a Cluster promotes a replica after cluster-node-timeout plus about a second.
const (
	WatchInterval = 250 * time.Millisecond
	// watchBudget ends the watch of a node that neither comes back nor loses its slots (the whole
	// cluster is down); the next failed command starts a new one.
	watchBudget = 5 * time.Minute
	// pingTimeout bounds the check that a watched node answers again.
	pingTimeout = 250 * time.Millisecond
)

// New returns redis.NewUniversalClient(o), with the failover watch when it is a Cluster client.
func New(o *redis.UniversalOptions) redis.UniversalClient {
	c := redis.NewUniversalClient(o)
	if cc, ok := c.(*redis.ClusterClient); ok {
		Watch(cc)
	}
	return c
}

// Watch adds the failover watch to a Cluster client. Call it before the client's first command:
// only the node clients created afterwards report their failures.
func Watch(cc *redis.ClusterClient) {
	w := &watcher{cluster: cc, every: WatchInterval, watching: map[string]bool{}}
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(nodeHook{w: w, node: node}) })
}

// watcher runs at most one watch per node address.
type watcher struct {
	cluster *redis.ClusterClient
	every   time.Duration

	mu       sync.Mutex
	watching map[string]bool
}

// failed starts watching node unless a watch of its address is running.
func (w *watcher) failed(node *redis.Client) {
	addr := node.Options().Addr
	w.mu.Lock()
	if w.watching[addr] {
		w.mu.Unlock()
		return
	}
	w.watching[addr] = true
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			delete(w.watching, addr)
			w.mu.Unlock()
		}()
		w.watch(node, addr)
	}()
}

// watch re-reads the slot map every interval until addr is no longer a master in it (a replica
// took over) or the node answers PING (it was only paused or restarted in time). It ends when the
// client is closed.
func (w *watcher) watch(node *redis.Client, addr string) {
	for deadline := time.Now().Add(watchBudget); time.Now().Before(deadline); {
		time.Sleep(w.every)
		stillMaster, err := w.reload(addr)
		if errors.Is(err, redis.ErrClosed) {
			return
		}
		if err == nil && !stillMaster {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		err = node.Ping(ctx).Err()
		cancel()
		if err == nil || errors.Is(err, redis.ErrClosed) {
			return
		}
	}
}

// reload re-reads the slot map now (ForEachMaster reloads before it iterates) and reports whether
// addr is still one of its masters.
func (w *watcher) reload(addr string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		found bool
	)
	err := w.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			found = true
			mu.Unlock()
		}
		return nil
	})
	return found, err
}

// nodeHook reports a node's connection failures to the watcher.
type nodeHook struct {
	w    *watcher
	node *redis.Client
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if connectionFailed(err) {
			h.w.failed(h.node)
		}
		return err
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if connectionFailed(err) {
			h.w.failed(h.node)
		}
		return err
	}
}

// connectionFailed reports an error that says nothing about the command and may mean the node is
// gone: not a reply of the server (a script error, MOVED, redis.Nil), not the client closing, not
// the caller giving up.
func connectionFailed(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}
