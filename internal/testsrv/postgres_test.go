package testsrv

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestPostgresStartStop(t *testing.T) {
	p := StartPostgres(t)
	query := func() error {
		return exec.Command(filepath.Join(p.bin, "psql"), "-X", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
			"-U", "postgres", "-d", "test", "-c", "SELECT 1").Run()
	}
	if err := query(); err != nil {
		t.Fatalf("query: %v", err)
	}
	p.Stop()
	if err := query(); err == nil {
		t.Fatal("query succeeded on a stopped server")
	}
	p.Start()
	if err := query(); err != nil {
		t.Fatalf("query after restart: %v", err)
	}
}
