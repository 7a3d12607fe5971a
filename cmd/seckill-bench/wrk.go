package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// wrkRequests prepares the buys a light load generator (wrk, scripts/wrk-buy.lua) sends: for users
// first..first+n-1 of the bench's numbering (user i is u<i>, buys in activity i mod A, comes from
// its own address), it mints the token, asks the gateway for the buy path (captcha off) and writes
// one line per user: path, "Bearer <token>", X-Forwarded-For and Idempotency-Key, tab-separated.
// The respond yardstick gets the very same lines with the baseline prefix before the path.
func wrkRequests(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill-bench wrk-requests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "base URL of the gateway (it must serve the bench's config, see gateway-config)")
	secret := fs.String("jwt-secret", "", "HS256 secret of the gateway's jwt block")
	first := fs.Int("first", 0, "number of the first user")
	n := fs.Int("users", 10000, "how many users")
	acts := fs.Int("activities", 10, "activities of the gateway's config")
	prefix := fs.String("prefix", "/seckill", "where the seckill handler is mounted")
	actPrefix := fs.String("activity-prefix", "bench-", "activity ids are this prefix and a number")
	out := fs.String("out", "", "file to write (default standard output)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *target == "" || len(*secret) < 32 || *n < 1 || *acts < 1 || *first < 0 || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "seckill-bench wrk-requests: want -target URL -jwt-secret S (32+ bytes) [-first K] [-users N] [-activities A] [-out FILE]")
		return exitUsage
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench wrk-requests:", err)
			return exitError
		}
		defer func() { _ = f.Close() }()
		w = f
	}
	// Two gateways on one port answer with their own secrets: 404s and 401s that are not the
	// gateway's. Say so rather than fail on a user's path.
	if err := checkTarget(*target, 0); err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench wrk-requests:", err)
		return exitError
	}
	lines, err := prepareBuys(ctx, *target, []byte(*secret), *prefix, *actPrefix, *first, *n, *acts)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench wrk-requests:", err)
		return exitError
	}
	bw := bufio.NewWriter(w)
	for _, l := range lines {
		_, _ = bw.WriteString(l)
	}
	if err := bw.Flush(); err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench wrk-requests:", err)
		return exitError
	}
	return exitOK
}

// prepareBuys returns the request lines of users first..first+n-1, in order.
func prepareBuys(ctx context.Context, target string, secret []byte, prefix, actPrefix string, first, n, acts int) ([]string, error) {
	c := newClient(target, 64, 30*time.Second)
	defer c.close()
	lines := make([]string, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next = make(chan int)
	)
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				i := first + k
				tok, err := jwtauth.Mint(jwtauth.MintConfig{Algorithm: "HS256", Secret: secret, Subject: userID(i), TTL: 2 * time.Hour})
				if err == nil {
					act := fmt.Sprintf("%s%d", actPrefix, i%acts)
					a := c.do(ctx, request{method: "POST", path: prefix + "/" + act + "/path", user: i, auth: "Bearer " + tok, body: "{}"})
					if a.Err != nil || a.Status != 200 || a.Path == "" {
						err = statusError("path of "+userID(i), a)
					}
					lines[k] = fmt.Sprintf("%s\tBearer %s\t%s\twrk-%d\n", a.Path, tok, ip(i), i)
				}
				if err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for k := 0; k < n && ctx.Err() == nil; k++ {
		next <- k
	}
	close(next)
	wg.Wait()
	if ferr == nil {
		ferr = ctx.Err()
	}
	return lines, ferr
}
