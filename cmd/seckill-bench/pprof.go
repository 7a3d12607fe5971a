package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profiler fetches the gateway's profiles from Caddy's admin endpoint (/debug/pprof/), so that a
// missed goal comes with the profile that explains it: a CPU profile of the first seconds of the
// buy path and of the sold-out path, and a heap profile after the run. With trace it also saves an
// execution trace of the same seconds: where a request waited (for the scheduler, the network, a
// lock) is in the trace, not in the CPU profile. When the bench started the standalone order
// backend, its CPU profiles of the same seconds come from its -metrics-listen, as
// orderbackend-<name>-cpu.pprof: what the backend spent turning the wins into orders.
type profiler struct {
	admin   string
	orders  string // the order backend's metrics listener (base URL), "" when there is none
	dir     string
	seconds time.Duration
	trace   bool
	out     io.Writer

	wg sync.WaitGroup
	mu sync.Mutex // serializes the messages to out: the fetches run concurrently
}

// cpu starts a CPU profile (and the trace, when asked for) of the next d (at most p.seconds) in the background; name names the file.
func (p *profiler) cpu(ctx context.Context, name string, d time.Duration) {
	if p == nil {
		return
	}
	d = min(d, p.seconds)
	secs := max(int(d/time.Second), 1)
	profile := fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.fetch(ctx, "gateway", p.admin, profile, name+"-cpu.pprof")
	}()
	if p.orders != "" {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.fetch(ctx, "orderbackend", p.orders, profile, "orderbackend-"+name+"-cpu.pprof")
		}()
	}
	if !p.trace {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.fetch(ctx, "gateway", p.admin, fmt.Sprintf("/debug/pprof/trace?seconds=%d", secs), name+".trace")
	}()
}

// heap saves the gateway's heap profile now.
func (p *profiler) heap(ctx context.Context) {
	if p == nil {
		return
	}
	p.fetch(ctx, "gateway", p.admin, "/debug/pprof/heap", "heap.pprof")
}

// wait waits for the profiles in flight.
func (p *profiler) wait() {
	if p != nil {
		p.wg.Wait()
	}
}

// fetch saves base+uri, a profile of who (the process named in the messages), into file.
func (p *profiler) fetch(ctx context.Context, who, base, uri, file string) {
	path := filepath.Join(p.dir, file)
	err := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+uri, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		_, _ = fmt.Fprintf(p.out, "warning: %s profile %s: %v\n", who, uri, err)
		return
	}
	_, _ = fmt.Fprintf(p.out, "%s profile: %s (go tool pprof %s)\n", who, path, path)
}
