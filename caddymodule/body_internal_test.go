package caddymodule

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// failingBody fails every Read: a body that must not be read.
type failingBody struct{ reads int }

func (b *failingBody) Read([]byte) (int, error) { b.reads++; return 0, errors.New("read") }
func (b *failingBody) Close() error             { return nil }

// TestReadBodyEmpty checks that a request declaring an empty body is answered without reading it,
// and that the other lengths still are read.
func TestReadBodyEmpty(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int64
		reads  bool
	}{
		{"content-length 0", 0, false},
		{"unknown length (chunked)", -1, true},
		{"content-length 9", 9, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &failingBody{}
			r := httptest.NewRequest(http.MethodPost, "/seckill/a/buy/x", nil)
			r.Body, r.ContentLength = body, tc.length
			q := &request{w: httptest.NewRecorder(), r: r}
			b, e := q.readBody()
			if !tc.reads {
				if e != nil || b != nil || body.reads != 0 {
					t.Fatalf("readBody = %q, %v after %d reads; want nothing read", b, e, body.reads)
				}
				return
			}
			if e == nil || body.reads == 0 {
				t.Fatalf("readBody = %q, %v after %d reads; want the failing body read", b, e, body.reads)
			}
		})
	}
	// A body that is there is still read whole.
	r := httptest.NewRequest(http.MethodPost, "/seckill/a/buy/x", io.NopCloser(strings.NewReader(`{"qty":2}`)))
	q := &request{w: httptest.NewRecorder(), r: r}
	if b, e := q.readBody(); e != nil || string(b) != `{"qty":2}` {
		t.Fatalf("readBody = %q, %v", b, e)
	}
}
