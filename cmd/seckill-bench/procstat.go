package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux the bench targets
// (reading it exactly needs sysconf, i.e. cgo).
const clockTick = 10 * time.Millisecond

// procUsage is a process's CPU time and memory at one instant, from /proc.
type procUsage struct {
	CPU     time.Duration // user + system
	RSS     int64         // bytes, now
	PeakRSS int64         // bytes, the kernel's high-water mark (VmHWM)
}

// readProc reads a process's usage from /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procUsage, error) {
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read process %d stats: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis are
	// plain: state is field 3, utime 14 and stime 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, fmt.Errorf("process %d stats: unexpected format", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("process %d stats: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("process %d stats: bad cpu times", pid)
	}
	u.CPU = time.Duration(ut+st) * clockTick

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("read process %d status: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "VmRSS":
			u.RSS = parseKB(val)
		case "VmHWM":
			u.PeakRSS = parseKB(val)
		}
	}
	return u, nil
}

func parseKB(s string) int64 {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "kB"))
	n, _ := strconv.ParseInt(s, 10, 64)
	return n * 1024
}

// selfCPU returns the bench's own CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPressure returns the machine's cumulated CPU stall time: how long at least one runnable task
// waited for a core (the "some" line of /proc/pressure/cpu, Linux's PSI). It reports false where
// the kernel has no PSI. On a machine the bench shares with the gateway, a stretch with much stall
// is one where latency is queueing for a core, not work.
func cpuPressure() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	return parsePressure(string(b))
}

// parsePressure reads the total of the "some" line of a PSI file, in microseconds.
func parsePressure(s string) (time.Duration, bool) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "some" {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return 0, false
				}
				return time.Duration(n) * time.Microsecond, true
			}
		}
	}
	return 0, false
}

// procWatch follows the CPU time of the gateway, its helpers and the bench itself, so that each
// stretch of a run can be charged the CPU it used.
type procWatch struct {
	gateway int // 0: not known (an external gateway)
	helpers []namedPID
}

// namedPID is a helper process: redis-server, the order backend.
type namedPID struct {
	name string
	pid  int
}

// cpuSample is the cumulated CPU of every watched process at one instant.
type cpuSample struct {
	at      time.Time
	gateway time.Duration
	helpers time.Duration
	bench   time.Duration
	stall   time.Duration // cpuPressure's total, when stallOK
	stallOK bool
}

func (w *procWatch) sample() cpuSample {
	s := cpuSample{at: time.Now(), bench: selfCPU()}
	s.stall, s.stallOK = cpuPressure()
	if w == nil {
		return s
	}
	if w.gateway != 0 {
		if u, err := readProc(w.gateway); err == nil {
			s.gateway = u.CPU
		}
	}
	for _, h := range w.helpers {
		if u, err := readProc(h.pid); err == nil {
			s.helpers += u.CPU
		}
	}
	return s
}

// procDelta is the CPU used over some wall time.
type procDelta struct {
	Wall    time.Duration
	Gateway time.Duration
	Helpers time.Duration
	Bench   time.Duration
	// Stall is the machine's CPU stall time (cpuPressure) over StallWall, the part of Wall for
	// which the kernel reported it.
	Stall, StallWall time.Duration
}

// add charges the CPU used from a to b.
func (d *procDelta) add(a, b cpuSample) {
	d.Wall += b.at.Sub(a.at)
	d.Gateway += b.gateway - a.gateway
	d.Helpers += b.helpers - a.helpers
	d.Bench += b.bench - a.bench
	if a.stallOK && b.stallOK {
		d.Stall += b.stall - a.stall
		d.StallWall += b.at.Sub(a.at)
	}
}

// cores returns CPU time per wall time (1.0 = one core busy).
func cores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(cpu) / float64(wall)
}
