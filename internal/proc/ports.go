package proc

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrPortInUse is returned by PortFree when something already answers on the port.
var ErrPortInUse = errors.New("port already in use")

// ErrPortShared is returned by SoleListener when another process listens on the port too. Caddy
// listens with SO_REUSEPORT on Linux, so a second gateway on a port starts without an error and
// the kernel splits the connections between the two: requests reach a gateway with other secrets
// and another store (404s, 401s, sold-outs that are not).
var ErrPortShared = errors.New("port shared with another process")

// Listener is a listening TCP socket of this machine (its network namespace) and the processes
// holding it, as far as /proc shows them: another user's processes are not shown.
type Listener struct {
	Addr  netip.AddrPort
	Inode uint64
	Pids  []int
}

// String names the socket and its holders for an error message.
func (l Listener) String() string {
	if len(l.Pids) == 0 {
		return l.Addr.String() + " (held by a process /proc does not show: another user's)"
	}
	holders := make([]string, len(l.Pids))
	for i, pid := range l.Pids {
		holders[i] = fmt.Sprintf("pid %d %s", pid, cmdline(pid))
	}
	return l.Addr.String() + " (" + strings.Join(holders, ", ") + ")"
}

// Listeners returns the listening TCP sockets (IPv4 and IPv6) whose connections to addr's port
// could land on them: those on addr's IP and the wildcard ones (or every one on the port when addr
// is a wildcard). It reads /proc/net/tcp and /proc/net/tcp6, and /proc/*/fd for the holders.
func Listeners(addr string) ([]Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listeners on %s: %w", addr, err)
	}
	var out []Listener
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		ls, err := readListeners(file, ap)
		if err != nil && !errors.Is(err, os.ErrNotExist) { // no tcp6 without IPv6
			return nil, fmt.Errorf("listeners on %s: %w", addr, err)
		}
		out = append(out, ls...)
	}
	if len(out) == 0 {
		return nil, nil
	}
	holders := socketHolders()
	for i := range out {
		out[i].Pids = holders[out[i].Inode]
	}
	return out, nil
}

// readListeners parses one /proc/net/tcp file: the sockets in state LISTEN (0A) on ap's port
// whose address overlaps ap's.
func readListeners(file string, ap netip.AddrPort) ([]Listener, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []Listener
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" {
			continue
		}
		local, err := parseProcAddr(fs[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if local.Port() != ap.Port() || !overlap(local.Addr(), ap.Addr()) {
			continue
		}
		inode, err := strconv.ParseUint(fs[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: inode %q: %w", file, fs[9], err)
		}
		out = append(out, Listener{Addr: local, Inode: inode})
	}
	return out, sc.Err()
}

// parseProcAddr decodes "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6): the address is
// in 32-bit words of host byte order (little-endian on the machines the project runs on), the port
// in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for w := 0; w < len(b); w += 4 {
		b[w], b[w+1], b[w+2], b[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}

// overlap reports whether a socket on a may take connections meant for b, or the reverse: the same
// address, or either is a wildcard (an IPv6 wildcard takes IPv4 too unless IPV6_V6ONLY, which
// /proc does not show: counted).
func overlap(a, b netip.Addr) bool {
	return a == b || a.IsUnspecified() || b.IsUnspecified()
}

// socketHolders maps socket inodes to the processes holding them, from /proc/*/fd; processes whose
// descriptors cannot be read (another user's) are left out.
func socketHolders() map[uint64][]int {
	out := make(map[uint64][]int)
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		seen := make(map[uint64]bool)
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			inode, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
			if err != nil || seen[inode] {
				continue
			}
			seen[inode] = true
			out[inode] = append(out[inode], pid)
		}
	}
	return out
}

// cmdline is process pid's command line, shortened, for error messages; "?" when gone.
func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return "?"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// findHint tells the reader how to find the process on a port themselves.
func findHint(port uint16) string {
	return fmt.Sprintf("find it with: ss -ltnp 'sport = :%d' (or lsof -nP -iTCP:%d -sTCP:LISTEN)", port, port)
}

// PortFree returns nil when nothing listens on addr (an IP and a port) nor answers a connection to
// it, and otherwise an error wrapping ErrPortInUse that names the holders and how to find them.
// Call it before starting a server on a port chosen in advance: a gateway started on a busy port
// would share it (see ErrPortShared) instead of failing.
func PortFree(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("check port %s: %w", addr, err)
	}
	ls, err := Listeners(addr)
	if err != nil {
		return err
	}
	answers := false
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		answers = true
	}
	if len(ls) == 0 && !answers {
		return nil
	}
	return fmt.Errorf("%w: %s already answers (%s); stop that process or choose another port; %s",
		ErrPortInUse, addr, describe(ls), findHint(ap.Port()))
}

// SoleListener returns nil when every listening socket that could take connections to addr is
// held by process pid (pid 0: by one process, whichever it is), and otherwise an error wrapping
// ErrPortShared naming the others. Call it once a server that listens with SO_REUSEPORT (Caddy)
// is ready: a port checked free a moment before may have been taken meanwhile, and the kernel
// would then split the connections.
func SoleListener(addr string, pid int) error {
	ls, err := Listeners(addr)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if pid <= 0 && len(l.Pids) > 0 {
			pid = l.Pids[0]
		}
	}
	var others []Listener
	for _, l := range ls {
		if !slices.Contains(l.Pids, pid) {
			others = append(others, l)
		}
	}
	if len(others) == 0 {
		return nil
	}
	ap, _ := netip.ParseAddrPort(addr) // parsed by Listeners
	return fmt.Errorf("%w: pid %d listens on %s but so does %s, and the kernel splits the connections between them; stop the other process; %s",
		ErrPortShared, pid, addr, describe(others), findHint(ap.Port()))
}

// describe lists sockets for an error message.
func describe(ls []Listener) string {
	if len(ls) == 0 {
		return "no listening socket found in /proc, but a connection succeeded"
	}
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	return strings.Join(s, "; ")
}
