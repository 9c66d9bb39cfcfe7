// Package testbed sets up what a benchmark command runs on: the CPU
// profile of its process (-cpuprofile), one private redis-server that
// internal/redistest starts on a free loopback port, and a reader of that
// server's counters; and it prints the header that describes them.
package testbed

import (
	"context"
	"os"
	"time"

	"github.com/batonhq/baton/bench/internal/machine"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/runflags"
	"github.com/batonhq/baton/internal/redistest"
)

// Bed is a running test bed. Close stops it.
type Bed struct {
	// Addr is the private server's address.
	Addr string
	// Stats reads the server's counters over a connection of its own.
	Stats *redisstat.Reader
	// Started is when the server was up: the start of the run's total time.
	Started time.Time

	stopProfile func()
	srv         *redistest.Server
}

// Start starts the CPU profile, if cpuprofile names a file, and the private
// server, connects Stats to it, and writes to stdout the header of command
// name (package machine). On error, what it started is stopped.
func Start(ctx context.Context, name, cpuprofile string) (*Bed, error) {
	stopProfile, err := runflags.StartCPUProfile(cpuprofile)
	if err != nil {
		return nil, err
	}
	srv, err := redistest.Start(nil)
	if err != nil {
		stopProfile()
		return nil, err
	}
	stats, err := redisstat.NewReader(srv.Addr())
	if err != nil {
		srv.Close()
		stopProfile()
		return nil, err
	}
	b := &Bed{Addr: srv.Addr(), Stats: stats, Started: time.Now(), stopProfile: stopProfile, srv: srv}
	machine.PrintHeader(os.Stdout, name, redisstat.ServerVersion(ctx, stats), b.Addr)
	return b, nil
}

// Close closes Stats, stops the server and then the CPU profile.
func (b *Bed) Close() {
	b.Stats.Close()
	b.srv.Close()
	b.stopProfile()
}
