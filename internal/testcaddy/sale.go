package testcaddy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Sale is a running Caddy with the order backend.
type Sale struct {
	Client     *Client
	Admin      string // base URL of the admin endpoint
	AdminAddr  string
	ConfigFile string // the Caddyfile, written to a file for the command line
}

// StartSale loads a Caddyfile with the admin endpoint on, serving OrdersSite.
func StartSale(t testing.TB, seckill string) Sale {
	t.Helper()
	port := FreePort(t)
	s := Sale{AdminAddr: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	s.Admin = "http://" + s.AdminAddr
	text := CaddyfileAdmin(t, s.AdminAddr, port, seckill, OrdersSite)
	s.ConfigFile = filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(s.ConfigFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	RunCaddyfile(t, text)
	s.Client = NewClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	return s
}

// AdminCall calls the admin endpoint and returns the status and body.
func (s Sale) AdminCall(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.Admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// ReconcileOK asks the running app to reconcile through the admin API.
func (s Sale) ReconcileOK(t testing.TB) (bool, string) {
	t.Helper()
	status, body := s.AdminCall(t, http.MethodGet, "/seckill/reconcile", "")
	var ans struct {
		OK bool `json:"ok"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &ans) != nil {
		return false, fmt.Sprintf("%d %s", status, body)
	}
	return ans.OK, string(body)
}
