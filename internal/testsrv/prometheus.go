package testsrv

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// Prometheus is a private Prometheus server scraping the given targets.
type Prometheus struct {
	URL  string // http://127.0.0.1:port
	Dir  string // config, TSDB and log
	proc *proc.Proc
}

// PrometheusTool returns the path of a Prometheus binary ("prometheus" or "promtool"). When it is
// missing it fails t as root (scripts/ensure-deps.sh installs it) and skips t otherwise, saying
// what to install.
func PrometheusTool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/" + name); err == nil {
		return "/usr/bin/" + name
	}
	msg := fmt.Sprintf("%s not found: install it (Debian: apt-get install prometheus) or run 'make test' as root, which does", name)
	if os.Geteuid() == 0 {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// StartPrometheus starts a private Prometheus on a free loopback port, with its TSDB in a
// temporary folder, scraping each target (host:port, path metricsPath) every interval; it is
// stopped when the test ends.
func StartPrometheus(t testing.TB, interval time.Duration, metricsPath string, targets ...string) *Prometheus {
	t.Helper()
	bin := PrometheusTool(t, "prometheus")
	p := &Prometheus{Dir: t.TempDir()}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n"+
		"  - job_name: seckill\n    metrics_path: %s\n    static_configs:\n      - targets: [%s]\n",
		interval, interval, strconv.Quote(metricsPath), strings.Join(quoted, ", "))
	cfgPath := filepath.Join(p.Dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p.URL = "http://" + addr
		if lastErr = p.start(bin, cfgPath, addr); lastErr == nil {
			t.Cleanup(p.Stop)
			return p
		}
	}
	t.Fatalf("start prometheus: %v", lastErr)
	return nil
}

func (p *Prometheus) start(bin, cfgPath, addr string) error {
	logf, err := os.OpenFile(filepath.Join(p.Dir, "prometheus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child holds its own descriptor
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(p.Dir, "data"), "--log.level=warn")
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	pr, err := proc.StartReady(cmd, 30*time.Second, 50*time.Millisecond, proc.HTTPStatus(p.URL+"/-/ready", http.StatusOK))
	if err != nil {
		return fmt.Errorf("prometheus on %s: %w:\n%s", addr, err, proc.Tail(filepath.Join(p.Dir, "prometheus.log"), 5))
	}
	p.proc = pr
	return nil
}

// Stop shuts the server down and waits, killing it after 10 s; it is safe to call twice.
func (p *Prometheus) Stop() {
	p.proc.Stop(10 * time.Second)
	p.proc = nil
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

// Float returns the sample's value.
func (s Sample) Float() float64 {
	v, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// Query evaluates an instant query (/api/v1/query) now and returns its vector, or an error for
// a query Prometheus refuses or a result that is not a vector.
func (p *Prometheus) Query(expr string) ([]Sample, error) {
	res, err := http.PostForm(p.URL+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string   `json:"resultType"`
			Result     []Sample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("query %s: %w: %s", expr, err, body)
	}
	if ans.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, ans.Error)
	}
	if ans.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", expr, ans.Data.ResultType)
	}
	return ans.Data.Result, nil
}
