// Package exampleenv holds what the example programs share and is not
// theirs to show: opening a backend from a --redis flag, and printing the
// guarantees they check.
package exampleenv

import (
	"fmt"
	"io"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
)

// Open returns the in-memory backend for an empty url, else Redis at url
// with keys under prefix ("": the default), and a function that closes it.
func Open(url string, prefix string) (batondriver.Driver, func(), error) {
	if url == "" {
		return batonmem.New(), func() {}, nil
	}
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("bad --redis URL %q: %w", url, err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", url, err)
	}
	d, err := batonredis.New(client, &batonredis.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return d, func() { d.Close(); client.Close() }, nil
}

// Backend names the backend Open opens for url, for people.
func Backend(url string) string {
	if url == "" {
		return "the in-memory backend"
	}
	return "Redis at " + url
}

// Checks prints each guarantee as it is checked and counts the failures.
type Checks struct {
	Out    io.Writer
	failed int
}

// Check prints what with "ok", or "FAILED" if !ok.
func (c *Checks) Check(ok bool, what string) {
	mark := "ok"
	if !ok {
		mark = "FAILED"
		c.failed++
	}
	fmt.Fprintf(c.Out, "  %-6s %s\n", mark, what)
}

// Result prints the verdict and returns the exit code: 0 if every check
// held, else 1.
func (c *Checks) Result() int {
	if c.failed > 0 {
		fmt.Fprintf(c.Out, "\n%d check(s) FAILED\n", c.failed)
		return 1
	}
	fmt.Fprintln(c.Out, "\nAll guarantees held.")
	return 0
}
