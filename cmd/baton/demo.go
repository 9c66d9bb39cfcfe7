package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/spf13/cobra"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/demo"
)

const demoUsage = `Usage:
  baton demo [--redis URL] [--dash [ADDR]] [--no-color]
  baton demo locks [--redis URL]

baton demo runs a realistic scenario of a few hundred jobs on two worker
processes sharing one backend — webhooks limited to 3 at once per customer
over 20 customers, one customer halted and resumed midway, a per-user sync
that drops its twins, a recurring fan-out, a charge that fails twice then
succeeds — with live progress, then a summary and a PASS or FAIL line per
guarantee. It takes about 16 seconds.

baton demo locks demonstrates the standalone locks (package batonlock):
twins dropping out, slots waited for in order, a crashed holder, fencing.

Both run on the embedded in-memory backend unless --redis is given; on Redis
they work under a key prefix of their own and remove their keys at the end.
They exit 0 if every guarantee held, 1 if one did not (or the backend could
not be used), 2 for a bad flag.

Flags:
  --redis URL     Redis URL (redis://host:port/db) (default $BATON_REDIS_URL)
  --dash [ADDR]   serve the dashboard while the demo runs, read-only, and
                  print its URL (default address 127.0.0.1:0, a free port)
  --no-color      no colors (the default when NO_COLOR is set); progress is
                  redrawn in place on a terminal, else printed as lines
`

// defaultDash is where --dash alone serves the dashboard.
const defaultDash = "127.0.0.1:0"

// newDemoCmd is `baton demo`. It parses its own flags, so that its exit
// codes stay what `make demo` and CI rely on, and it needs no --redis.
func newDemoCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:                "demo [locks] [--redis URL] [--dash [ADDR]] [--no-color]",
		Short:              "Run the demonstration: a few hundred jobs, every guarantee checked (in memory unless --redis)",
		Long:               demoUsage,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := runDemo(cmd.Context(), args, a.stdout, a.stderr); code != 0 {
				return &exitError{code: code} // runDemo has said why
			}
			return nil
		},
	}
	// `baton help demo`: the demo takes none of the global flags.
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) { fmt.Fprint(c.OutOrStdout(), demoUsage) })
	return cmd
}

// runDemo runs `baton demo` or `baton demo locks` and returns the exit code.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	locks := len(args) > 0 && args[0] == "locks"
	if locks {
		args = args[1:]
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	redisURL := fs.String("redis", os.Getenv("BATON_REDIS_URL"), "")
	var dash dashFlag
	noColor := fs.Bool("no-color", os.Getenv("NO_COLOR") != "", "")
	// For tests, not in the usage: --scale multiplies the scenario's
	// durations, --sabotage breaks a guarantee (demo.Config.Sabotage).
	scale := fs.Float64("scale", 1, "")
	sabotage := fs.String("sabotage", "", "")
	if !locks {
		fs.Var(&dash, "dash", "")
	}
	if err := fs.Parse(dashValue(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, demoUsage)
			return 0
		}
		fmt.Fprintf(stderr, "baton demo: %v\n%s", err, demoUsage)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton demo: unexpected argument %q\n%s", fs.Arg(0), demoUsage)
		return 2
	}
	if dash.addr != "" {
		if _, _, err := net.SplitHostPort(dash.addr); err != nil {
			fmt.Fprintf(stderr, "baton demo: bad --dash address %q: want host:port, e.g. 127.0.0.1:8080\n", dash.addr)
			return 2
		}
	}
	driver, backend, closeDriver, err := openDriver(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "baton demo: %v\n", err)
		return 1
	}
	defer func() {
		if err := closeDriver(); err != nil {
			fmt.Fprintf(stderr, "baton demo: %v\n", err)
		}
	}()

	if locks {
		fmt.Fprintf(stdout, "Baton lock demo on %s\n\n", backend)
		err = demo.RunLocks(ctx, driver, stdout, nil)
	} else {
		live := terminal(stdout)
		_, err = demo.Run(ctx, driver, stdout, &demo.Config{
			Backend:  backend,
			Scale:    *scale,
			Live:     live,
			Color:    live && !*noColor,
			Dash:     dash.addr,
			Sabotage: *sabotage,
		})
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "baton demo: interrupted")
	case errors.Is(err, demo.ErrGuarantee), locks:
		// The demo has said on stdout what did not hold.
	default:
		fmt.Fprintf(stderr, "baton demo: %v\n", err)
	}
	return 1
}

// dashFlag is --dash: alone it serves the dashboard at defaultDash, with a
// value (--dash=ADDR, or --dash ADDR, see dashValue) there.
type dashFlag struct{ addr string }

func (d *dashFlag) String() string   { return d.addr }
func (d *dashFlag) IsBoolFlag() bool { return true }

func (d *dashFlag) Set(v string) error {
	switch v {
	case "true":
		v = defaultDash
	case "false":
		v = ""
	}
	d.addr = v
	return nil
}

// dashValue joins "--dash ADDR" into "--dash=ADDR": a flag whose value is
// optional takes it only after '=' in package flag, and ADDR would stop
// the parsing as a stray argument.
func dashValue(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "--dash" || a == "-dash") && i+1 < len(args) && strings.Contains(args[i+1], ":") && !strings.HasPrefix(args[i+1], "-") {
			a += "=" + args[i+1]
			i++
		}
		out = append(out, a)
	}
	return out
}

// terminal reports whether w is a terminal, where the progress can be
// redrawn in place.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// openDriver returns the in-memory backend for an empty URL, else a Redis
// backend under a key prefix of this run's own, checked with a PING so that
// a wrong address fails here clearly. It also names the backend; close
// removes the run's keys from Redis.
func openDriver(url string) (batondriver.Driver, string, func() error, error) {
	if url == "" {
		return batonmem.New(), "the embedded in-memory backend", func() error { return nil }, nil
	}
	opt, where, err := redisOption([]string{url})
	if err != nil {
		return nil, "", nil, err
	}
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = 5 * time.Second
	}
	opt.ClientName = "baton-demo"
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, "", nil, fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	prefix := fmt.Sprintf("baton-demo-%x", time.Now().UnixNano())
	d, err := batonredis.New(client, &batonredis.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	closeAll := func() error {
		d.Close()
		defer client.Close()
		if err := removeKeys(client, prefix); err != nil {
			return fmt.Errorf("removing the demo's keys (prefix %s:) from Redis: %w", prefix, err)
		}
		return nil
	}
	return d, fmt.Sprintf("Redis at %s (key prefix %s)", where, prefix), closeAll, nil
}

// removeKeys deletes every key under prefix: SCAN on every node, UNLINK
// through the client, which sends each key to its node.
func removeKeys(client rueidis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, node := range client.Nodes() {
		var cursor uint64
		for {
			entry, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return err
			}
			cmds := make(rueidis.Commands, 0, len(entry.Elements))
			for _, key := range entry.Elements {
				cmds = append(cmds, client.B().Unlink().Key(key).Build())
			}
			for _, resp := range client.DoMulti(ctx, cmds...) {
				if err := resp.Error(); err != nil {
					return err
				}
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}
