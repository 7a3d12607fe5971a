// Package redisclient builds the go-redis clients of the gateway and of the order backend, so
// that both survive a Redis Cluster failover within about a second of the promotion, and take no
// answer from a master after its replica took over.
//
// go-redis alone keeps sending a dead master's slots to its address until its periodic slot-map
// reload (up to a minute), and takes the answers of a replaced master that continues after a
// freeze; how, and what that costs a sale: docs/failover.md.
//
// New adds a monitor to a Cluster client. It reads the slot map itself, from every node at once
// with a short deadline, every PollInterval, and every WatchInterval while a node that failed at
// the connection (refused, reset, timed out) is still a master in it (probe.go: the newest config
// epoch wins, so a node that lags or a replaced master that continues cannot bring an old map
// back). When a master drops out of the map, it closes every connection to it, so that no command
// still waiting there can take its answer, and has go-redis reload its own map. And a stream read
// that delivers entries (or a script or claim answered after a second) is taken only once another
// node confirms that the answering node is still the master of the key's slot (confirm.go): the
// cut comes only once the monitor read the new map, and a replaced master may continue before
// that.
package redisclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/clusterslot"
)

// Monitor timing. A read of the slot map (every node asked at once) every 250 ms per client
// during an outage, and every second otherwise, costs Redis nothing noticeable; a Cluster
// promotes a replica after cluster-node-timeout plus about a second.
const (
	WatchInterval = 250 * time.Millisecond
	PollInterval  = time.Second
)

// New returns redis.NewUniversalClient(o), monitored when it is a Cluster client. o.Dialer, if
// set, is kept for the other kinds; a Cluster client dials through the monitor's.
func New(o *redis.UniversalOptions) redis.UniversalClient {
	if o.MasterName == "" && (o.IsClusterMode || len(o.Addrs) > 1) {
		reg := &conns{byAddr: map[string][]net.Conn{}, replaced: map[string]bool{}}
		dial := o.Dialer
		if dial == nil {
			dial = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
		}
		oo := *o
		oo.Dialer = reg.dialer(dial)
		c := redis.NewUniversalClient(&oo)
		if cc, ok := c.(*redis.ClusterClient); ok {
			m := &monitor{cluster: cc, conns: reg, probes: newProbes(o, dial), wake: make(chan struct{}, 1), stop: make(chan struct{}),
				exited: make(chan struct{}), failing: map[string]bool{}, nodes: map[string]*redis.Client{}, ids: map[*redis.Client]string{}}
			cc.OnNewNode(func(node *redis.Client) {
				m.mu.Lock()
				m.nodes[node.Options().Addr] = node
				m.mu.Unlock()
				node.AddHook(nodeHook{m: m, node: node})
			})
			go m.run()
			return &Cluster{ClusterClient: cc, m: m}
		}
		return c
	}
	return redis.NewUniversalClient(o)
}

// Cluster is a monitored Cluster client.
type Cluster struct {
	*redis.ClusterClient
	m *monitor
}

// Unwrap returns the go-redis Cluster client inside, whose node clients carry the monitor's
// hooks: for callers that need its node clients (the store's replicas_ack picks a slot's master).
func (c *Cluster) Unwrap() *redis.ClusterClient { return c.ClusterClient }

// Close stops the monitor and closes the client.
func (c *Cluster) Close() error {
	c.m.once.Do(func() { close(c.m.stop) })
	<-c.m.exited
	return c.ClusterClient.Close()
}

// monitor follows one Cluster client's masters.
type monitor struct {
	cluster *redis.ClusterClient
	conns   *conns
	probes  *probes   // used by run only
	table   slotTable // used by run only
	wake    chan struct{}
	stop    chan struct{} // closed by Close
	once    sync.Once
	exited  chan struct{} // closed when run returns

	mu      sync.Mutex
	failing map[string]bool          // addresses of nodes that failed at the connection
	nodes   map[string]*redis.Client // every node the client made, by address: asked by confirm
	ids     map[*redis.Client]string // each node's cluster id, once confirm asked it
	masters map[string]bool          // the masters of the last slot map read
}

// failed records that node failed at the connection and wakes the monitor.
func (m *monitor) failed(node *redis.Client) {
	addr := node.Options().Addr
	m.mu.Lock()
	known := m.failing[addr]
	m.failing[addr] = true
	m.mu.Unlock()
	if !known {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// run re-reads the slot map until the client is closed. It reads the map itself, from every
// node at once with a short deadline (probes), rather than through go-redis, which asks one node
// after the other and waits each one's ReadTimeout: a read that asked a stopped master first
// learnt nothing for a second or more. The map it believes (slotTable: the highest config epoch
// wins) decides the cut; go-redis then reloads its own map, from any node but a cut one.
func (m *monitor) run() {
	defer close(m.exited)
	defer m.probes.close()
	var last time.Time
	for {
		m.mu.Lock()
		every := PollInterval
		if len(m.failing) > 0 {
			every = WatchInterval
		}
		m.mu.Unlock()
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-time.After(every - time.Since(last)): // from the start of the last read
		}
		last = time.Now()
		views, asked := m.probes.read()
		if len(views) == 0 {
			continue
		}
		masters := m.table.merge(views, asked)
		m.probes.retarget(views, masters)
		m.mu.Lock()
		for addr := range m.masters {
			if !masters[addr] {
				m.conns.cut(addr) // replaced: nothing it answers from now on may be taken
			}
		}
		m.conns.reinstate(masters)
		m.masters = masters
		for _, v := range views { // it answers: no longer failing
			delete(m.failing, v.origin)
		}
		for addr := range m.failing { // no longer a master: nothing to watch
			if !masters[addr] {
				delete(m.failing, addr)
			}
		}
		m.mu.Unlock()
		// go-redis re-reads its map in the background, one node after the other; a replaced
		// master is cut by now, so it fails at once instead of holding the read. Calls made while
		// one runs are coalesced into one more.
		m.cluster.ReloadState(context.Background())
	}
}

// nodeHook reports a node's connection failures to the monitor.
type nodeHook struct {
	m    *monitor
	node *redis.Client
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		if connectionFailed(err) {
			h.m.failed(h.node)
		}
		if err == nil {
			if key := confirmKey(ctx, cmd, time.Since(start)); key != "" {
				if err := h.m.confirm(h.node, h.node.Options().Addr, key); err != nil {
					cmd.SetErr(err)
					return err
				}
			}
		}
		return err
	}
}

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		if connectionFailed(err) {
			h.m.failed(h.node)
		}
		// A stream read pipelined with its WAIT (the store's replicas_ack) is confirmed like a
		// single one; the pipeline's time stands for each command's, and a slot is asked once.
		elapsed := time.Since(start)
		var asked map[int64]error
		for _, cmd := range cmds {
			if cmd.Err() != nil {
				continue
			}
			key := confirmKey(ctx, cmd, elapsed)
			if key == "" {
				continue
			}
			slot := clusterslot.Of(key)
			cerr, ok := asked[slot]
			if !ok {
				cerr = h.m.confirm(h.node, h.node.Options().Addr, key)
				if asked == nil {
					asked = map[int64]error{}
				}
				asked[slot] = cerr
			}
			if cerr != nil {
				cmd.SetErr(cerr)
				if err == nil {
					err = cerr
				}
			}
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

// conns remembers the connections dialled to each address, so that they can be cut. The pool
// closes them as usual; closed ones are forgotten at the next dial to the same address. An
// address that was cut is not dialled again until it is a master again: go-redis retries a
// failed command on the same node once, and that retry must not wait on the replaced master.
type conns struct {
	mu       sync.Mutex
	byAddr   map[string][]net.Conn
	replaced map[string]bool
}

// errReplaced is the dial error for an address that is no longer a master.
var errReplaced = errors.New("redisclient: the node was replaced as master; not dialling it until it is one again")

// dialer wraps dial; the connection itself is returned as it is (the pool's health check needs
// the raw socket).
func (r *conns) dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		replaced := r.replaced[addr]
		r.mu.Unlock()
		if replaced {
			return nil, fmt.Errorf("dial %s: %w", addr, errReplaced)
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		open := r.byAddr[addr][:0]
		for _, o := range r.byAddr[addr] {
			if !closed(o) {
				open = append(open, o)
			}
		}
		r.byAddr[addr] = append(open, c)
		r.mu.Unlock()
		return c, nil
	}
}

// cut closes every connection to addr: a command waiting on one fails at once.
func (r *conns) cut(addr string) {
	r.mu.Lock()
	cs := r.byAddr[addr]
	delete(r.byAddr, addr)
	r.replaced[addr] = true
	r.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// reinstate lets the addresses that are masters (again) be dialled.
func (r *conns) reinstate(masters map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr := range r.replaced {
		if masters[addr] {
			delete(r.replaced, addr)
		}
	}
}

// closed reports whether c was closed (by the pool): its descriptor is gone.
func closed(c net.Conn) bool {
	if n, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = n.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	return rc.Control(func(uintptr) {}) != nil
}
