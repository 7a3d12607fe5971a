package caddymodule_test

import (
	"strconv"
	"strings"
	"testing"
)

// TestCaddyfileOptionTwice gives every once-only option of every block twice and checks that
// adapting fails with "<directive>: <option> is given twice" at the file:line of the second.
func TestCaddyfileOptionTwice(t *testing.T) {
	// Each block is a Caddyfile with %s where the option stands twice.
	const (
		global   = "{\n\tseckill {\n%s\n\t}\n}\n"
		redis    = "{\n\tseckill {\n\t\tstore redis a:1 {\n%s\n\t\t}\n\t}\n}\n"
		local    = "{\n\tseckill {\n\t\tstore local d {\n%s\n\t\t}\n\t}\n}\n"
		jwt      = "{\n\tseckill {\n\t\tjwt {\n\t\t\talgorithms HS256\n%s\n\t\t}\n\t}\n}\n"
		jwtBare  = "{\n\tseckill {\n\t\tjwt {\n%s\n\t\t}\n\t}\n}\n"
		captcha  = "{\n\tseckill {\n\t\tcaptcha on {\n%s\n\t\t}\n\t}\n}\n"
		orders   = "{\n\tseckill {\n\t\torders sqlite o.db {\n%s\n\t\t}\n\t}\n}\n"
		ordersPG = "{\n\tseckill {\n\t\torders postgres x {\n%s\n\t\t}\n\t}\n}\n"
		activity = "{\n\tseckill {\n\t\tactivity a {\n%s\n\t\t}\n\t}\n}\n"
		handler  = ":8080 {\n\tseckill {\n%s\n\t}\n}\n"
		ordersH  = ":8080 {\n\tseckill_orders {\n%s\n\t}\n}\n"
		demo     = ":8080 {\n\tseckill_demo_signin {\n%s\n\t}\n}\n"
	)
	for _, tc := range []struct{ block, option, want string }{
		{global, "store memory", "seckill: store"},
		{global, "jwt {\nalgorithms RS256\n}", "seckill: jwt"},
		{global, "url_secret s", "seckill: url_secret"},
		{global, "forward_secret s", "seckill: forward_secret"},
		{global, "captcha off", "seckill: captcha"},
		{global, "orders sqlite o.db", "seckill: orders"},
		{global, "rate_limit ip 2/s", "seckill: rate_limit ip"},
		{global, "rate_limit user 2/s", "seckill: rate_limit user"},
		{redis, "username u", "seckill: store redis username"},
		{redis, "password p", "seckill: store redis password"},
		{redis, "db 1", "seckill: store redis db"},
		{redis, "key_prefix k", "seckill: store redis key_prefix"},
		{redis, "sentinel m", "seckill: store redis sentinel"},
		{redis, "cluster", "seckill: store redis cluster"},
		{redis, "auto_pipeline", "seckill: store redis auto_pipeline"},
		{redis, "admit_batch 2", "seckill: store redis admit_batch"},
		{redis, "pool_size 2", "seckill: store redis pool_size"},
		{redis, "replicas_ack 1", "seckill: store redis replicas_ack"},
		{redis, "rebalance_interval 1s", "seckill: store redis rebalance_interval"},
		{local, "fsync no", "seckill: store local fsync"},
		{jwt, "hmac_secret s", "seckill: jwt hmac_secret"},
		{jwt, "jwks_url https://x/jwks", "seckill: jwt jwks_url"},
		{jwt, "jwks_min_refresh 1m", "seckill: jwt jwks_min_refresh"},
		{jwt, "issuer i", "seckill: jwt issuer"},
		{jwt, "audience a", "seckill: jwt audience"},
		{jwt, "leeway 1s", "seckill: jwt leeway"},
		{jwt, "user_claim c", "seckill: jwt user_claim"},
		{jwtBare, "algorithms RS256", "seckill: jwt algorithms"},
		{captcha, "length 6", "seckill: captcha length"},
		{captcha, "ttl 1m", "seckill: captcha ttl"},
		{captcha, "max_fetches 3", "seckill: captcha max_fetches"},
		{captcha, "issue_rate 6/m", "seckill: captcha issue_rate"},
		{orders, "sweep_every 1s", "seckill: orders sweep_every"},
		{orders, "settle_after 1m", "seckill: orders settle_after"},
		{orders, "consumer_name c", "seckill: orders consumer_name"},
		{orders, "max_deliveries 3", "seckill: orders max_deliveries"},
		{orders, "claim_idle 1m", "seckill: orders claim_idle"},
		{ordersPG, "partitions 4", "seckill: orders partitions"},
		{orders, "payments mock", "seckill: orders payments"},
		{activity, "stock 1", "seckill: activity a: stock"},
		{activity, "limit 1", "seckill: activity a: limit"},
		{activity, "start 2026-01-01T00:00:00Z", "seckill: activity a: start"},
		{activity, "start_in 1m", "seckill: activity a: start_in"},
		{activity, "end 2036-01-01T00:00:00Z", "seckill: activity a: end"},
		{activity, "reveal 1s", "seckill: activity a: reveal"},
		{activity, "pay_within 1m", "seckill: activity a: pay_within"},
		{handler, "prefix /s", "seckill: prefix"},
		{handler, "errors write", "seckill: errors"},
		{handler, "forward", "seckill: forward"},
		{ordersH, "prefix /o", "seckill_orders: prefix"},
		{ordersH, "errors write", "seckill_orders: errors"},
		{demo, "allow private", "seckill_demo_signin: allow"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			caddyfile := strings.Replace(tc.block, "%s", tc.option+"\n"+tc.option, 1)
			second := strings.Count(caddyfile[:strings.Index(caddyfile, tc.option)+len(tc.option)+1], "\n") + 1
			want := tc.want + " is given twice, at Caddyfile:" + strconv.Itoa(second)
			_, err := adapt(t, caddyfile)
			if err == nil {
				t.Fatalf("adapting succeeded; want an error containing %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestCaddyfileOptionRepeatable checks the options that add up rather than being given once:
// store redis address, jwt public_key_file, one rate_limit of each kind, one activity per id.
func TestCaddyfileOptionRepeatable(t *testing.T) {
	for _, tc := range []struct{ name, caddyfile string }{
		{"redis address", "{\n\tseckill {\n\t\turl_secret u\n\t\tstore redis a:1 {\n\t\t\tcluster\n\t\t\taddress b:2\n\t\t\taddress c:3 d:4\n\t\t}\n\t}\n}\n"},
		{"jwt public_key_file", "{\n\tseckill {\n\t\tjwt {\n\t\t\talgorithms RS256\n\t\t\tpublic_key_file one.pem\n\t\t\tpublic_key_file two.pem\n\t\t}\n\t}\n}\n"},
		{"rate_limit kinds", "{\n\tseckill {\n\t\trate_limit ip 2/s\n\t\trate_limit user 3/s\n\t}\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := adapt(t, tc.caddyfile)
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, want := range map[string][]string{
				"redis address":       {`"a:1"`, `"b:2"`, `"c:3"`, `"d:4"`},
				"jwt public_key_file": {`"one.pem"`, `"two.pem"`},
				"rate_limit kinds":    {`"rate": "2/s"`, `"rate": "3/s"`},
			}[tc.name] {
				if !strings.Contains(got, want) {
					t.Errorf("adapted JSON lacks %s:\n%s", want, got)
				}
			}
		})
	}
}
