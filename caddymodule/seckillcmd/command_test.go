package seckillcmd_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// TestMain removes the cmd/caddy that testcaddy.BuildCaddy built.
func TestMain(m *testing.M) { testcaddy.Main(m) }

// TestCommands runs `caddy seckill token` and `caddy seckill status` from the built binary.
func TestCommands(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)

	out, err := exec.Command(bin, "seckill", "token", "--user", "alice", "--secret", string(testcaddy.JWTSecret), "--ttl", "5m").Output()
	if err != nil {
		t.Fatalf("seckill token: %v", err)
	}
	v, err := jwtauth.New(jwtauth.Config{Algorithms: []string{"HS256"}, HMACSecret: testcaddy.JWTSecret})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := v.Verify(context.Background(), strings.TrimSpace(string(out)))
	if err != nil || claims.User != "alice" || time.Until(claims.ExpiresAt) > 5*time.Minute {
		t.Fatalf("minted token: %+v, %v", claims, err)
	}
	if err := exec.Command(bin, "seckill", "token", "--user", "alice", "--secret", "short").Run(); err == nil {
		t.Error("a short secret was accepted")
	}
	if err := exec.Command(bin, "seckill", "token", "--secret", string(testcaddy.JWTSecret)).Run(); err == nil {
		t.Error("a token without --user was minted")
	}

	now := time.Now()
	_, addr := testcaddy.StartCaddyAdmin(t, testcaddy.JWTBlock+testcaddy.ActivityBlock("cli", 7, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), testcaddy.Route)

	out, err = exec.Command(bin, "seckill", "status", "--address", addr).Output()
	if err != nil {
		t.Fatalf("seckill status: %v", err)
	}
	var stats struct {
		Breaker    string `json:"breaker"`
		Activities []struct {
			ID        string `json:"id"`
			Remaining int64  `json:"remaining"`
		} `json:"activities"`
	}
	if err := json.Unmarshal(out, &stats); err != nil || stats.Breaker != "closed" || len(stats.Activities) != 1 ||
		stats.Activities[0].ID != "cli" || stats.Activities[0].Remaining != 7 {
		t.Fatalf("seckill status: %v: %s", err, out)
	}
	out, err = exec.Command(bin, "seckill", "status", "cli", "--address", addr).Output()
	if err != nil || !strings.Contains(string(out), `"id": "cli"`) {
		t.Fatalf("seckill status cli: %v: %s", err, out)
	}
	if err := exec.Command(bin, "seckill", "status", "nope", "--address", addr).Run(); err == nil {
		t.Error("status of an unknown activity succeeded")
	}
}
