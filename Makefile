# Baton's targets. `make test` is everything CI runs.
GO ?= go

.PHONY: test demo bench-locks chaos vet fmt

test: vet
	$(GO) test -race -count=1 -timeout 20m ./...
	cd bench && $(GO) vet ./...   # the benchmark module must keep compiling

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet ./...

demo:
	$(GO) run ./cmd/baton demo

# The contention checker for a minute instead of seconds: several processes,
# many goroutines, every history checked.
chaos:
	BATON_CONTENTION_DURATION=60s $(GO) test -race -count=1 -timeout 30m -run 'TestContention$$' -v ./batondriver/batonredis/

bench-locks:
	cd bench && $(GO) run ./cmd/bench-locks

fmt:
	gofmt -w $$(git ls-files '*.go')
