package testsrv

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ProcessCPU returns the CPU time (user and system) the calling process has used: benchmarks
// report CPU per operation beside ns/op, which on a shared machine moves much less.
func ProcessCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RedisCPU returns the CPU time a redis-server has used, from the text of its INFO cpu answer
// (used_cpu_sys + used_cpu_user, in seconds with microsecond precision).
func RedisCPU(tb testing.TB, info string) time.Duration {
	tb.Helper()
	var total float64
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu %s: %v", k, err)
		}
		total += f
		found++
	}
	if found != 2 {
		tb.Fatalf("INFO cpu: want used_cpu_sys and used_cpu_user in %q", info)
	}
	return time.Duration(total * float64(time.Second))
}

// RedisCommandUsec returns the µs a redis-server has spent running the given commands (lower
// case, as "evalsha"), from the text of its INFO commandstats answer (the usec of each).
func RedisCommandUsec(tb testing.TB, info string, commands ...string) int64 {
	tb.Helper()
	var total int64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range commands {
			v, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for kv := range strings.SplitSeq(v, ",") {
				if u, ok := strings.CutPrefix(kv, "usec="); ok {
					n, err := strconv.ParseInt(u, 10, 64)
					if err != nil {
						tb.Fatalf("INFO commandstats %q: %v", line, err)
					}
					total += n
				}
			}
		}
	}
	return total
}
