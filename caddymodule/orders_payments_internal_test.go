package caddymodule

import "testing"

func TestLoopbackListener(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:80": true, "[::1]:443": true, "unix//run/caddy.sock": true,
		":8080": false, "0.0.0.0:80": false, "10.0.0.5:443": false, "example.com:443": false,
	} {
		if got := loopbackListener(addr); got != want {
			t.Errorf("loopbackListener(%q) = %v, want %v", addr, got, want)
		}
	}
}
