package main

import (
	"context"
	"errors"
	"fmt"
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
until interrupted. It prints the address it serves on.

It is read-only unless --writable is given. With BATON_DASH_USER and
BATON_DASH_PASSWORD set in the environment, every request needs those
credentials (HTTP basic auth; put TLS in front of it off loopback). Without
them the dashboard is served only on a loopback address, to this machine:
--addr must then be 127.0.0.1, ::1 or localhost. Credentials are never taken
from the command line, where other users could read them.`

func newDashCmd(a *app) *cobra.Command {
	var addr string
	var writable bool
	cmd := &cobra.Command{
		Use:   "dash [--addr HOST:PORT] [--writable]",
		Short: "Serve the web dashboard",
		Long:  dashLong,
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "`address` to listen on (port 0: any free port)")
	cmd.Flags().BoolVar(&writable, "writable", false, "allow pausing queues, retrying and deleting jobs, and changing key limits")
	cmd.RunE = a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
		return a.serveDash(ctx, cmd, b, addr, writable)
	})
	return cmd
}

// serveDash serves the dashboard on addr until ctx ends.
func (a *app) serveDash(_ context.Context, cmd *cobra.Command, b *backend, addr string, writable bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageErr("baton dash: bad --addr %q: want host:port, e.g. 127.0.0.1:8080", addr)
	}
	cfg := &batonui.Config{Writable: writable, Locker: b.locker}
	user, pass := os.Getenv("BATON_DASH_USER"), os.Getenv("BATON_DASH_PASSWORD")
	switch {
	case user != "" && pass != "":
		cfg.Auth = batonui.BasicAuth(user, pass)
	case user != "" || pass != "":
		return usageErr("baton dash: set both BATON_DASH_USER and BATON_DASH_PASSWORD, or neither")
	case !isLoopback(host):
		return usageErr("baton dash: without BATON_DASH_USER and BATON_DASH_PASSWORD the dashboard is served on loopback only, not on %q", host)
	default:
		cfg.NoAuth = true
	}
	ui, err := batonui.New(b.client, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("baton dash: %w", err)
	}
	srv := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only"
	if writable {
		mode = "writable"
	}
	fmt.Fprintf(a.stdout, "serving the dashboard (%s) at http://%s/ — interrupt to stop\n", mode, ln.Addr())
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
