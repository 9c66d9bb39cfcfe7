package jobcell

import (
	"context"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/bench/internal/cmdcount"
)

// Baton is the Baton end of one cell: a rueidis client of its own (default
// options unless made by NewBatonOptions, commands counted in Sent) and a batonredis driver on a key
// prefix of the cell's own, in database 0. The command makes the Client,
// on Driver or on a wrapper around it.
type Baton struct {
	// Prefix is the cell's key prefix.
	Prefix string
	// Sent counts the commands of the cell's rueidis client.
	Sent atomic.Int64
	// Driver is the cell's driver.
	Driver *batonredis.Driver

	rc rueidis.Client
}

// NewBaton makes a Baton cell on key prefix of the server at addr.
func NewBaton(addr, prefix string) (*Baton, error) {
	return NewBatonOptions(rueidis.ClientOption{InitAddress: []string{addr}}, prefix)
}

// NewBatonOptions makes a Baton cell on key prefix, its rueidis client
// made with options o (o.InitAddress names the server) instead of the
// defaults.
func NewBatonOptions(o rueidis.ClientOption, prefix string) (*Baton, error) {
	b := &Baton{Prefix: prefix}
	rc, err := cmdcount.NewRueidisOptions(o, &b.Sent)
	if err != nil {
		return nil, err
	}
	drv, err := batonredis.New(rc, &batonredis.Config{Prefix: prefix})
	if err != nil {
		rc.Close()
		return nil, err
	}
	b.rc, b.Driver = rc, drv
	return b, nil
}

// Close closes the driver and the rueidis client.
func (b *Baton) Close() {
	b.Driver.Close()
	b.rc.Close()
}

// Keys is the pattern of every key of the cell.
func (b *Baton) Keys() string { return b.Prefix + ":*" }

// InsertBatches inserts n jobs through c with InsertMany, 1000 at a time;
// job i is params(i).
func InsertBatches(ctx context.Context, c *baton.Client, n int, params func(i int) *baton.InsertManyParams) error {
	batch := make([]*baton.InsertManyParams, 0, 1000)
	for i := range n {
		batch = append(batch, params(i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := c.InsertMany(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}
