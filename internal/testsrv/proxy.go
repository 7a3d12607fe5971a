package testsrv

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of a test server that can lose a reply on purpose: it reads the
// server's reply and then drops the client's connection instead of passing the reply on, which
// is what a network failure after the server acted looks like to a client.
type Proxy struct {
	Addr string // host:port clients dial

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	drop  func([]byte) bool // armed rule; nil when disarmed
	conns map[net.Conn]struct{}

	drops atomic.Int64

	holding atomic.Bool
	held    map[net.Conn]*heldBytes // per client connection: server bytes not passed on yet
}

// heldBytes is what Hold kept back on one connection; mu also orders its writes to the client.
type heldBytes struct {
	mu  sync.Mutex
	buf []byte
}

// StartProxy listens on a free loopback port and forwards every connection to target. It is
// closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, held: map[net.Conn]*heldBytes{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// DropNextReply arms the proxy: the next bytes any server connection sends are read and then
// discarded, and both sides of that connection are closed. It fires once.
func (p *Proxy) DropNextReply() {
	p.arm(func([]byte) bool { return true })
}

// DropNextReplyContaining is DropNextReply for the next chunk of server bytes that contains sub.
func (p *Proxy) DropNextReplyContaining(sub string) {
	p.arm(func(b []byte) bool { return bytes.Contains(b, []byte(sub)) })
}

// Hold stops passing server bytes on: the proxy keeps them, as a slow or partitioned network
// would, until Unhold. Bytes still held when the server's connection ends are lost, which is what
// happens to a replication stream in flight when its master dies.
func (p *Proxy) Hold() { p.holding.Store(true) }

// Unhold passes on what Hold kept, in order, and forwards as usual from then on.
func (p *Proxy) Unhold() {
	p.holding.Store(false)
	p.mu.Lock()
	links := make(map[net.Conn]*heldBytes, len(p.held))
	for c, h := range p.held {
		links[c] = h
	}
	p.mu.Unlock()
	for c, h := range links {
		h.mu.Lock()
		if len(h.buf) > 0 {
			_, _ = c.Write(h.buf)
			h.buf = nil
		}
		h.mu.Unlock()
	}
}

// Drops reports how many replies the proxy has dropped.
func (p *Proxy) Drops() int64 { return p.drops.Load() }

// Close stops accepting, closes every proxied connection and waits for the pumps to end.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil // connections accepted from now on are refused
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) arm(rule func([]byte) bool) {
	p.mu.Lock()
	p.drop = rule
	p.mu.Unlock()
}

// fire reports whether chunk must be dropped, disarming the rule when it matches.
func (p *Proxy) fire(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop == nil || !p.drop(chunk) {
		return false
	}
	p.drop = nil
	p.drops.Add(1)
	return true
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.wg.Add(2)
		go p.pumpUp(client, server)
		go p.pumpDown(server, client)
	}
}

// pumpUp forwards client bytes to the server unchanged.
func (p *Proxy) pumpUp(client, server net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(server, client)
	p.closePair(client, server)
}

// pumpDown forwards server bytes to the client, unless the armed rule drops them.
func (p *Proxy) pumpDown(server, client net.Conn) {
	defer p.wg.Done()
	defer p.closePair(client, server)
	h := &heldBytes{}
	p.mu.Lock()
	p.held[client] = h
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.held, client)
		p.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.fire(buf[:n]) {
				return
			}
			if !p.forward(h, client, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forward writes chunk to client after anything held before it, or keeps it while holding.
func (p *Proxy) forward(h *heldBytes, client net.Conn, chunk []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.holding.Load() {
		h.buf = append(h.buf, chunk...)
		return true
	}
	if len(h.buf) > 0 {
		if _, err := client.Write(h.buf); err != nil {
			return false
		}
		h.buf = nil
	}
	_, err := client.Write(chunk)
	return err == nil
}

func (p *Proxy) closePair(a, b net.Conn) {
	_ = a.Close()
	_ = b.Close()
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
}
