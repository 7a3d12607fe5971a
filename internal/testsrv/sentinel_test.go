package testsrv

import (
	"context"
	"testing"
	"time"
)

// TestSentinelFailover: the sentinels promote the replica of a killed master, and turn the old
// master, restarted, into a replica of the new one, holding its data.
func TestSentinelFailover(t *testing.T) {
	began := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel set ready after %s", time.Since(began).Round(time.Millisecond))
	old := s.Master()
	if old != s.Servers[0] {
		t.Fatalf("master %s, want the first server %s", old.Addr, s.Servers[0].Addr)
	}
	ctx := context.Background()
	if _, err := old.cmd1(ctx, "SET", "k", "900"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.cmd1(ctx, "WAIT", "1", "5000"); err != nil {
		t.Fatal(err)
	}
	old.Kill()
	promoted, took := s.WaitFailover(old, time.Minute)
	t.Logf("%s promoted %s after the kill (down-after %s)", promoted.Addr, took.Round(time.Millisecond), s.DownAfter)
	if promoted != s.Servers[1] {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr, s.Servers[1].Addr)
	}
	old.Restart()
	s.WaitReplicaOf(old, promoted, time.Minute)
	if v, err := old.cmd1(ctx, "GET", "k"); err != nil || v != "900" {
		t.Fatalf("GET k on the old master, now a replica: %q, %v", v, err)
	}
	// Back as a replica means the new master's writes reach it from now on: a failover right
	// after WaitReplicaOf keeps them (the chaos suite's next round kills the new master).
	if r, err := promoted.Pipeline([]string{"SET", "k", "901"}, []string{"WAIT", "1", "100"}); err != nil || r[1] != "1" {
		t.Fatalf("SET and WAIT 1 100 on the new master right after its replica rejoined: %q, %v", r, err)
	}
}
