package redisclient

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds one node's answer to the monitor's map read. The nodes are asked in
// parallel, so a stopped node costs this once per read, not once per node; and the probe
// clients honour it (ContextTimeoutEnabled), where go-redis's own reads wait ReadTimeout.
const probeTimeout = 500 * time.Millisecond

// probeGrace is how long a read waits for the other nodes once more than half answered.
const probeGrace = 50 * time.Millisecond

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// claim says that the node id, at addr, is the master of a slot, as one node sees it; epoch is
// that master's config epoch as the same node sees it.
type claim struct {
	id    string
	addr  string
	epoch uint64
}

// rangeClaim is a claim for the slots start..end.
type rangeClaim struct {
	start, end int
	claim
}

// view is one node's answer: its slot map with each master's config epoch, the node ids it
// knows, and every address it names (masters and replicas, in go-redis's form).
type view struct {
	origin string
	claims []rangeClaim
	known  map[string]bool
	addrs  []string
}

// probes holds the monitor's own clients, one per node address: one connection each, no
// retries, the context's deadline honoured. They dial without the cut (conns): the monitor must
// still hear a replaced master, whose view then loses on its config epoch.
type probes struct {
	base    redis.Options
	seeds   []string
	clients map[string]*redis.Client
	targets map[string]bool // the addresses the next read asks
}

func newProbes(o *redis.UniversalOptions, dial func(context.Context, string, string) (net.Conn, error)) *probes {
	p := &probes{
		base: redis.Options{
			Dialer: dial, OnConnect: o.OnConnect, Protocol: o.Protocol,
			Username: o.Username, Password: o.Password,
			CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
			StreamingCredentialsProvider: o.StreamingCredentialsProvider,
			DialTimeout:                  probeTimeout, ReadTimeout: probeTimeout, WriteTimeout: probeTimeout,
			ContextTimeoutEnabled: true, PoolSize: 1, MaxRetries: -1, DialerRetries: 1, DisableIdentity: true,
		},
		seeds:   o.Addrs,
		clients: map[string]*redis.Client{},
		targets: map[string]bool{},
	}
	for _, a := range o.Addrs {
		p.targets[a] = true
	}
	return p
}

func (p *probes) client(addr string) *redis.Client {
	c, ok := p.clients[addr]
	if !ok {
		o := p.base
		o.Addr = addr
		c = redis.NewClient(&o)
		p.clients[addr] = c
	}
	return c
}

// read asks every target for its view at once and returns the views that came back, and how
// many nodes were asked. It waits for every answer, but no longer than probeTimeout, nor longer
// than probeGrace once more than half answered: a stopped node never answers, and a promotion
// reaches every live node's view within moments (a later read hears the laggards). A read still
// under way when read returns ends at its own deadline.
func (p *probes) read() ([]*view, int) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	time.AfterFunc(probeTimeout, cancel) // not before: no read is cut short
	got := make(chan *view, len(p.targets))
	for addr := range p.targets {
		c := p.client(addr)
		go func() {
			v, err := readView(ctx, c, addr)
			if err != nil {
				v = nil
			}
			got <- v
		}()
	}
	var views []*view
	var grace <-chan time.Time
wait:
	for range p.targets {
		select {
		case v := <-got:
			if v != nil {
				views = append(views, v)
			}
			if grace == nil && 2*len(views) > len(p.targets) {
				grace = time.After(probeGrace)
			}
		case <-grace:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	return views, len(p.targets)
}

// retarget makes the next read ask the seeds, every address a view of this read named, and the
// masters of the map; the clients of other addresses are closed.
func (p *probes) retarget(views []*view, masters map[string]bool) {
	if len(views) == 0 {
		return // nobody answered: ask the same nodes again
	}
	next := map[string]bool{}
	for _, a := range p.seeds {
		next[a] = true
	}
	for _, v := range views {
		for _, a := range v.addrs {
			next[a] = true
		}
	}
	for a := range masters {
		next[a] = true
	}
	for a, c := range p.clients {
		if !next[a] {
			_ = c.Close()
			delete(p.clients, a)
		}
	}
	p.targets = next
}

func (p *probes) close() {
	for _, c := range p.clients {
		_ = c.Close()
	}
}

// readView asks node (at origin) for CLUSTER SLOTS and CLUSTER NODES in one round trip: the
// slot map in the form go-redis uses, and the config epochs that tell a newer map from an older.
func readView(ctx context.Context, node *redis.Client, origin string) (*view, error) {
	var slots *redis.ClusterSlotsCmd
	var nodes *redis.StringCmd
	if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		slots = p.ClusterSlots(ctx)
		nodes = p.ClusterNodes(ctx)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the slot map of %s: %w", origin, err)
	}
	epochs, known := parseNodes(nodes.Val())
	v := &view{origin: origin, known: known}
	named := map[string]bool{}
	for _, s := range slots.Val() {
		if len(s.Nodes) == 0 || s.Start < 0 || s.End >= slotCount || s.Start > s.End {
			continue
		}
		for _, n := range s.Nodes {
			if a := goredisAddr(n.Addr, origin); !named[a] {
				named[a] = true
				v.addrs = append(v.addrs, a)
			}
		}
		m := s.Nodes[0]
		id := m.ID
		if id == "" {
			id = m.Addr
		}
		v.claims = append(v.claims, rangeClaim{start: s.Start, end: s.End,
			claim: claim{id: id, addr: goredisAddr(m.Addr, origin), epoch: epochs[id]}})
	}
	return v, nil
}

// parseNodes reads each node's config epoch from a CLUSTER NODES answer ("<id> <addr> <flags>
// <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slots>..."), and the ids it names.
func parseNodes(s string) (map[string]uint64, map[string]bool) {
	epochs := map[string]uint64{}
	known := map[string]bool{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		known[f[0]] = true
		if e, err := strconv.ParseUint(f[6], 10, 64); err == nil {
			epochs[f[0]] = e
		}
	}
	return epochs, known
}

// goredisAddr is the address go-redis gives a node that origin names at addr (go-redis
// newClusterState): a loopback address takes the origin's host unless the origin is loopback
// too, and a port 0 (TLS-only clusters) the origin's port. The cut and the failing nodes are
// keyed by go-redis's addresses, so the monitor's must be the same.
func goredisAddr(addr, origin string) string {
	oh, op, _ := net.SplitHostPort(origin)
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() && !isLoopback(oh) {
		h = oh
	}
	if port == "0" && op != "" && op != "0" {
		port = op
	}
	return net.JoinHostPort(h, port)
}

// isLoopback is go-redis's test of a loopback origin host.
func isLoopback(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	h := strings.ToLower(host)
	return h == "localhost" || strings.HasSuffix(h, ".docker.internal")
}

// slotTable is the monitor's slot map: for each slot the claim it believes, kept across reads.
type slotTable struct {
	slots []claim // slotCount long once set; id "" for a slot no master serves
	best  []claim // merge's scratch: the best claim of this read, per slot
}

// merge folds one read's views into the table, Redis Cluster's own way: for each slot the claim
// of the highest config epoch wins (a failover, or a slot moved, always raises it), ties going to
// the claim more views make. A claim of the table yields to one of a lower epoch only when more
// than half of the asked nodes answered and none of them knows its node any more (a cluster
// rebuilt or the node forgotten); otherwise a replaced master that continues, or a node that has
// not heard of the promotion yet, cannot bring the old master back, even if it is the only node
// to answer a read. It returns the addresses of the table's masters.
func (t *slotTable) merge(views []*view, asked int) map[string]bool {
	if t.slots == nil {
		t.slots, t.best = make([]claim, slotCount), make([]claim, slotCount)
	}
	votes := map[claim]int{}
	known := map[string]bool{}
	for _, v := range views {
		seen := map[claim]bool{}
		for _, c := range v.claims {
			k := claim{id: c.id, epoch: c.epoch}
			if !seen[k] {
				seen[k] = true
				votes[k]++
			}
		}
		for id := range v.known {
			known[id] = true
		}
	}
	better := func(a, b claim) bool {
		if a.epoch != b.epoch {
			return a.epoch > b.epoch
		}
		va, vb := votes[claim{id: a.id, epoch: a.epoch}], votes[claim{id: b.id, epoch: b.epoch}]
		if va != vb {
			return va > vb
		}
		return a.id < b.id
	}
	best := t.best
	clear(best)
	for _, v := range views {
		for _, c := range v.claims {
			for s := c.start; s <= c.end; s++ {
				if best[s] != c.claim && (best[s].id == "" || better(c.claim, best[s])) {
					best[s] = c.claim
				}
			}
		}
	}
	majority := 2*len(views) > asked
	masters := map[string]bool{}
	for s := range t.slots {
		c, p := best[s], t.slots[s]
		switch {
		case c.id == "": // no answer names a master for s
			if majority {
				t.slots[s] = claim{}
			}
		case p.id == "", c.epoch > p.epoch, c.id == p.id && c.epoch == p.epoch:
			t.slots[s] = c
		case majority && !known[p.id]:
			t.slots[s] = c
		}
		if a := t.slots[s].addr; a != "" {
			masters[a] = true
		}
	}
	return masters
}
