package seckillcmd_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// TestPartitionCommand: `caddy seckill partition` rewrites the orders postgres database of a
// Caddyfile into n partitions, after which the configuration must ask for n (or nothing).
func TestPartitionCommand(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)
	pg := testsrv.StartPostgres(t)
	dsn := pg.Database(t, "cmdpart")
	ctx := context.Background()
	repo, err := orderbackend.NewPostgresWith(ctx, dsn, orderbackend.PostgresOptions{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.EnsureStock(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	_ = repo.Close()
	file := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(file, []byte("{\n\tseckill {\n\t\torders postgres \""+dsn+"\" {\n\t\t\tpartitions 4\n\t\t}\n\t}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "seckill", "partition", "--config", file, "--adapter", "caddyfile", "--partitions", "4").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "partitions: 1 -> 4") {
		t.Fatalf("seckill partition: %v: %s", err, out)
	}
	out, err = exec.Command(bin, "seckill", "partition", "--config", file, "--adapter", "caddyfile", "--partitions", "4").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "4 already; nothing to do") {
		t.Fatalf("seckill partition again: %v: %s", err, out)
	}
	if out, err := exec.Command(bin, "seckill", "partition", "--config", file, "--adapter", "caddyfile").CombinedOutput(); err == nil {
		t.Fatalf("seckill partition without --partitions succeeded: %s", out)
	}
	if _, err := orderbackend.NewPostgresWith(ctx, dsn, orderbackend.PostgresOptions{Partitions: 1}); !errors.Is(err, orderbackend.ErrPartitionsChanged) {
		t.Fatalf("partitions 1 after the command: %v", err)
	}
	r, err := orderbackend.NewPostgresWith(ctx, dsn, orderbackend.PostgresOptions{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()

	// A gateway configured with another number refuses to start, naming both numbers and the
	// command; nothing is rewritten.
	err = testcaddy.LoadCaddyfile(t, testcaddy.Caddyfile(t, testcaddy.FreePort(t), testcaddy.JWTBlock+"captcha off\n"+
		"orders postgres \""+dsn+"\" {\n\tpartitions 8\n}\n"+testcaddy.SaleBlock("a", 5), testcaddy.OrdersSite))
	if err == nil {
		_ = caddy.Stop()
		t.Fatal("a gateway with partitions 8 started on a database of 4")
	}
	if msg := err.Error(); !strings.Contains(msg, "orders postgres") || !strings.Contains(msg, "has 4 partition(s) and the configuration asks for 8") ||
		!strings.Contains(msg, "caddy seckill partition --config <file> --partitions 8") {
		t.Fatalf("start with partitions 8 on a database of 4: %v", err)
	}
	if r, err = orderbackend.NewPostgresWith(ctx, dsn, orderbackend.PostgresOptions{Partitions: 4}); err != nil {
		t.Fatalf("after the refused start: %v", err)
	}
	_ = r.Close()
}
