package testsrv

import "testing"

func TestRedisLifecycle(t *testing.T) {
	r := StartRedis(t)
	if err := pingRedis(r.Addr); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	r.Kill()
	if err := pingRedis(r.Addr); err == nil {
		t.Fatal("server still answers after Kill")
	}
	r.Restart()
	if err := pingRedis(r.Addr); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	r.Stop()
	r.Stop() // idempotent
}
