package caddymodule_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-seckill/caddy-seckill/caddymodule"
)

var update = flag.Bool("update", false, "rewrite the JSON half of testdata/*.caddyfiletest with the adapter's output, and the syntax blocks of README.md with the parsers' doc comments")

// TestCaddyfileAdapt checks each testdata/*.caddyfiletest: a Caddyfile, a line of dashes, and
// either the exact JSON it adapts to or (when it does not start with '{') a part of the error
// adapting it must give. Run with -update to rewrite the JSON halves, then review the diff.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			caddyfile, want, ok := strings.Cut(string(data), "----------")
			if !ok {
				t.Fatalf("%s has no ---------- separator", f)
			}
			caddyfile = strings.TrimSpace(caddyfile) + "\n"
			want = strings.TrimSpace(want)

			got, err := adapt(t, caddyfile)
			if want != "" && want[0] != '{' {
				if err == nil {
					t.Fatalf("adapting succeeded; want an error containing %q", want)
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			if *update {
				if err := os.WriteFile(f, []byte(caddyfile+"----------\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("adapted JSON differs.\n--- got ---\n%s\n--- want ---\n%s", got, want)
			}
		})
	}
}

// TestCaddyfileErrors checks that each wrong Caddyfile is refused with a message that says what is
// wrong, where the admin looks for it.
func TestCaddyfileErrors(t *testing.T) {
	global := func(body string) string { return "{\n\tseckill {\n" + body + "\n\t}\n}\n" }
	site := func(body string) string { return ":8080 {\n" + body + "\n}\n" }
	file := filepath.Join(t.TempDir(), "seckill-data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, caddyfile, want string
	}{
		{"body_timeout none", global("body_timeout"), "wrong argument count"},
		{"body_timeout zero", global("body_timeout 0s"), "body_timeout must be positive"},
		{"body_timeout too long", global("body_timeout 1h"), "body_timeout 1h0m0s: want 1s to 10m0s"},
		{"body_timeout twice", global("body_timeout 5s\nbody_timeout 6s"), "body_timeout is given twice"},
		{"orders no database", global("orders"), "want orders sqlite <file> or orders postgres <dsn>"},
		{"orders no dsn", global("orders sqlite"), "want orders sqlite <file> or orders postgres <dsn>"},
		{"orders unknown database", global("orders mysql root@/shop"), `unknown database "mysql": want sqlite or postgres`},
		{"orders unquoted dsn", global("orders postgres host=db dbname=shop"), `unexpected "dbname=shop" (quote a DSN that has spaces)`},
		{"orders sqlite query", global("orders sqlite ./o.db?mode=ro"), "must not contain '?'"},
		{"orders twice", global("orders sqlite a.db\norders sqlite b.db"), "orders is given twice"},
		{"orders unknown option", global("orders sqlite a.db {\nsweep 1s\n}"), `unrecognized orders option "sweep"`},
		{"orders sweep_every word", global("orders sqlite a.db {\nsweep_every often\n}"), `orders sweep_every "often"`},
		{"orders sweep_every zero", global("orders sqlite a.db {\nsweep_every 0s\n}"), "orders sweep_every must be positive"},
		{"orders settle_after zero", global("orders sqlite a.db {\nsettle_after 0s\n}"), "orders settle_after must be positive"},
		{"orders settle_after word", global("orders sqlite a.db {\nsettle_after soon\n}"), `orders settle_after "soon"`},
		{"orders claim_idle negative", global("orders sqlite a.db {\nclaim_idle -1s\n}"), "is negative"},
		{"orders max_deliveries", global("orders sqlite a.db {\nmax_deliveries 0\n}"), `max_deliveries "0": want a whole number of at least 1`},
		{"orders partitions zero", global("orders postgres x {\npartitions 0\n}"), `orders partitions "0": want a whole number from 1 (not partitioned) to 1024`},
		{"orders partitions sqlite", global("orders sqlite a.db {\npartitions 8\n}"), "seckill: orders sqlite: partitions is a postgres option (SQLite has one table), at Caddyfile:4"},
		{"orders option twice", global("orders sqlite a.db {\nsweep_every 1s\nsweep_every 2s\n}"), "orders sweep_every is given twice"},
		{"orders consumer_name args", global("orders sqlite a.db {\nconsumer_name a b\n}"), "wrong argument count"},
		{"unknown option", global("stock 5"), `unrecognized option "stock"`},
		{"option args", "{\n\tseckill foo\n}\n", "wrong argument count"},
		{"twice", "{\n\tseckill\n\tseckill\n}\n", "given twice"},
		{"store twice", global("store memory\nstore memory"), "store is given twice"},
		{"store unknown", global("store etcd"), `unknown store "etcd": want one of local, memory, redis`},
		{"store none", global("store"), "wrong argument count"},
		{"store memory block", global("store memory {\nfoo\n}"), "store memory takes no options"},
		{"store memory args", global("store memory x"), "wrong argument count"},
		{"local no folder", global("store local"), "want store local <folder>"},
		{"local two folders", global("store local a b"), "want store local <folder>"},
		{"local fsync word", global("store local d {\nfsync everysec\n}"), `store local fsync "everysec": want always`},
		{"local fsync none", global("store local d {\nfsync\n}"), "wrong argument count"},
		{"local fsync args", global("store local d {\nfsync always no\n}"), "wrong argument count"},
		{"local fsync twice", global("store local d {\nfsync always\nfsync no\n}"), "store local fsync is given twice"},
		{"local unknown", global("store local d {\naddress a:1\n}"), `unrecognized store local option "address"`},
		{"local then memory", global("store local d\nstore memory"), "store is given twice"},
		{"redis no address", global("store redis"), "needs at least one address"},
		{"redis two addresses", global("store redis a:1 b:2"), "several addresses need cluster or sentinel"},
		{"redis cluster sentinel", global("store redis a:1 {\ncluster\nsentinel m\n}"), "cluster and sentinel are exclusive"},
		{"redis cluster db", global("store redis a:1 {\ncluster\ndb 1\n}"), "a cluster has only database 0"},
		{"redis key_prefix brace", global("store redis a:1 {\nkey_prefix shop}x\n}"), `store redis key_prefix "shop}x": a brace`},
		{"redis auto_pipeline arg", global("store redis a:1 {\nauto_pipeline yes\n}"), "wrong argument count"},
		{"redis admit_batch zero", global("store redis a:1 {\nadmit_batch 0\n}"), `admit_batch "0": want 1 (no grouping) to 1024`},
		{"redis admit_batch big", global("store redis a:1 {\nadmit_batch 1025\n}"), `admit_batch "1025"`},
		{"redis admit_batch word", global("store redis a:1 {\nadmit_batch many\n}"), `admit_batch "many"`},
		{"redis admit_batch none", global("store redis a:1 {\nadmit_batch\n}"), "wrong argument count"},
		{"redis pool_size zero", global("store redis a:1 {\npool_size 0\n}"), `pool_size "0": want 1 to 4096 connections`},
		{"redis pool_size big", global("store redis a:1 {\npool_size 5000\n}"), `pool_size "5000"`},
		{"redis pool_size word", global("store redis a:1 {\npool_size many\n}"), `pool_size "many"`},
		{"redis pool_size none", global("store redis a:1 {\npool_size\n}"), "wrong argument count"},
		{"redis replicas_ack none", global("store redis a:1 {\nreplicas_ack\n}"), "wrong argument count"},
		{"redis replicas_ack three args", global("store redis a:1 {\nreplicas_ack 1 50ms x\n}"), "wrong argument count"},
		{"redis replicas_ack zero", global("store redis a:1 {\nreplicas_ack 0\n}"), `replicas_ack "0": want 1 to 16 replicas`},
		{"redis replicas_ack big", global("store redis a:1 {\nreplicas_ack 17\n}"), `replicas_ack "17": want 1 to 16 replicas`},
		{"redis replicas_ack word", global("store redis a:1 {\nreplicas_ack all\n}"), `replicas_ack "all"`},
		{"redis replicas_ack timeout word", global("store redis a:1 {\nreplicas_ack 1 soon\n}"), `replicas_ack timeout "soon": want 1ms to 500ms`},
		{"redis replicas_ack timeout zero", global("store redis a:1 {\nreplicas_ack 1 0s\n}"), `replicas_ack timeout "0s"`},
		{"redis replicas_ack timeout long", global("store redis a:1 {\nreplicas_ack 1 2s\n}"), `replicas_ack timeout "2s": want 1ms to 500ms`},
		{"redis replicas_ack twice", global("store redis a:1 {\nreplicas_ack 1\nreplicas_ack 2\n}"), "replicas_ack is given twice"},
		{"redis rebalance_interval zero", global("store redis a:1 {\nrebalance_interval 0s\n}"), "store redis rebalance_interval must be positive"},
		{"redis rebalance_interval negative", global("store redis a:1 {\nrebalance_interval -1s\n}"), `store redis rebalance_interval "-1s" is negative`},
		{"redis rebalance_interval short", global("store redis a:1 {\nrebalance_interval 1ms\n}"), "store redis: rebalance_interval 1ms: want 10ms to 10m0s"},
		{"redis rebalance_interval long", global("store redis a:1 {\nrebalance_interval 1h\n}"), "store redis: rebalance_interval 1h0m0s: want 10ms to 10m0s"},
		{"redis rebalance_interval word", global("store redis a:1 {\nrebalance_interval often\n}"), `store redis rebalance_interval "often"`},
		{"redis rebalance_interval none", global("store redis a:1 {\nrebalance_interval\n}"), "wrong argument count"},
		{"memory layout", global("store memory {\nlayout 2\n}"), "store memory takes no options"},
		{"redis db word", global("store redis a:1 {\ndb two\n}"), `db "two": want a database number`},
		{"redis db negative", global("store redis a:1 {\ndb -1\n}"), `db "-1"`},
		{"redis unknown", global("store redis a:1 {\ntls\n}"), `unrecognized store redis option "tls"`},
		{"redis address empty", global("store redis {\naddress\n}"), "wrong argument count"},
		{"jwt no algorithms", global("jwt {\nhmac_secret s\n}"), "jwt needs algorithms"},
		{"jwt unknown", global("jwt {\nalgorithms HS256\nsecret s\n}"), `unrecognized jwt option "secret"`},
		{"jwt leeway", global("jwt {\nalgorithms HS256\nleeway soon\n}"), `jwt leeway "soon"`},
		{"jwt leeway negative", global("jwt {\nalgorithms HS256\nleeway -1s\n}"), "is negative"},
		{"jwt args", global("jwt HS256"), "wrong argument count"},
		{"url_secret args", global("url_secret a b"), "wrong argument count"},
		{"captcha word", global("captcha maybe"), `captcha "maybe": want on or off`},
		{"captcha no word", global("captcha"), "captcha needs on or off"},
		{"captcha args", global("captcha on off"), "wrong argument count"},
		{"captcha off block", global("captcha off {\nlength 6\n}"), `captcha off takes no options (found "length")`},
		{"price one arg", global("activity a {\nstock 1\nprice 199\n}"), "activity a: price needs an amount and an ISO 4217 currency"},
		{"price three args", global("activity a {\nstock 1\nprice 199 USD x\n}"), "activity a: price needs an amount and an ISO 4217 currency"},
		{"price currency", global("activity a {\nstock 1\nprice 199 DOLLARS\n}"), `activity a: price 199 DOLLARS: bad price: "DOLLARS" is not an ISO 4217 currency`},
		{"price amount", global("activity a {\nstock 1\nprice 1,99 EUR\n}"), `activity a: price 1,99 EUR: bad price: amount "1,99" is not a decimal number`},
		{"price digits", global("activity a {\nstock 1\nprice 1.5 JPY\n}"), `activity a: price 1.5 JPY: bad price: amount "1.5" has 1 digits after the point; JPY has 0`},
		{"price negative", global("activity a {\nstock 1\nprice -5 USD\n}"), `activity a: price -5 USD: bad price`},
		{"price zero", global("activity a {\nstock 1\nprice 0.00 USD\n}"), "activity a: price 0.00 USD: must be more than zero"},
		{"price twice", global("activity a {\nstock 1\nprice 1 USD\nprice 2 USD\n}"), "price is given twice"},
		{"title none", global("activity a {\nstock 1\ntitle\n}"), "wrong argument count"},
		{"title two args", global("activity a {\nstock 1\ntitle Demo Phone\n}"), "wrong argument count"},
		{"title empty", global("activity a {\nstock 1\ntitle \" \"\n}"), `activity a: title " ": is empty`},
		{"title long", global("activity a {\nstock 1\ntitle " + strings.Repeat("x", 201) + "\n}"), "201 bytes is longer than 200"},
		{"title twice", global("activity a {\nstock 1\ntitle A\ntitle B\n}"), "title is given twice"},
		{"captcha unknown", global("captcha on {\nsize 300\n}"), `unrecognized captcha option "size"`},
		{"captcha width small", global("captcha on {\nwidth 59\n}"), `captcha width "59": want pixels from 60 to 1000`},
		{"captcha width word", global("captcha on {\nwidth wide\n}"), `captcha width "wide"`},
		{"captcha width twice", global("captcha on {\nwidth 300\nwidth 400\n}"), "captcha width is given twice"},
		{"captcha height big", global("captcha on {\nheight 401\n}"), `captcha height "401": want pixels from 20 to 400`},
		{"captcha height none", global("captcha on {\nheight\n}"), "wrong argument count"},
		{"captcha audio_language", global("captcha on {\naudio_language de\n}"), `captcha audio_language "de": want one of en, ja, pt, ru, zh`},
		{"captcha audio_language twice", global("captcha on {\naudio_language en\naudio_language ru\n}"), "captcha audio_language is given twice"},
		{"captcha audio_language none", global("captcha on {\naudio_language\n}"), "wrong argument count"},
		{"captcha option twice", global("captcha on {\nlength 6\nlength 7\n}"), "captcha length is given twice"},
		{"captcha length word", global("captcha on {\nlength six\n}"), `captcha length "six": want a positive whole number`},
		{"captcha length zero", global("captcha on {\nlength 0\n}"), `captcha length "0": want a positive whole number`},
		{"captcha length short", global("captcha on {\nlength 3\n}"), "captcha length must be between 4 and 10 digits, got 3"},
		{"captcha length long", global("captcha on {\nlength 11\n}"), "captcha length must be between 4 and 10 digits, got 11"},
		{"captcha length args", global("captcha on {\nlength 6 7\n}"), "wrong argument count"},
		{"captcha ttl word", global("captcha on {\nttl soon\n}"), `captcha ttl "soon"`},
		{"captcha ttl zero", global("captcha on {\nttl 0s\n}"), "captcha ttl must be positive"},
		{"captcha ttl negative", global("captcha on {\nttl -1m\n}"), "is negative"},
		{"captcha ttl long", global("captcha on {\nttl 2h\n}"), "captcha ttl must be between 1s and 1h, got 2h0m0s"},
		{"captcha max_fetches", global("captcha on {\nmax_fetches 101\n}"), "captcha max fetches must be between 1 and 100, got 101"},
		{"captcha max_fetches word", global("captcha on {\nmax_fetches many\n}"), `captcha max_fetches "many"`},
		{"captcha issue_rate none", global("captcha on {\nissue_rate\n}"), "captcha issue_rate needs a rate like 6/m"},
		{"captcha issue_rate bad", global("captcha on {\nissue_rate 6\n}"), `captcha issue_rate: rate "6": missing '/'`},
		{"captcha issue_rate zero", global("captcha on {\nissue_rate 0/m\n}"), "captcha issue_rate: rate \"0/m\": events must be between"},
		{"captcha issue_rate burst", global("captcha on {\nissue_rate 6/m burst\n}"), "captcha issue_rate burst needs a number"},
		{"captcha issue_rate burst word", global("captcha on {\nissue_rate 6/m burst few\n}"), `captcha issue_rate burst "few"`},
		{"captcha issue_rate extra", global("captcha on {\nissue_rate 6/m slowly\n}"), `captcha issue_rate: unexpected "slowly"`},
		{"captcha issue_rate distributed", global("captcha on {\nissue_rate 6/m distributed\n}"), "captcha issue_rate is node-local and cannot be distributed"},
		{"rate_limit short", global("rate_limit ip"), "want rate_limit ip|user"},
		{"rate_limit kind", global("rate_limit host 2/s"), `rate_limit "host": want ip or user`},
		{"rate_limit rate", global("rate_limit ip 20"), "rate_limit ip"},
		{"rate_limit zero", global("rate_limit ip 0/s"), "events must be between"},
		{"rate_limit burst missing", global("rate_limit ip 2/s burst"), "burst needs a number"},
		{"rate_limit burst word", global("rate_limit ip 2/s burst many"), `burst "many"`},
		{"rate_limit extra", global("rate_limit user 2/s fast"), `unexpected "fast"`},
		{"rate_limit ip distributed", global("rate_limit ip 2/s distributed"), "cannot be distributed"},
		{"rate_limit twice", global("rate_limit user 2/s\nrate_limit user 3/s"), "rate_limit user is given twice"},
		{"activity no id", global("activity"), "wrong argument count"},
		{"activity bad id", global("activity a/b {\nstock 1\n}"), `activity id "a/b"`},
		{"activity twice", global("activity a {\nstock 1\nstart 2026-01-01T00:00:00Z\nend 2026-01-02T00:00:00Z\n}\nactivity a {\nstock 1\n}"), "activity a is defined twice"},
		{"activity no stock", global("activity a {\nstart 2026-01-01T00:00:00Z\nend 2026-01-02T00:00:00Z\n}"), "activity a: stock is required"},
		{"activity stock word", global("activity a {\nstock lots\n}"), `stock "lots": want a whole number`},
		{"activity stock negative", global("activity a {\nstock -1\n}"), `stock "-1"`},
		{"activity limit zero", global("activity a {\nlimit 0\n}"), "limit must be at least 1"},
		{"activity no window", global("activity a {\nstock 1\n}"), "start (or start_in) and end are required"},
		{"activity start_in and start", global("activity a {\nstock 1\nstart 2026-01-01T00:00:00Z\nstart_in 30s\nend 2036-01-01T00:00:00Z\n}"), "start and start_in are exclusive"},
		{"activity start_in no end", global("activity a {\nstock 1\nstart_in 30s\n}"), "start (or start_in) and end are required"},
		{"activity start_in zero", global("activity a {\nstock 1\nstart_in 0s\n}"), "start_in must be positive"},
		{"activity start_in word", global("activity a {\nstart_in soon\n}"), `start_in "soon"`},
		{"activity bad start", global("activity a {\nstock 1\nstart tomorrow\n}"), `start "tomorrow": want an RFC 3339 time`},
		// An error found once a block is read points at the line it is about.
		{"activity end before start", global("activity a {\nstock 1\nstart 2026-01-02T00:00:00Z\nend 2026-01-01T00:00:00Z\n}"), "is not after start 2026-01-02T00:00:00Z, at Caddyfile:6"},
		{"activity end before start, end first", global("activity a {\nstock 1\nend 2026-01-01T00:00:00Z\nstart 2026-01-02T00:00:00Z\n}"), "end 2026-01-01T00:00:00Z is not after start 2026-01-02T00:00:00Z, at Caddyfile:5"},
		{"local without url_secret", global("jwt {\nalgorithms RS256\n}\nstore local d"),
			"seckill: store local needs a url_secret (the buy paths handed out must stay valid after a restart, which continues the sale): add `url_secret {env.SECKILL_URL_SECRET}` to the seckill block, the variable set to 32 random bytes or more, at Caddyfile:6"},
		{"redis without url_secret", global("store redis a:1"), "seckill: store redis needs a url_secret (every node must sign buy paths alike): add `url_secret {env.SECKILL_URL_SECRET}` to the seckill block, the variable set to 32 random bytes or more, at Caddyfile:3"},
		{"url_secret empty env", global("url_secret {$SECKILL_TEST_UNSET_VARIABLE}"), "seckill: url_secret has no value: give it one, e.g. url_secret {env.VAR} (read at start), or set the variable of a {$VAR} (read here, and empty or unset), at Caddyfile:3"},
		{"jwt HS256 without hmac_secret", global("jwt {\nleeway 1s\nalgorithms HS384\n}"),
			"seckill: jwt: HS384 verifies tokens with an HMAC secret, and hmac_secret is not set: set it to 48 random bytes or more (e.g. the output of `openssl rand -base64 48`), from an environment variable, at Caddyfile:5"},
		{"jwt algorithm unknown", global("jwt {\nalgorithms HS256 HS265\nhmac_secret test-jwt-secret-0123456789abcdef\n}"), `seckill: jwt algorithms: unknown algorithm "HS265" (use one of ES256, ES384, ES512, EdDSA, HS256, HS384, HS512, PS256, PS384, PS512, RS256, RS384, RS512), at Caddyfile:4`},
		{"jwt jwks_url scheme", global("jwt {\nalgorithms RS256\njwks_url ftp://idp.example/jwks\n}"), `seckill: jwt: jwks url "ftp://idp.example/jwks" is not an http(s) URL, at Caddyfile:5`},
		{"jwt jwks_url no host", global("jwt {\nalgorithms RS256\njwks_url idp.example/jwks\n}"), `jwks url "idp.example/jwks" is not an http(s) URL, at Caddyfile:5`},
		{"jwt hmac_secret short", global("jwt {\nalgorithms HS256\nhmac_secret short\n}"), "seckill: jwt: HS256 needs an hmac_secret of 32 bytes or more, and the one set has 5: use a longer random secret (e.g. the output of `openssl rand -base64 32`), at Caddyfile:5"},
		{"jwt hmac_secret empty env", global("jwt {\nalgorithms HS256\nhmac_secret {$SECKILL_TEST_UNSET_VARIABLE}\n}"), "seckill: jwt hmac_secret has no value: give it one, e.g. hmac_secret {env.VAR} (read at start), or set the variable of a {$VAR} (read here, and empty or unset), at Caddyfile:5"},
		{"local folder is a file", global("url_secret u\nstore local " + file), "seckill: store local " + file + " is a file, not a folder: give the folder to keep the sale in (it is created if missing), at Caddyfile:4"},
		{"local folder under a file", global("url_secret u\nstore local " + file + "/d"), "seckill: store local " + file + "/d: stat " + file + "/d: not a directory, at Caddyfile:4"},
		{"activity reveal", global("activity a {\nreveal 2 seconds\n}"), "wrong argument count"},
		{"activity pay_within", global("activity a {\npay_within forever\n}"), `pay_within "forever"`},
		// With start_in, every other option is still checked (the window's end only when defined).
		{"activity start_in negative", global("activity a {\nstock 1\nstart_in -30s\nend 2036-01-01T00:00:00Z\n}"), `activity a: start_in "-30s" is negative`},
		{"activity start_in reveal negative", global("activity a {\nstock 1\nstart_in 30s\nend 2036-01-01T00:00:00Z\nreveal -1s\n}"), `activity a: reveal "-1s" is negative`},
		{"activity start_in pay_within negative", global("activity a {\nstock 1\nstart_in 30s\nend 2036-01-01T00:00:00Z\npay_within -1m\n}"), `activity a: pay_within "-1m" is negative`},
		{"activity start_in buckets above stock", global("activity a {\nstock 3\nstart_in 30s\nend 2036-01-01T00:00:00Z\nbuckets 4\n}"), "activity a: buckets 4 is more than the stock 3"},
		{"activity reveal negative", global("activity a {\nstock 1\nstart 2026-01-01T00:00:00Z\nend 2026-01-02T00:00:00Z\nreveal -1s\n}"), `activity a: reveal "-1s" is negative`},
		{"activity unknown", global("activity a {\ncost 5\n}"), `activity a: unrecognized option "cost"`},
		{"activity buckets word", global("activity a {\nbuckets many\n}"), `activity a: buckets "many": want 2 to 256 (leave it out for one)`},
		{"activity buckets one", global("activity a {\nbuckets 1\n}"), `activity a: buckets "1": want 2 to 256`},
		{"activity buckets big", global("activity a {\nbuckets 257\n}"), `activity a: buckets "257": want 2 to 256`},
		{"activity buckets none", global("activity a {\nbuckets\n}"), "wrong argument count"},
		{"activity buckets args", global("activity a {\nbuckets 2 4\n}"), "wrong argument count"},
		{"activity buckets above stock", global("activity a {\nstock 3\nstart 2026-01-01T00:00:00Z\nend 2026-01-02T00:00:00Z\nbuckets 4\n}"), "activity a: buckets 4 is more than the stock 3"},
		{"activity buckets twice", global("activity a {\nstock 10\nbuckets 2\nbuckets 4\n}"), "seckill: activity a: buckets is given twice, at Caddyfile:6"},
		{"handler unknown", site("seckill {\nqueue\n}"), `unrecognized subdirective "queue"`},
		{"handler args", site("seckill sale"), "wrong argument count"},
		{"handler prefix", site("seckill {\nprefix sale\n}"), "must start with /"},
		{"handler errors", site("seckill {\nerrors json\n}"), `errors "json": want auto, write or return`},
		{"handler forward args", site("seckill {\nforward yes\n}"), "wrong argument count"},
		{"handler twice", site("seckill {\nforward\nforward\n}"), "forward is given twice"},
		{"orders handler args", site("seckill_orders api"), "wrong argument count"},
		{"orders handler unknown", site("seckill_orders {\nforward\n}"), `seckill_orders: unrecognized subdirective "forward"`},
		{"orders handler prefix", site("seckill_orders {\nprefix orders\n}"), "must start with /"},
		{"orders handler errors", site("seckill_orders {\nerrors html\n}"), `errors "html": want auto, write or return`},
		{"orders handler twice", site("seckill_orders {\nprefix /a\nprefix /b\n}"), "prefix is given twice"},
		{"demo args", site("seckill_demo_signin alice"), "wrong argument count"},
		{"demo unknown", site("seckill_demo_signin {\nttl 1h\n}"), `seckill_demo_signin: unrecognized subdirective "ttl"`},
		{"demo allow no args", site("seckill_demo_signin {\nallow\n}"), "wrong argument count"},
		{"demo allow word", site("seckill_demo_signin {\nallow lan\n}"), `allow "lan": want loopback, private, any or a CIDR range`},
		{"demo allow address", site("seckill_demo_signin {\nallow 10.0.0.1\n}"), `allow "10.0.0.1": want loopback, private, any or a CIDR range`},
		// Every block refuses an option given twice, at the line of the second.
		{"redis username twice", global("store redis a:1 {\nusername u\nusername v\n}"), "seckill: store redis username is given twice, at Caddyfile:5"},
		{"redis cluster twice", global("store redis a:1 b:2 {\ncluster\ncluster\n}"), "store redis cluster is given twice"},
		{"jwt hmac_secret twice", global("jwt {\nalgorithms HS256\nhmac_secret a\nhmac_secret b\n}"), "seckill: jwt hmac_secret is given twice, at Caddyfile:6"},
		{"jwt algorithms twice", global("jwt {\nalgorithms HS256\nalgorithms RS256\n}"), "jwt algorithms is given twice"},
		{"jwt leeway twice", global("jwt {\nalgorithms HS256\nleeway 1s\nleeway 2s\n}"), "jwt leeway is given twice"},
		{"jwt jwks_min_refresh twice", global("jwt {\nalgorithms RS256\njwks_url https://x/jwks\njwks_min_refresh 1m\njwks_min_refresh 2m\n}"), "jwt jwks_min_refresh is given twice"},
		{"jwt jwks_min_refresh zero", global("jwt {\nalgorithms RS256\njwks_url https://x/jwks\njwks_min_refresh 0s\n}"), "jwt jwks_min_refresh must be positive"},
		{"jwt jwks_min_refresh word", global("jwt {\nalgorithms RS256\njwks_url https://x/jwks\njwks_min_refresh often\n}"), `jwt jwks_min_refresh "often"`},
		{"jwt jwks_min_refresh without url", global("jwt {\nalgorithms HS256\njwks_min_refresh 1m\n}"), "jwt jwks_min_refresh needs a jwks_url"},
		// Each waiting_room value is checked at its own line, with the bounds of the JSON config.
		{"waiting_room opens zero", global("activity a {\nstock 1\nwaiting_room {\nopens 0s\n}\n}"), "seckill: activity a: waiting_room opens must be positive, at Caddyfile:6"},
		{"waiting_room opens word", global("activity a {\nstock 1\nwaiting_room {\nopens soon\n}\n}"), "waiting_room opens"},
		{"waiting_room opens too long", global("activity a {\nstock 1\nwaiting_room {\nopens 8d\n}\n}"), "waiting_room opens 192h0m0s: want 1s to 168h0m0s, at Caddyfile:6"},
		{"waiting_room admit word", global("activity a {\nstock 1\nwaiting_room {\nadmit many\n}\n}"), `waiting_room admit "many"`},
		{"waiting_room admit zero", global("activity a {\nstock 1\nwaiting_room {\nadmit 0/s\n}\n}"), `waiting_room admit "0/s"`},
		{"waiting_room admit too many", global("activity a {\nstock 1\nwaiting_room {\nadmit 2000000/s\n}\n}"), "is more than one per microsecond, at Caddyfile:6"},
		{"waiting_room session zero", global("activity a {\nstock 1\nwaiting_room {\nsession 0s\n}\n}"), "waiting_room session must be positive, at Caddyfile:6"},
		{"waiting_room unknown option", global("activity a {\nstock 1\nwaiting_room {\nfifo\n}\n}"), `waiting_room unrecognized option "fifo", at Caddyfile:6`},
		{"waiting_room argument", global("activity a {\nstock 1\nwaiting_room on\n}"), "wrong argument count"},
		{"activity stock twice", global("activity a {\nstock 1\nstock 2\n}"), "seckill: activity a: stock is given twice, at Caddyfile:5"},
		{"activity limit twice", global("activity a {\nstock 1\nlimit 1\nlimit 2\n}"), "activity a: limit is given twice"},
		{"activity end twice", global("activity a {\nstock 1\nend 2036-01-01T00:00:00Z\nend 2037-01-01T00:00:00Z\n}"), "activity a: end is given twice"},
		{"activity pay_within twice", global("activity a {\npay_within 1m\npay_within 2m\n}"), "activity a: pay_within is given twice"},
		{"captcha ttl twice", global("captcha on {\nttl 1m\nttl 2m\n}"), "seckill: captcha ttl is given twice, at Caddyfile:5"},
		{"url_secret twice", global("url_secret a\nurl_secret b"), "seckill: url_secret is given twice, at Caddyfile:4"},
		{"captcha twice", global("captcha off\ncaptcha on"), "captcha is given twice"},
		{"rate_limit ip twice", global("rate_limit ip 2/s\nrate_limit ip 3/s"), "seckill: rate_limit ip is given twice, at Caddyfile:4"},
		{"orders handler errors twice", site("seckill_orders {\nerrors write\nerrors return\n}"), "errors is given twice"},
		{"demo allow twice", site("seckill_demo_signin {\nallow any\nallow private\n}"), "allow is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, tc.caddyfile)
			if err == nil {
				t.Fatalf("adapting succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "Caddyfile:") {
				t.Errorf("error %q does not say where (file:line)", err)
			}
		})
	}
}
