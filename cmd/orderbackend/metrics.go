package main

import (
	"net/http"
	"net/http/pprof" // its init also registers on http.DefaultServeMux, which this process never serves
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// metricsServer serves /metrics (the order counters and payment notifications, the Go runtime
// and the process) and /debug/pprof/ on the operators' listener. It has a mux of its own: the
// order API faces clients and must serve neither.
func metricsServer(b *orderbackend.Backend) *http.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		orderbackend.NewCollector(b.Metrics),
		orderbackend.NewBacklogCollector(b.Backlog),
		orderbackend.NewNotificationCollector(b.Notifications),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: heap, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No WriteTimeout: a CPU profile or a trace answers after the seconds it was asked for.
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
