package caddymodule_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBodyTimeout trickles a chunked body, one byte every 200 ms, over a raw connection to the
// path call and the demo sign-in (which read their bodies) and to the order API (which reads none, so net/http reads it
// before answering): each gets its answer once body_timeout has passed, and the connection is
// closed, however long the client would go on trickling.
func TestBodyTimeout(t *testing.T) {
	const timeout = time.Second
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nbody_timeout 1s\n"+
		ordersOption("sqlite "+filepath.Join(t.TempDir(), "orders.db"))+
		activityBlock("slow", 10, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		route+"route /orders/* {\n\tseckill_orders\n}\nroute /demo/token {\n\tseckill_demo_signin\n}\n")
	addr := strings.TrimPrefix(base, "http://")
	tok := token(t, "alice")

	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{"the path call reads the body", "/seckill/slow/path", http.StatusRequestTimeout},
		{"the order API reads none", "/orders/o-1/pay", http.StatusNotFound},
		{"the demo sign-in reads the body", "/demo/token", http.StatusRequestTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := trickle(t, addr, tc.path, tok)
			status, body, elapsed := a.status, a.body, a.elapsed
			if status != tc.status || !strings.Contains(body, `"code":"`) {
				t.Fatalf("answer %d %s, want %d with a JSON body", status, body, tc.status)
			}
			if tc.status == http.StatusRequestTimeout && !strings.Contains(body, "did not arrive within 1s") {
				t.Errorf("408 body %s does not name the timeout", body)
			}
			if elapsed < timeout {
				t.Errorf("answered after %s, before body_timeout %s", elapsed, timeout)
			}
			if !a.close {
				t.Errorf("the answer keeps the connection open (no Connection: close)")
			}
		})
	}
}

// trickleAnswer is what the server answered a trickled body.
type trickleAnswer struct {
	status  int
	close   bool // Connection: close
	body    string
	elapsed time.Duration // from the headers' write to the answer
}

// trickle sends a POST to path whose chunked body never ends, one byte every 200 ms for up to a
// minute (Caddy's default read_body_idle is a minute; the trickle never idles), and returns the
// answer once the server has also closed the connection.
func trickle(t *testing.T, addr, path, tok string) trickleAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const limit = time.Minute
	if err := conn.SetReadDeadline(time.Now().Add(limit)); err != nil {
		t.Fatal(err)
	}
	// The clock starts before the headers go: the server arms body_timeout once it has read them,
	// which can happen before this goroutine runs again after the write.
	began := time.Now()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", path, addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for b := byte('{'); time.Since(began) < limit; b = ' ' {
			if _, err := fmt.Fprintf(conn, "1\r\n%c\r\n", b); err != nil {
				return // the server closed the connection
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-done }()

	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer after %s of trickling: %v", time.Since(began).Round(time.Millisecond), err)
	}
	elapsed := time.Since(began)
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	// The server must close the connection now, not read the rest of the trickle.
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Errorf("after the answer the connection is still open: %v", err)
	}
	return trickleAnswer{status: resp.StatusCode, close: resp.Close, body: string(b), elapsed: elapsed}
}

// isReset reports whether err is a connection reset, which a close with unread input may send.
func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
