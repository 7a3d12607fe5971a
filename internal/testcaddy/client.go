package testcaddy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Client talks to a test sale.
type Client struct {
	t    testing.TB
	Base string       // the sale's base URL
	HTTP *http.Client // its connections close when the test ends
}

// AfterReload drops the connections c kept alive: they were the old server's, which closes them
// at a moment of its own (see LoadCaddy).
func (c *Client) AfterReload() { c.HTTP.CloseIdleConnections() }

// NewClient returns a client of the sale at base.
func NewClient(t testing.TB, base string) *Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	return ClientOf(t, base, &http.Client{Transport: tr, Timeout: 30 * time.Second})
}

// ClientOf returns a client of the sale at base that sends on hc, which other clients may share.
func ClientOf(t testing.TB, base string, hc *http.Client) *Client {
	return &Client{t: t, Base: base, HTTP: hc}
}

// Response is an answer with its decoded JSON body.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any // nil unless the answer is JSON
}

// Code is the answer's code.
func (r Response) Code() string {
	s, _ := r.Body["code"].(string)
	return s
}

// Str is the body's string field key.
func (r Response) Str(key string) string {
	s, _ := r.Body[key].(string)
	return s
}

// Num is the body's number field key.
func (r Response) Num(key string) int64 {
	f, _ := r.Body[key].(float64)
	return int64(f)
}

func (r Response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Raw))
}

// Do sends a request; tok, when set, is sent as a bearer token, and hdr adds headers.
func (c *Client) Do(method, path, tok string, body io.Reader, hdr ...string) Response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.Base+path, body)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return Response{}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	// Errors are reported with Errorf, not Fatalf: Do runs on the goroutines of the rush tests.
	res, err := c.HTTP.Do(req)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return Response{}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Errorf("%s %s: read body: %v", method, path, err)
		return Response{}
	}
	r := Response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			c.t.Errorf("%s %s: answer is not JSON: %v: %s", method, path, err, raw)
		}
	}
	return r
}

// Get sends a GET.
func (c *Client) Get(path, tok string) Response { return c.Do(http.MethodGet, path, tok, nil) }

// Post sends a POST with body (none when empty).
func (c *Client) Post(path, tok, body string, hdr ...string) Response {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return c.Do(http.MethodPost, path, tok, r, hdr...)
}

// Expect fails the test unless r has the status and the code.
func Expect(t testing.TB, what string, r Response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code() != code {
		t.Errorf("%s: got %s; want %d %q", what, r, status, code)
	}
}

// BuyPath asks for the user's buy path (captcha off).
func BuyPath(t testing.TB, c *Client, activity, tok string) string {
	t.Helper()
	r := c.Post("/seckill/"+activity+"/path", tok, "")
	if r.Status != http.StatusOK {
		t.Fatalf("path %s: %s", activity, r)
	}
	return r.Str("path")
}

// Eventually polls cond until it holds, for at most 20 s (a bound on a hung test, not a timing
// assertion); last describes what cond saw.
func Eventually(t testing.TB, what string, cond func() (ok bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: gave up waiting; last: %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MetricValue returns the value of the sample line that starts with series in a text exposition.
func MetricValue(t testing.TB, exposition, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s", series)
	return 0
}
