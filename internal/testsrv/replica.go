package testsrv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartReplica starts a private redis-server that replicates master (--replicaof) and waits until
// it applies master's writes (WaitStreaming), so a write to master from then on reaches it. It is stopped with t.Cleanup like StartRedis; Restart brings it back as a replica of master.
// It sets master's repl-diskless-sync-delay to 0, so the first sync starts at once, not in 5 s.
func StartReplica(t testing.TB, master *Redis, opts ...RedisOption) *Redis {
	t.Helper()
	return startReplica(t, master, master.Addr, "of", opts)
}

// StartReplicaVia is StartReplica with the replication link going through link, a Proxy in
// front of master (link = StartProxy(t, master.Addr)): link.Hold keeps the master's replication
// stream from the replica, as a slow or partitioned network does; kill the master and Close the
// link, and what it held is lost, as the stream in flight is when a master dies. (Pausing the
// replica with SIGSTOP loses nothing: the stream waits in the replica's socket buffer and is
// applied when it continues.)
func StartReplicaVia(t testing.TB, master *Redis, link *Proxy, opts ...RedisOption) *Redis {
	t.Helper()
	return startReplica(t, master, link.Addr, "via", opts)
}

// startReplica starts a replica of master that reaches it at addr (master's own, or a link's).
func startReplica(t testing.TB, master *Redis, addr, how string, opts []RedisOption) *Redis {
	t.Helper()
	noSyncDelay(t, master)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("start replica: address %q: %v", addr, err)
	}
	opts = append([]RedisOption{WithArgs("--replicaof", host, port)}, opts...)
	r := StartRedis(t, opts...)
	if err := r.WaitStreaming(master, 10*time.Second); err != nil {
		t.Fatalf("start replica %s %s: %v", how, addr, err)
	}
	return r
}

// noSyncDelay makes master start a replica's full sync at once; Redis waits 5 s by default for
// more replicas to share a diskless sync.
func noSyncDelay(t testing.TB, master *Redis) {
	t.Helper()
	if _, err := master.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("start replica: %v", err)
	}
}

// WaitLinkUp waits until the server, a replica, reports master_link_status:up.
func (r *Redis) WaitLinkUp(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		info, err := r.Info("replication")
		if err == nil && info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0" {
			return nil
		}
		last = fmt.Sprintf("link %q, err %v", info["master_link_status"], err)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("replica %s: master link not up after %v (%s): %s", r.Addr, timeout, last, r.logTail())
}

// WaitStreaming waits until the server, a replica of master, applies master's writes: its link is
// up and its first sync done (WaitLinkUp), and a key written on master has reached it. Link up is
// not enough: after a diskless sync the master sends the writes that follow only once it has the
// replica's first REPLCONF ACK, up to a second later (Redis 7.0: "Waiting for REPLCONF ACK from
// slave to enable streaming"), and a master stopped in that second takes every write it answered
// with it. The key is deleted again, on both, before it returns. It costs a few milliseconds on
// a replica already streaming.
func (r *Redis) WaitStreaming(master *Redis, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := r.WaitLinkUp(timeout); err != nil {
		return err
	}
	key := "testsrv:streaming:" + r.Addr
	val := strconv.FormatInt(time.Now().UnixNano(), 10)
	if _, err := master.Do("SET", key, val); err != nil {
		return fmt.Errorf("replica %s: write to master %s: %w", r.Addr, master.Addr, err)
	}
	// reached polls the replica until want(its reply to args) holds.
	reached := func(what string, want func(string) bool, args ...string) error {
		var last string
		for {
			v, err := r.Do(args...)
			if err == nil && want(v) {
				return nil
			}
			last = fmt.Sprintf("%q, %v", v, err)
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %s: master %s's %s not applied after %v (last reply %s): %s",
					r.Addr, master.Addr, what, timeout, last, r.logTail())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := reached("write", func(v string) bool { return v == val }, "GET", key); err != nil {
		return err
	}
	if _, err := master.Do("DEL", key); err != nil {
		return fmt.Errorf("replica %s: delete on master %s: %w", r.Addr, master.Addr, err)
	}
	return reached("delete", func(v string) bool { return v == "0" }, "EXISTS", key)
}

// Promote turns a replica into a master (REPLICAOF NO ONE), as Sentinel or an operator does on a
// failover; it keeps every write the replica had received.
func (r *Redis) Promote() error {
	reply, err := r.Do("REPLICAOF", "NO", "ONE")
	if err != nil {
		return fmt.Errorf("promote %s: %w", r.Addr, err)
	}
	if reply != "OK" {
		return fmt.Errorf("promote %s: reply %q", r.Addr, reply)
	}
	return nil
}

// Info returns the fields of INFO section as a map (field → value).
func (r *Redis) Info(section string) (map[string]string, error) {
	s, err := r.Do("INFO", section)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// Do sends one command to the server on a fresh connection and returns its reply as a string:
// a status, an error (as err), an integer in decimal or a bulk string. Arrays are not read; use a
// client library for those. It is for test set-up (INFO, REPLICAOF, CONFIG SET), without one.
func (r *Redis) Do(args ...string) (string, error) {
	replies, err := r.Pipeline(args)
	if err != nil {
		return "", err
	}
	return replies[0], nil
}

// Pipeline sends cmds one after the other over one fresh connection and returns their replies
// (read as Do reads them); the first error reply ends it. One connection matters for WAIT, which
// counts the replicas that have the writes of its own connection only.
func (r *Redis) Pipeline(cmds ...[]string) ([]string, error) {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	rd := bufio.NewReader(c)
	replies := make([]string, 0, len(cmds))
	for _, args := range cmds {
		s, err := readReply(rd, args[0])
		if err != nil {
			return replies, err
		}
		replies = append(replies, s)
	}
	return replies, nil
}

// readReply reads one simple reply (status, error, integer or bulk string) of command name.
func readReply(rd *bufio.Reader, name string) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("%s: empty reply", name)
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s: %s", name, line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", nil // nil bulk string
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%s: reply type %q not read", name, line[0])
}

// PID returns the server's process id, 0 when it is not running.
func (r *Redis) PID() int {
	if r.proc == nil {
		return 0
	}
	return r.proc.Pid()
}

// pingRedis sends an inline PING and expects +PONG, without a client library.
func pingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}
