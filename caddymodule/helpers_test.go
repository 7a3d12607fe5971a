package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/golang-jwt/jwt/v5"

	"github.com/caddy-seckill/caddy-seckill/caddymodule"
)

// jwtSecret is the HS256 secret of every test sale.
var jwtSecret = []byte("test-jwt-secret-0123456789abcdef")

// rfc3339 formats t as the Caddyfile wants it.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// activityBlock is the Caddyfile block of one activity.
func activityBlock(id string, stock, limit int, start, end time.Time, reveal time.Duration) string {
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tlimit %d\n\tstart %s\n\tend %s\n\treveal %s\n}\n",
		id, stock, limit, rfc3339(start), rfc3339(end), reveal)
}

// bucketsBlock is the Caddyfile block of an open activity (limit 1) whose stock is split into
// buckets.
func bucketsBlock(id string, stock, buckets int) string {
	now := time.Now()
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tstart %s\n\tend %s\n\tbuckets %d\n}\n",
		id, stock, rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), buckets)
}

// jwtBlock is the seckill app's jwt block for jwtSecret.
const jwtBlock = "jwt {\n\talgorithms HS256\n\thmac_secret test-jwt-secret-0123456789abcdef\n}\n"

// app returns the running seckill app.
func app(t testing.TB) *caddymodule.App {
	t.Helper()
	v, err := caddy.ActiveContext().App("seckill")
	if err != nil {
		t.Fatal(err)
	}
	return v.(*caddymodule.App)
}

// remaining reads the stock left straight from the store, bypassing every cache.
func remaining(t *testing.T, activity string) int64 {
	t.Helper()
	n, err := app(t).Guard().Store().Remaining(context.Background(), activity)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// token mints an HS256 token for user, valid for an hour.
func token(t testing.TB, user string) string {
	t.Helper()
	return signToken(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	})
}

func signToken(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// client talks to a test sale.
type client struct {
	t    testing.TB
	base string
	http *http.Client
}

// afterReload drops the connections c kept alive: they were the old server's, which closes them
// at a moment of its own (see loadCaddy).
func (c *client) afterReload() { c.http.CloseIdleConnections() }

func newClient(t testing.TB, base string) *client {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: base, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// response is an answer with its decoded JSON body.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r response) code() string {
	s, _ := r.body["code"].(string)
	return s
}

func (r response) str(key string) string {
	s, _ := r.body[key].(string)
	return s
}

func (r response) num(key string) int64 {
	f, _ := r.body[key].(float64)
	return int64(f)
}

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.raw))
}

// do sends a request; tok, when set, is sent as a bearer token, and hdr adds headers.
func (c *client) do(method, path, tok string, body io.Reader, hdr ...string) response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	// Errors are reported with Errorf, not Fatalf: do runs on the goroutines of the rush tests.
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Errorf("%s %s: read body: %v", method, path, err)
		return response{}
	}
	r := response{status: res.StatusCode, header: res.Header, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			c.t.Errorf("%s %s: answer is not JSON: %v: %s", method, path, err, raw)
		}
	}
	return r
}

func (c *client) get(path, tok string) response { return c.do(http.MethodGet, path, tok, nil) }

func (c *client) post(path, tok, body string, hdr ...string) response {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return c.do(http.MethodPost, path, tok, r, hdr...)
}

// expect fails the test unless r has the status and the code.
func expect(t testing.TB, what string, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Errorf("%s: got %s; want %d %q", what, r, status, code)
	}
}
