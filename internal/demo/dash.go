package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batonui"
)

// serveDash serves the dashboard of client at addr until stop is called,
// and returns its URL. It is read-only: the demo's guarantees assume that
// nobody pauses its queues or deletes its jobs meanwhile.
func serveDash(addr string, client *baton.Client, periodic []*baton.PeriodicJob) (url string, stop func(), err error) {
	h, err := batonui.New(client, &batonui.Config{
		NoAuth:          true, // demo data, read-only; loopback by default
		PeriodicJobs:    periodic,
		RefreshInterval: time.Second,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("dashboard: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Default().Warn("demo: dashboard stopped", "err", err)
		}
	}()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}
	return "http://" + browsable(ln.Addr().(*net.TCPAddr)) + "/", stop, nil
}

// browsable is an address a browser on this machine can open: a wildcard
// address is reached through loopback.
func browsable(a *net.TCPAddr) string {
	ip := a.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}
