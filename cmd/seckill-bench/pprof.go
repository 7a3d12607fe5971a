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
// lock) is in the trace, not in the CPU profile.
type profiler struct {
	admin   string
	dir     string
	seconds time.Duration
	trace   bool
	out     io.Writer

	wg sync.WaitGroup
}

// cpu starts a CPU profile (and the trace, when asked for) of the next d (at most p.seconds) in the background; name names the file.
func (p *profiler) cpu(ctx context.Context, name string, d time.Duration) {
	if p == nil {
		return
	}
	d = min(d, p.seconds)
	secs := max(int(d/time.Second), 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.fetch(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), name+"-cpu.pprof")
	}()
	if !p.trace {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.fetch(ctx, fmt.Sprintf("/debug/pprof/trace?seconds=%d", secs), name+".trace")
	}()
}

// heap saves a heap profile now.
func (p *profiler) heap(ctx context.Context) {
	if p == nil {
		return
	}
	p.fetch(ctx, "/debug/pprof/heap", "heap.pprof")
}

// wait waits for the profiles in flight.
func (p *profiler) wait() {
	if p != nil {
		p.wg.Wait()
	}
}

func (p *profiler) fetch(ctx context.Context, uri, file string) {
	path := filepath.Join(p.dir, file)
	err := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.admin+uri, nil)
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
	if err != nil {
		_, _ = fmt.Fprintf(p.out, "warning: gateway profile %s: %v\n", uri, err)
		return
	}
	_, _ = fmt.Fprintf(p.out, "gateway profile: %s (go tool pprof %s)\n", path, path)
}
