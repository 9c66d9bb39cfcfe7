package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
)

func init() {
	cobra.EnableCommandSorting = false // help lists the commands in the order of commands
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// The exit codes; doc.go documents them.
const (
	exitOK          = 0
	exitFailed      = 1 // the operation failed
	exitUsage       = 2 // bad command, flag, number, URL or argument
	exitNotFound    = 3 // no such queue, job, concurrency key or lock key
	exitUnreachable = 4 // cannot connect to the backend, or it did not answer in time
	exitUnavailable = 5 // the command cannot work yet
)

// exitError is an error with the exit code it calls for. Every error a
// command returns is one (see app.action); any other error out of cobra
// is its own complaint about the command line, hence bad usage.
type exitError struct {
	code int
	err  error // nil: already reported
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func notFoundErr(format string, args ...any) error {
	return &exitError{code: exitNotFound, err: fmt.Errorf(format, args...)}
}

func failedErr(format string, args ...any) error {
	return &exitError{code: exitFailed, err: fmt.Errorf(format, args...)}
}

// classify gives err the exit code it calls for.
func (a *app) classify(err error) error {
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return ee
	case errors.Is(err, baton.ErrJobNotFound), errors.Is(err, baton.ErrKeyNotFound):
		return &exitError{code: exitNotFound, err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &exitError{code: exitUnreachable, err: fmt.Errorf("Redis did not answer within --timeout %v", a.timeout)}
	case errors.Is(err, context.Canceled):
		return &exitError{code: exitFailed, err: errors.New("interrupted")}
	case unreachable(err):
		return &exitError{code: exitUnreachable, err: fmt.Errorf("lost the connection to Redis: %w", err)}
	}
	return &exitError{code: exitFailed, err: err}
}

// unreachable reports whether err says the backend could not be talked to,
// rather than that it refused the operation.
func unreachable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, rueidis.ErrClosing) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// app is one run of the command: its output and its global flags.
type app struct {
	stdout, stderr io.Writer

	redis   []string      // --redis, each possibly a comma-separated list
	tlsCA   string        // --tls-ca
	prefix  string        // --prefix
	json    bool          // --json
	timeout time.Duration // --timeout
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: exitUsage, err: err} // cobra's: unknown command or flag
	}
	if ee.code == exitUsage {
		// A bad flag may have stopped parsing before --json.
		a.json = a.json || slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
	}
	if ee.err != nil {
		a.report(ee)
	}
	return ee.code
}

// report prints a failure on stderr: a line of text, or with --json an
// object scripts can read.
func (a *app) report(ee *exitError) {
	if a.json {
		b, _ := json.Marshal(struct {
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}{ee.err.Error(), ee.code})
		fmt.Fprintf(a.stderr, "%s\n", b)
		return
	}
	// One line, even for errors joined over several queues.
	fmt.Fprintf(a.stderr, "baton: %s\n", strings.ReplaceAll(ee.err.Error(), "\n", "; "))
	if ee.code == exitUsage {
		fmt.Fprintln(a.stderr, "Run 'baton --help' for usage.")
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "baton",
		Short: "Administer Baton's queues, jobs, concurrency keys and locks",
		Long: `baton looks at and administers the queues, jobs, concurrency keys and locks that
Baton keeps in Redis.

Connect with --redis URL or BATON_REDIS_URL: redis://host:port/db, rediss:// for TLS,
?master_set=NAME for Sentinel, several comma-separated addresses for a Cluster
(go doc github.com/batonhq/baton/cmd/baton has the details).

Exit codes: 0 ok, 1 the operation failed, 2 bad usage, 3 not found,
4 Redis unreachable, 5 command not available yet.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q", args[0])
			}
			fmt.Fprint(a.stderr, cmd.UsageString())
			return usageErr("no command given")
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	pf := root.PersistentFlags()
	pf.StringArrayVar(&a.redis, "redis", nil, "Redis `URL`, or several comma-separated addresses for a Cluster; may be repeated (default $BATON_REDIS_URL)")
	pf.StringVar(&a.tlsCA, "tls-ca", "", "PEM `file` of the CAs that sign the server's certificate (with rediss://)")
	pf.StringVar(&a.prefix, "prefix", "", `key prefix the applications use (default $BATON_PREFIX, else "baton")`)
	pf.BoolVar(&a.json, "json", false, "print JSON for scripts instead of tables")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "give up on Redis after this long; 0 means never")

	for _, newCmd := range commands {
		root.AddCommand(newCmd(a))
	}
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			// cobra's own help shows the root's help, and exits 0, for an
			// unknown topic.
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageErr("unknown help topic %q", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	})
	return root
}

// commands are baton's commands, in the order of its help.
var commands = []func(*app) *cobra.Command{
	newStatsCmd,
	newQueuesCmd,
	newQueueCmd,
	newJobsCmd,
	newDeadCmd,
	newKeysCmd,
	newKeyCmd,
	newLimitCmd,
	newLocksCmd,
	newSchedulesCmd,
	newProcessesCmd,
	newFunctionsCmd,
	newDashCmd,
	newDemoCmd,
}

// group returns a command that only holds subcommands: run without one, or
// with an unknown one, it is bad usage (cobra would print the help and
// exit 0, which a script would take for success).
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usageErr("%q needs a subcommand", cmd.CommandPath())
		},
	}
	c.AddCommand(subs...)
	return c
}

// action makes a command's RunE: it checks the number of arguments,
// connects, runs fn under --timeout, and classifies its error.
func (a *app) action(minArgs, maxArgs int, fn func(ctx context.Context, b *backend, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := checkArgs(cmd, args, minArgs, maxArgs); err != nil {
			return err
		}
		if a.timeout < 0 {
			return usageErr("--timeout %v: want a duration from 0 (never) up", a.timeout)
		}
		ctx := cmd.Context()
		if a.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, a.timeout)
			defer cancel()
		}
		b, err := a.connect()
		if err != nil {
			return a.classify(err)
		}
		defer b.close()
		return a.classify(fn(ctx, b, args))
	}
}

// checkArgs checks the number of positional arguments; maxArgs < 0 means
// no upper bound.
func checkArgs(cmd *cobra.Command, args []string, minArgs, maxArgs int) error {
	switch {
	case len(args) < minArgs:
		return usageErr("%s: missing argument (usage: %s)", cmd.CommandPath(), cmd.UseLine())
	case maxArgs >= 0 && len(args) > maxArgs:
		return usageErr("%s: unexpected argument %q (usage: %s)", cmd.CommandPath(), args[maxArgs], cmd.UseLine())
	}
	return nil
}
