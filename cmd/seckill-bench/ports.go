package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// checkPort is the check-port subcommand, for scripts that start a gateway on a port of their
// choosing (scripts/bench-wrk.sh): without -pid it fails when something already answers on an
// address, with -pid when a process other than PID listens on an address's port too. Caddy listens
// with SO_REUSEPORT, so a gateway started on a busy port shares it and the kernel splits the
// connections between the two processes, whose secrets and stores differ.
//
//	seckill-bench check-port 127.0.0.1:18480 127.0.0.1:18419      # before the start
//	seckill-bench check-port -pid 4242 127.0.0.1:18480             # once it answers
func checkPort(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("seckill-bench check-port", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "the process that must be alone on the ports (0: check that nothing answers yet)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() == 0 || *pid < 0 {
		_, _ = fmt.Fprintln(stderr, "seckill-bench check-port: want [-pid PID] IP:PORT...")
		return exitUsage
	}
	code := exitOK
	for _, addr := range fs.Args() {
		if _, err := netip.ParseAddrPort(addr); err != nil {
			_, _ = fmt.Fprintf(stderr, "seckill-bench check-port: %q is not IP:PORT\n", addr)
			return exitUsage
		}
		var err error
		if *pid == 0 {
			err = proc.PortFree(addr)
		} else {
			err = proc.SoleListener(addr, *pid)
		}
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
			code = exitError
		}
	}
	return code
}

// checkTarget fails when the gateway at target, a loopback URL, shares its port with another
// process (see checkPort): the answers would come from two gateways. pid is the gateway's process
// when known (0: any one process). Another machine's sockets cannot be seen: nil.
func checkTarget(target string, pid int) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("target %s: %w", target, err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return nil
	}
	if err := proc.SoleListener(net.JoinHostPort(ip.String(), port), pid); err != nil {
		return fmt.Errorf("target %s: %w", target, err)
	}
	return nil
}
