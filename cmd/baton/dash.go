package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/batonui"
)

// baton dash serves the batonui dashboard for the backend named by --redis,
// until interrupted.

const dashLong = `Serve the web dashboard (package batonui) for the backend named by --redis,
until interrupted. Once it serves, it prints the URL it serves on: with --json as
an object {"url": "http://127.0.0.1:8080/", "writable": false}.

It is read-only unless --writable is given. With BATON_DASH_USER and
BATON_DASH_PASSWORD set in the environment, every request needs those
credentials (HTTP basic auth; put TLS in front of it off loopback). Without
them the dashboard is served only on a loopback address, to this machine:
--addr must then be 127.0.0.1, ::1 or localhost. Credentials are never taken
from the command line, where other users could read them.`

func newDashCmd(a *app) *cobra.Command {
	var addr string
	var writable bool
	var cfg *batonui.Config // made by PreRunE
	cmd := &cobra.Command{
		Use:   "dash [--addr HOST:PORT] [--writable]",
		Short: "Serve the web dashboard",
		Long:  dashLong,
		// The address and the credentials are checked before connecting:
		// bad usage is exit code 2, whatever the state of Redis.
		PreRunE: func(*cobra.Command, []string) error {
			var err error
			cfg, err = dashConfig(addr, writable)
			return err
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "`address` to listen on (port 0: any free port)")
	cmd.Flags().BoolVar(&writable, "writable", false, "allow pausing queues, retrying and deleting jobs, and changing key limits")
	cmd.RunE = a.action(0, 0, func(_ context.Context, b *backend, _ []string) error {
		cfg.Locker = b.locker
		return a.serveDash(cmd, b, addr, cfg)
	})
	return cmd
}

// dashConfig checks `dash`'s --addr and the credentials in the environment,
// and returns the dashboard's Config but its Locker.
func dashConfig(addr string, writable bool) (*batonui.Config, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageErr("baton dash: bad --addr %q: want host:port, e.g. 127.0.0.1:8080", addr)
	}
	cfg := &batonui.Config{Writable: writable}
	user, pass := os.Getenv("BATON_DASH_USER"), os.Getenv("BATON_DASH_PASSWORD")
	switch {
	case user != "" && pass != "":
		cfg.Auth = batonui.BasicAuth(user, pass)
	case user != "" || pass != "":
		return nil, usageErr("baton dash: set both BATON_DASH_USER and BATON_DASH_PASSWORD, or neither")
	case !isLoopback(host):
		return nil, usageErr("baton dash: without BATON_DASH_USER and BATON_DASH_PASSWORD the dashboard is served on loopback only, not on %q", host)
	default:
		cfg.NoAuth = true
	}
	return cfg, nil
}

// dashOut is what `dash --json` prints once it serves.
type dashOut struct {
	URL      string `json:"url"`
	Writable bool   `json:"writable"`
}

// serveDash serves the dashboard on addr until the process is interrupted.
func (a *app) serveDash(cmd *cobra.Command, b *backend, addr string, cfg *batonui.Config) error {
	ui, err := batonui.New(b.client, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("baton dash: %w", err)
	}
	srv := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second}
	out := dashOut{URL: fmt.Sprintf("http://%s/", ln.Addr()), Writable: cfg.Writable}
	mode := "read-only"
	if cfg.Writable {
		mode = "writable"
	}
	if err := a.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "serving the dashboard (%s) at %s — interrupt to stop\n", mode, out.URL)
	}); err != nil {
		_ = ln.Close()
		return err
	}
	// The command's context has --timeout applied; the dashboard runs until
	// the process's own context (interrupt) ends.
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-cmd.Root().Context().Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
