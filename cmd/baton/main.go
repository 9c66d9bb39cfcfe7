// Command baton is Baton's command-line tool. For now it has one command:
//
//	baton demo [--redis URL]
//
// which runs the lock demonstration on the embedded in-memory backend, or on
// Redis, and exits 0 only if every guarantee it checks held.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: baton <command> [flags]

commands:
  demo    run the lock demonstration (in memory unless --redis is given)
`

// run executes one command and returns the process exit code: 0 success,
// 1 the command failed, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
	return 2
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
