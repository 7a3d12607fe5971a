package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

func TestClassifyWait(t *testing.T) {
	for _, c := range []struct {
		frames []string
		want   waitKind
	}{
		{[]string{"internal/poll.(*FD).Read", "github.com/redis/go-redis/v9/internal/proto.(*Reader).PeekReplyType",
			"github.com/caddy-seckill/caddy-seckill/admission/redisstore.(*Store).runAdmitBatch"}, waitAdmitReply},
		{[]string{"runtime.selectgo", "github.com/redis/go-redis/v9/internal/pool.(*ConnPool).waitTurn",
			"github.com/caddy-seckill/caddy-seckill/admission/redisstore.(*Store).runAdmitBatch"}, waitRedisPool},
		{[]string{"internal/poll.(*FD).Read", "github.com/redis/go-redis/v9.(*baseClient)._process",
			"github.com/caddy-seckill/caddy-seckill/admission/redisstore.(*Store).AppendResult"}, waitRedisReply},
		{[]string{"runtime.selectgo", "github.com/caddy-seckill/caddy-seckill/admission/redisstore.(*admitGroups).admit"}, waitAdmitBatch},
		{[]string{"internal/poll.(*FD).Read", "net/http.(*connReader).Read", "bufio.(*Reader).Peek", "net/http.(*conn).serve"}, waitNextRequest},
		{[]string{"internal/poll.(*FD).Read", "net/http.(*connReader).backgroundRead"}, waitBackground},
		{[]string{"sync.(*Cond).Wait", "net/http.(*connReader).abortPendingRead", "net/http.(*conn).serve"}, waitEndRequest},
		{[]string{"sync.(*Mutex).Lock", "net/http.(*conn).serve"}, waitHTTPOther},
		{[]string{"time.Sleep"}, waitOther},
	} {
		if got := classifyWait(c.frames); got != c.want {
			t.Errorf("classifyWait(%q) = %q, want %q", c.frames, got, c.want)
		}
	}
}

// TestEndToEndTraceWaits runs a short sale against a real gateway and Redis with -pprof -trace,
// and reads the saved trace: the buyers' waits for their batch and the batches' waits for
// Redis's reply must be there, which is what the subcommand exists to show.
func TestEndToEndTraceWaits(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	rd := testsrv.StartRedis(t)
	prof := t.TempDir()
	runBench(t, "-gateway-bin", caddy, "-store", "redis", "-redis-addr", rd.Addr,
		"-scenario", "open", "-rate", "400", "-users", "400", "-activities", "2", "-stock", "100",
		"-soak", "500ms", "-slice", "250ms", "-pprof", prof, "-trace", "-pprof-seconds", "1s")
	f, err := os.Open(filepath.Join(prof, "sale.trace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := readWaits(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []waitKind{waitAdmitBatch, waitAdmitReply, waitNextRequest} {
		if h := rep.Blocked[k]; h == nil || h.Count() == 0 {
			t.Errorf("no %q waits in the sale's trace", k)
		}
	}
	if len(rep.ProcsRunning) == 0 || rep.Span <= 0 {
		t.Errorf("trace span %v, processors %v: want both", rep.Span, rep.ProcsRunning)
	}

	var out, errOut bytes.Buffer
	if code := cli(context.Background(), []string{"waits", filepath.Join(prof, "sale.trace")}, &out, &errOut); code != exitOK {
		t.Fatalf("waits: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), string(waitAdmitReply)) {
		t.Errorf("waits printed no admission row:\n%s", out.String())
	}
}

func TestWaitsErrors(t *testing.T) {
	notTrace := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(notTrace, []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]int{"": exitUsage, notTrace: exitError, notTrace + ".missing": exitError} {
		var out, errOut bytes.Buffer
		argv := []string{"waits"}
		if args != "" {
			argv = append(argv, args)
		}
		if code := cli(context.Background(), argv, &out, &errOut); code != want {
			t.Errorf("waits %q: exit %d, want %d (%s)", args, code, want, errOut.String())
		}
	}
}
