package web

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// saleConf is one activity of a test gateway.
type saleConf struct {
	id        string
	stock     int
	limit     int
	start     time.Time
	end       time.Time // default: an hour after start
	reveal    time.Duration
	payWithin time.Duration // default 15m
	price     string        // the price option, e.g. "1500 JPY"; none when empty
	title     string        // the title option; none when empty
	room      string        // the waiting_room block's options, e.g. "admit 1/8s"; no room when empty
}

// gatewayConf is a test gateway: the page through file_server, the seckill handler, and with
// orders the embedded order backend.
type gatewayConf struct {
	captcha  bool
	orders   bool
	userRate string // rate_limit user, e.g. "1/3s burst 1"; none when empty
	demo     bool   // the demo sign-in at /demo/token
	redis    string // store redis at this address; the memory store when empty
	sales    []saleConf
}

// gateway is a running cmd/caddy process.
type gateway struct {
	url    string // http://127.0.0.1:port
	secret []byte // the HS256 secret of the buyers' tokens
	client *http.Client
}

// startGateway writes a Caddyfile for conf and runs the gateway binary built by TestMain on a free
// port, serving the embedded page files. It stops the process when the test ends.
func startGateway(t *testing.T, conf gatewayConf) *gateway {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	dir := t.TempDir()
	www := filepath.Join(dir, "www")
	if err := os.CopyFS(www, Files); err != nil {
		t.Fatalf("copy the embedded page: %v", err)
	}
	g := &gateway{secret: []byte(randomHex(t, 32)), client: &http.Client{Timeout: 10 * time.Second}}
	port := freePort(t)
	g.url = fmt.Sprintf("http://127.0.0.1:%d", port)

	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tstorage file_system %s\n", filepath.Join(dir, "data"))
	store := "memory"
	if conf.redis != "" {
		store = "redis " + conf.redis
	}
	fmt.Fprintf(&b, "\tseckill {\n\t\tstore %s\n\t\tjwt {\n\t\t\talgorithms HS256\n\t\t\thmac_secret %s\n\t\t}\n", store, g.secret)
	fmt.Fprintf(&b, "\t\turl_secret %s\n", randomHex(t, 32))
	fmt.Fprintf(&b, "\t\tcaptcha %s\n", map[bool]string{true: "on", false: "off"}[conf.captcha])
	if conf.orders {
		fmt.Fprintf(&b, "\t\torders sqlite %s\n", filepath.Join(dir, "orders.db"))
	}
	if conf.userRate != "" {
		fmt.Fprintf(&b, "\t\trate_limit user %s\n", conf.userRate)
	}
	for _, s := range conf.sales {
		if s.end.IsZero() {
			s.end = s.start.Add(time.Hour)
		}
		if s.payWithin == 0 {
			s.payWithin = 15 * time.Minute
		}
		fmt.Fprintf(&b, "\t\tactivity %s {\n\t\t\tstock %d\n\t\t\tlimit %d\n\t\t\tstart %s\n\t\t\tend %s\n\t\t\treveal %s\n\t\t\tpay_within %s\n",
			s.id, s.stock, s.limit, s.start.UTC().Format(time.RFC3339), s.end.UTC().Format(time.RFC3339), s.reveal, s.payWithin)
		if s.price != "" {
			fmt.Fprintf(&b, "\t\t\tprice %s\n", s.price)
		}
		if s.title != "" {
			fmt.Fprintf(&b, "\t\t\ttitle %q\n", s.title)
		}
		if s.room != "" {
			fmt.Fprintf(&b, "\t\t\twaiting_room {\n\t\t\t\t%s\n\t\t\t}\n", s.room)
		}
		b.WriteString("\t\t}\n")
	}
	fmt.Fprintf(&b, "\t}\n}\n\n%s {\n", g.url)
	if conf.demo {
		b.WriteString("\troute /demo/token {\n\t\tseckill_demo_signin\n\t}\n")
	}
	b.WriteString("\troute /seckill/* {\n\t\tseckill\n\t}\n")
	if conf.orders {
		b.WriteString("\troute /orders/* {\n\t\tseckill_orders\n\t}\n")
	}
	fmt.Fprintf(&b, "\troot * %s\n\tfile_server\n}\n", www)

	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "caddy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(env.caddy, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the gateway: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("gateway config:\n%s\ngateway log (tail):\n%s", b.String(), tail(string(log), 6000))
			}
		}
	})

	// Ready when the first activity answers its status.
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("the gateway exited at start-up:\n%s\nconfig:\n%s", tail(string(log), 4000), b.String())
		default:
		}
		if res, err := g.client.Get(g.url + "/seckill/" + conf.sales[0].id); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return g
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not answer within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// token mints a buyer's JWT as a shop's sign-in would.
func (g *gateway) token(t *testing.T, user string) string {
	t.Helper()
	tok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: g.secret, Subject: user, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call makes one API call as user (no token when user is empty) and decodes the JSON answer.
func (g *gateway) call(t *testing.T, method, path, user string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+g.token(t, user))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := g.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %v", method, path, res.StatusCode, err)
	}
	return res.StatusCode, out
}

// buy buys one item for user through the API, as another buyer's page would (captcha off), and
// returns the buy answer's code.
func (g *gateway) buy(t *testing.T, act, user string) string {
	t.Helper()
	st, body := g.call(t, http.MethodPost, "/seckill/"+act+"/path", user, map[string]any{})
	if st != http.StatusOK {
		t.Fatalf("path for %s: %d %v", user, st, body)
	}
	_, body = g.call(t, http.MethodPost, body["path"].(string), user, nil)
	code, _ := body["code"].(string)
	return code
}

// remaining reads an activity's remaining stock from its status.
func (g *gateway) remaining(t *testing.T, act string) int {
	t.Helper()
	st, body := g.call(t, http.MethodGet, "/seckill/"+act, "", nil)
	if st != http.StatusOK {
		t.Fatalf("status of %s: %d %v", act, st, body)
	}
	return int(body["remaining"].(float64))
}

// pageURL is the sale page of act, with the buyer's token in the fragment when user is not empty.
func (g *gateway) pageURL(t *testing.T, act, user string) string {
	u := g.url + "/?activity=" + act
	if user != "" {
		u += "#token=" + g.token(t, user)
	}
	return u
}

// saleStart is a start time lead from now, on a whole second (the Caddyfile takes RFC 3339).
func saleStart(lead time.Duration) time.Time {
	return time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
