package caddymodule_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// TestURLSecretReload: a reload that changes url_secret during a sale invalidates the buy paths
// handed out before it (404 bad_path), as README and caddymodule/README.md say; a buyer fetches a
// new path, and a buy retried with its Idempotency-Key on the new path gets its first answer. The
// start logs one warning naming the running sale (not the one whose path is not handed out yet);
// a reload that keeps the secret logs none.
func TestURLSecretReload(t *testing.T) {
	port, dir := freePort(t), t.TempDir()
	t.Cleanup(func() { _ = caddy.Stop() })
	now := time.Now()
	load := func(secret, logName string) string {
		t.Helper()
		logFile := filepath.Join(dir, logName)
		err := loadCaddyfileOn(t, port, fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	http_port %d
	storage file_system %s
	log {
		output file %s
		level WARN
	}
	seckill {
%s
		url_secret %s
	}
}

http://127.0.0.1:%d {
%s
}
`, port, dir, logFile, jwtBlock+"captcha off\n"+activityBlock("run", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)+
			activityBlock("soon", 5, 1, now.Add(time.Hour), now.Add(2*time.Hour), 0), secret, port, route))
		if err != nil {
			t.Fatal(err)
		}
		return logFile
	}
	const warning = "url_secret changed while a sale runs"

	first := load("first-url-secret", "first.log")
	if w, log := logEntries(t, first, warning); len(w) != 0 {
		t.Fatalf("first start warned: %v\n%s", w, log)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	alice := token(t, "alice")
	oldPath := buyPath(t, c, "run", alice)
	won := c.Post(oldPath, alice, "", "Idempotency-Key", "alice-1")
	expect(t, "alice buys", won, http.StatusAccepted, "queued")

	changed := load("second-url-secret", "second.log")
	c.AfterReload()
	w, log := logEntries(t, changed, warning)
	if len(w) != 1 || w[0]["level"] != "warn" || fmt.Sprint(w[0]["activities"]) != "[run]" {
		t.Errorf("reload with a new url_secret: %v, want one warning naming activity run; log:\n%s", w, log)
	}
	expect(t, "a buy on the path handed out before", c.Post(oldPath, alice, "", "Idempotency-Key", "alice-1"),
		http.StatusNotFound, "bad_path")
	newPath := buyPath(t, c, "run", alice)
	if newPath == oldPath {
		t.Fatalf("the path call answers the old path %s after the secret changed", oldPath)
	}
	again := c.Post(newPath, alice, "", "Idempotency-Key", "alice-1")
	expect(t, "the retry on a new path", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != won.Str("reservation_id") {
		t.Errorf("the retry answers reservation %q, want the first answer's %q", again.Str("reservation_id"), won.Str("reservation_id"))
	}
	bob := token(t, "bob")
	expect(t, "bob buys on a new path", c.Post(buyPath(t, c, "run", bob), bob, ""), http.StatusAccepted, "queued")

	same := load("second-url-secret", "third.log")
	c.AfterReload()
	if w, log := logEntries(t, same, warning); len(w) != 0 {
		t.Errorf("reload keeping url_secret warned: %v\n%s", w, log)
	}
	expect(t, "the path after an unchanged reload", c.Post(newPath, alice, "", "Idempotency-Key", "alice-1"),
		http.StatusAccepted, "queued")
}
