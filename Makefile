# caddy-seckill: the two set-up commands are `make run` (the gateway with its embedded defaults)
# and `make test` (installs the test servers when missing, then runs every test).

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: run test deps lint bench bench-load build xcaddy-check fuzz chaos

run:
	$(GO) run ./cmd/caddy run --config Caddyfile.example --adapter caddyfile

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
	$(GO) build -o bin/caddy ./cmd/caddy

xcaddy-check:
	./scripts/xcaddy-check.sh

# The flash-sale pressure test against a freshly built gateway (docs/BENCHMARKS.md).
bench-load:
	$(GO) run ./cmd/seckill-bench -build

# The chaos suite at full size (docs/CHAOS.md): bigger sales, the 30 s PostgreSQL outage, more
# rounds. `make test` runs its short version. It needs redis-server and PostgreSQL, not the browser.
chaos:
	./scripts/ensure-deps.sh
	SECKILL_CHAOS=full $(GO) test -race -count=1 -timeout 30m -v ./chaos/

# Each fuzz target for FUZZTIME (go test runs one target per invocation). Seed corpora are the
# f.Add calls and testdata/fuzz/ folders; a crasher is written to testdata/fuzz/<target>/.
FUZZTIME ?= 30s
# Go shrinks every new-coverage input for up to 60 s by default, which stalls short runs.
FUZZMINIMIZETIME ?= 10s
fuzz:
	$(GO) test ./admission/hashedurl/ -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./jwtauth/ -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./jwtauth/ -run '^$$' -fuzz '^FuzzTokenFromRequest$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./caddymodule/ -run '^$$' -fuzz '^FuzzParseQty$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./caddymodule/ -run '^$$' -fuzz '^FuzzCaddyfile$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./caddymodule/ -run '^$$' -fuzz '^FuzzPathBody$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./caddymodule/ -run '^$$' -fuzz '^FuzzBuyBody$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./caddymodule/ -run '^$$' -fuzz '^FuzzAdminActivityBody$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
	$(GO) test ./admission/ -run '^$$' -fuzz '^FuzzResultJSON$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
