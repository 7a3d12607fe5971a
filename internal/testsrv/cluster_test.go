package testsrv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestClusterFailover: the cluster starts whole, a killed master's replica takes its slots over,
// and the old master comes back as a replica of the new one.
func TestClusterFailover(t *testing.T) {
	began := time.Now()
	c := StartCluster(t)
	t.Logf("cluster of six whole after %s", time.Since(began).Round(time.Millisecond))
	const key = "{act}:stock"
	old := c.MasterOf(key)
	if old != c.Nodes[0] && old != c.Nodes[1] && old != c.Nodes[2] {
		t.Fatalf("master of %s is %s, not one of the three first nodes", key, old.Addr)
	}
	ctx := context.Background()
	// One connection: WAIT counts the replicas that have its own connection's writes.
	if r, err := old.Pipeline([]string{"SET", key, "900"}, []string{"WAIT", "1", "5000"}); err != nil || r[1] != "1" {
		t.Fatalf("SET and WAIT on the master: %q, %v", r, err)
	}
	old.Kill()
	promoted, took := c.WaitFailover(old, key, time.Minute)
	t.Logf("%s took over from %s %s after the kill (node timeout %s)", promoted.Addr, old.Addr, took.Round(time.Millisecond), c.NodeTimeout)
	if v, err := promoted.cmd1(ctx, "GET", key); err != nil || v != "900" {
		t.Fatalf("GET %s on the new master: %q, %v", key, v, err)
	}
	old.Restart()
	c.WaitHealthy()
	repl, err := old.cmd1(ctx, "INFO", "replication")
	if err != nil || !strings.Contains(repl, "role:slave") {
		t.Fatalf("the restarted old master is not a replica: %v\n%s", err, repl)
	}
	if c.MasterOf(key) != promoted {
		t.Fatalf("the slot went back to %s", c.MasterOf(key).Addr)
	}
}
