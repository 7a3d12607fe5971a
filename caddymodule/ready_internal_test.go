package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestHandlerWaitsForStart: Caddy starts a configuration's apps in no set order, so a request may
// reach a handler before the seckill app has opened its store. It waits for the opening; a
// configuration that never starts (or a client that gives up) gets 503 busy, never a nil store.
func TestHandlerWaitsForStart(t *testing.T) {
	app := &App{run: &runner{opened: make(chan struct{})}}
	h := &Handler{app: app, prefix: "/seckill", Errors: "write"}
	serve := func(ctx context.Context) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/seckill/a", nil).WithContext(ctx)
		_ = h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
		return w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if w := serve(ctx); w.Code != http.StatusServiceUnavailable {
		t.Errorf("before the start, a client that gives up: %d %s, want 503", w.Code, w.Body)
	}
	if app.isOpen() {
		t.Error("open before Start")
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(context.Background()) }()
	select {
	case w := <-done:
		t.Fatalf("answered %d before the app started or was cleaned up", w.Code)
	case <-time.After(50 * time.Millisecond):
	}
	if err := app.Cleanup(); err != nil { // a configuration that never started
		t.Fatal(err)
	}
	if w := <-done; w.Code != http.StatusServiceUnavailable {
		t.Errorf("after a cleanup without start: %d %s, want 503", w.Code, w.Body)
	}
}
