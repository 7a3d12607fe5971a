package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// client sends the bench's requests over a shared pool of keep-alive connections.
type client struct {
	base string // scheme://host:port
	hc   *http.Client
	bufs sync.Pool // *bytes.Buffer for reading answers
}

func newClient(base string, conns int, timeout time.Duration) *client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &client{
		base: base,
		hc:   &http.Client{Transport: tr, Timeout: timeout},
		bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// answer is what the bench reads from a response: the fields of every §2 answer it needs.
type answer struct {
	Status     int
	Err        error // no answer (connection, timeout)
	RetryAfter time.Duration

	Code          string `json:"code"`
	Path          string `json:"path"`
	ReservationID string `json:"reservation_id"`
	OrderID       string `json:"order_id"`
	Remaining     int64  `json:"remaining"`
	State         string `json:"state"`
	StartMS       int64  `json:"start_ms"`
	ServerTimeMS  int64  `json:"server_time_ms"`
}

// codeWord is the answer's word for the answer counts: the body's code, or a description of what
// came back instead.
func (a *answer) codeWord() string {
	switch {
	case a.Err != nil:
		if errors.Is(a.Err, context.DeadlineExceeded) || isTimeout(a.Err) {
			return "timeout"
		}
		return "transport_error"
	case a.Code != "":
		return a.Code
	}
	return "(no code)"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// request describes one request.
type request struct {
	method string
	path   string
	user   int // -1: no token, no address
	auth   string
	body   string // "" for none
	idem   string // Idempotency-Key
}

// do sends one request and reads the whole answer.
func (c *client) do(ctx context.Context, r request) answer {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.path, body)
	if err != nil {
		return answer{Err: err}
	}
	if r.user >= 0 {
		req.Header["X-Forwarded-For"] = []string{ip(r.user)}
		if r.auth != "" {
			req.Header["Authorization"] = []string{r.auth}
		}
	}
	if r.body != "" {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	if r.idem != "" {
		req.Header["Idempotency-Key"] = []string{r.idem}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{Err: err}
	}
	buf := c.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	a := answer{Status: resp.StatusCode}
	if err != nil {
		a.Err = err
	} else if buf.Len() > 0 {
		// Every answer is decoded, the respond route's too, so both cost the client the same.
		_ = json.Unmarshal(buf.Bytes(), &a) // a body that is not JSON leaves the code empty
	}
	c.bufs.Put(buf)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			a.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return a
}

// statusError describes an unexpected answer to what, wrapping its transport error if it had one.
func statusError(what string, a answer) error {
	if a.Err != nil {
		return fmt.Errorf("%s: HTTP %d: %w", what, a.Status, a.Err)
	}
	return fmt.Errorf("%s: HTTP %d", what, a.Status)
}
