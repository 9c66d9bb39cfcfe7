# Baton's targets. `make test` is everything CI runs.
GO ?= go

.PHONY: test demo bench-locks bench-jobs bench-keys chaos vet fmt

test: vet
	$(GO) test -race -count=1 -timeout 20m ./...
	cd bench && $(GO) vet ./...   # the benchmark module must keep compiling

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GO) vet ./...

demo:
	$(GO) run ./cmd/baton demo

# The long versions of the multi-process tests: the lock contention checker
# for a minute, for a minute through network faults, and for a minute with
# holder processes killed and paused at random, the job crash
# tests (plain and keyed, each on standalone
# Redis and on a 3-master Cluster, every rerun checked to be explained by a
# kill or a lost lease, the keyed ones also for over-limit overlap and
# fence order) with 20,000 jobs each and SIGKILLs, and
# the network fault test (cuts and partitions) with 20,000 keyed jobs, and
# 300 random sequences of 100 key transitions each (make test runs 20 of 60)
# run on memory and Redis alike.
chaos:
	BATON_CONTENTION_DURATION=60s $(GO) test -race -count=1 -timeout 30m -run 'TestContention$$' -v ./batondriver/batonredis/
	BATON_LOCKFAULT_DURATION=60s $(GO) test -race -count=1 -timeout 30m -run 'TestLockNetworkFaults$$' -v ./batondriver/batonredis/
	BATON_LOCKKILL_DURATION=60s $(GO) test -race -count=1 -timeout 30m -run 'TestLockHoldersKilled$$' -v ./batondriver/batonredis/
	BATON_CRASH_JOBS=20000 $(GO) test -race -count=1 -timeout 30m -run 'TestCrash' -v .
	BATON_NETFAULT_JOBS=20000 $(GO) test -race -count=1 -timeout 30m -run 'TestNetworkFaults' -v .
	BATON_DIFF_SEEDS=300 BATON_DIFF_STEPS=100 $(GO) test -count=1 -timeout 30m -run 'TestKeysLikeMemory' -v ./batondriver/batonredis/

bench-locks:
	cd bench && $(GO) run ./cmd/bench-locks

bench-jobs:
	cd bench && $(GO) run ./cmd/bench-jobs

bench-keys:
	cd bench && $(GO) run ./cmd/bench-keys

fmt:
	gofmt -w $$(git ls-files '*.go')
