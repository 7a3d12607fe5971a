# caddy-seckill: the two set-up commands are `make run` (the gateway with its embedded defaults)
# and `make test` (installs the test servers when missing, then runs every test).

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: run test deps lint bench bench-load build xcaddy-check fuzz chaos bench-goals bench-wrk bench-wrk-queue

# bin/caddy is built as Caddy's releases are (its .goreleaser.yml): no cgo, -trimpath, and
# -ldflags "-s -w", which drops the symbol table and DWARF (stack traces and pprof still name
# functions and lines). README.md, "Quick start", has the sizes; BUILDFLAGS= keeps the symbols.
BUILDFLAGS ?= -trimpath -ldflags "-s -w"

# The sale is kept in ./seckill-data (store local): running it again continues it. The binary is
# built, then exec'ed in place of the recipe's shell: Ctrl-C then reaches Caddy alone, which shuts
# down and exits 0, and make ends quietly (`go run` answered the interrupt with status 1).
run: build
	exec ./bin/caddy run --config Caddyfile.example --adapter caddyfile

deps:
	./scripts/ensure-deps.sh
	./scripts/ensure-chromium.sh

test: deps
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)

lint:
	golangci-lint run ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o bin/caddy ./cmd/caddy

xcaddy-check:
	./scripts/xcaddy-check.sh

# The flash-sale pressure test against a freshly built gateway (docs/BENCHMARKS.md).
bench-load:
	$(GO) run ./cmd/seckill-bench -build

# The buy path and the sold-out refusal under wrk (apt-get install wrk) beside respond receiving the
# same requests, for stores local, memory and redis (a private redis-server; docs/BENCHMARKS.md);
# STORES, FSYNC, REPEATS, DURATION, SLICE, SOLDOUT, SOLDOUT_SLICE tune it.
bench-wrk:
	GO=$(GO) ./scripts/bench-wrk.sh

# A waiting buyer's poll of the waiting room under wrk beside respond receiving the same polls, for
# store memory and store redis (a private redis-server) (docs/BENCHMARKS.md); STORES, REPEATS,
# DURATION, USERS tune it.
bench-wrk-queue:
	GO=$(GO) ./scripts/bench-wrk-queue.sh

# Every variant the goals of docs/BENCHMARKS.md are measured on, one after the other (~15 min).
bench-goals:
	GO=$(GO) ./scripts/bench-goals.sh

# The chaos suite at full size (docs/CHAOS.md): bigger sales, the 30 s PostgreSQL outage, more
# rounds. `make test` runs its short version. It needs redis-server and PostgreSQL, not the browser.
chaos:
	./scripts/ensure-deps.sh
	SECKILL_CHAOS=full $(GO) test -race -count=1 -timeout 30m -v ./chaos/

# Each fuzz target for FUZZTIME (go test runs one target per invocation). The seed corpora are the
# targets' f.Add calls (and caddymodule/testdata/*.caddyfiletest for FuzzCaddyfile); a crasher is
# written to testdata/fuzz/<target>/ and then replays in every `go test`. scripts/fuzz.sh runs a
# target again when Go's coordinator fails it with nothing found (golang/go#75804).
FUZZTIME ?= 30s
# Go shrinks every new-coverage input for up to 60 s by default, which stalls short runs.
FUZZMINIMIZETIME ?= 10s
fuzz:
	GO=$(GO) ./scripts/fuzz.sh ./hashedurl/ FuzzVerify $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./jwtauth/ FuzzVerify $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./jwtauth/ FuzzTokenFromRequest $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzParseQty $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzCaddyfile $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzPathBody $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzBuyBody $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzJoinBody $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./caddymodule/ FuzzAdminActivityBody $(FUZZTIME) $(FUZZMINIMIZETIME)
	GO=$(GO) ./scripts/fuzz.sh ./admission/ FuzzResultJSON $(FUZZTIME) $(FUZZMINIMIZETIME)
