package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/rueidis"
	"github.com/spf13/cobra"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/demo"
)

// newDemoCmd is `baton demo`. It parses its own flags, as it did before the
// other commands existed, so that its behaviour and exit codes stay exactly
// what `make demo` and CI rely on.
func newDemoCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                "demo [--redis URL]",
		Short:              "Run the lock demonstration (in memory unless --redis is given)",
		Long:               "Run the lock demonstration on the embedded in-memory backend, or on Redis with --redis\n(or BATON_REDIS_URL). It exits 0 only if every guarantee it checks held, else 1.",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := runDemo(cmd.Context(), args, a.stdout, a.stderr); code != 0 {
				return &exitError{code: code} // runDemo has said why
			}
			return nil
		},
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", os.Getenv("BATON_REDIS_URL"), "Redis URL (redis://host:port/db); default: the embedded in-memory backend")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	driver, closeDriver, err := openDriver(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "baton demo: %v\n", err)
		return 1
	}
	defer closeDriver()
	backend := "the embedded in-memory backend"
	if *redisURL != "" {
		backend = "Redis at " + *redisURL
	}
	fmt.Fprintf(stdout, "Baton lock demo on %s\n\n", backend)
	if err := demo.Run(ctx, driver, stdout, nil); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "baton demo: interrupted")
		}
		return 1
	}
	return 0
}

// openDriver returns the in-memory backend for an empty URL, else a Redis
// backend, checked with a PING so that a wrong address fails here clearly.
func openDriver(url string) (batondriver.LockDriver, func(), error) {
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
	d, err := batonredis.New(client, nil)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return d, func() { d.Close(); client.Close() }, nil
}
