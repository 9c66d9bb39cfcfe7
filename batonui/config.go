package batonui

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batonlock"
)

// Config configures the dashboard. nil is not accepted by New: a dashboard
// must say how it is protected (Auth or NoAuth).
type Config struct {
	// BasePath is the path the handler is mounted at, such as
	// "/admin/baton", without a trailing slash, written as the decoded
	// path it is: no %-escapes, dot segments, spaces, braces or control
	// characters (New refuses them). Mount the handler at
	// BasePath+"/" without stripping the prefix:
	//
	//	mux.Handle("/admin/baton/", h)
	//
	// Default "": the handler serves from the root.
	BasePath string

	// Auth wraps every request of the dashboard, its pages, assets and
	// actions: it calls next for a request it lets through and answers the
	// others itself (401, a redirect to a login page...). BasicAuth makes
	// one; your own single sign-on middleware fits too.
	//
	// New refuses a Config with neither Auth nor NoAuth: job arguments
	// often hold personal data, and actions change what runs.
	Auth func(next http.Handler) http.Handler
	// NoAuth says that the dashboard is protected by other means (your mux
	// authenticates before it, or it listens on loopback only) and runs it
	// with no Auth. Default false.
	NoAuth bool

	// Writable turns on the actions: pausing and resuming queues, retrying
	// and deleting jobs, and setting, halting and resetting the limits of
	// concurrency keys. Default false: the dashboard is read-only, shows no
	// forms and answers every POST with 403.
	//
	// Actions are POST requests only, and the cross-origin ones are
	// refused (CSRF protection with net/http's CrossOriginProtection).
	Writable bool
	// TrustedOrigins are origins, such as "https://ops.example.com", whose
	// pages may post actions to the dashboard although they are not its
	// own origin. Default none.
	TrustedOrigins []string

	// Locker, if set, lets the locks page list the standalone lock keys in
	// use (package batonlock), PageSize at a time, and inspect any by key.
	// Default nil: no locks page content.
	Locker *batonlock.Locker
	// LockKeys are lock keys the locks page always shows. Needs Locker.
	LockKeys []string

	// PeriodicJobs are schedules the schedules page shows besides those the
	// running clients registered in the backend (Client.ScheduleList): the
	// ones given here that are not registered, such as a schedule before
	// its first tick, are listed apart with their next ticks. Optional;
	// pass the same slice as the clients' baton.Config.PeriodicJobs.
	// Default none.
	PeriodicJobs []*baton.PeriodicJob

	// RefreshInterval is how often open pages update themselves (with a
	// small script, or a meta refresh without JavaScript), in whole
	// seconds, rounded up. Default 5s; at least 1s; negative: never.
	RefreshInterval time.Duration

	// PageSize is how many jobs a list shows per page, at most 1000.
	// Default 50.
	PageSize int

	// Logger receives errors of the backend while serving. Default
	// slog.Default().
	Logger *slog.Logger
}

// config is a Config with defaults filled in and checked.
type config struct {
	Config
	csrf *http.CrossOriginProtection
}

func newConfig(cfg *Config) (*config, error) {
	if cfg == nil {
		return nil, fmt.Errorf("batonui: nil Config: set Config.Auth (or Config.NoAuth if the dashboard is protected otherwise)")
	}
	c := &config{Config: *cfg}
	if c.Auth == nil && !c.NoAuth {
		return nil, fmt.Errorf("batonui: Config.Auth is not set: set it (batonui.BasicAuth, or your own middleware), or set Config.NoAuth if the dashboard is protected otherwise")
	}
	if c.Auth != nil && c.NoAuth {
		return nil, fmt.Errorf("batonui: Config.Auth and Config.NoAuth are both set")
	}
	// The mux and StripPrefix match the decoded, cleaned path: a base path
	// with an escape (%20) or a dot segment would match no request.
	if b := c.BasePath; b != "" && (!strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.ContainsAny(b, "?#\\ {}%") ||
		path.Clean(b) != b || strings.ContainsFunc(b, unicode.IsControl)) {
		return nil, fmt.Errorf("batonui: Config.BasePath %q must start with / and not end with one, and hold no escape, dot segment or control character (e.g. /admin/baton)", b)
	}
	if len(c.LockKeys) > 0 && c.Locker == nil {
		return nil, fmt.Errorf("batonui: Config.LockKeys needs Config.Locker")
	}
	for i, p := range c.PeriodicJobs {
		if p == nil || p.Schedule == nil {
			return nil, fmt.Errorf("batonui: Config.PeriodicJobs[%d] is nil or has no Schedule", i)
		}
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = 5 * time.Second
	}
	if c.RefreshInterval > 0 && c.RefreshInterval < time.Second {
		return nil, fmt.Errorf("batonui: Config.RefreshInterval %v is shorter than 1s", c.RefreshInterval)
	}
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.PageSize < 0 || c.PageSize > 1000 {
		return nil, fmt.Errorf("batonui: Config.PageSize %d out of range 1..1000", c.PageSize)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.csrf = http.NewCrossOriginProtection()
	for _, o := range c.TrustedOrigins {
		if err := c.csrf.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("batonui: Config.TrustedOrigins: %w", err)
		}
	}
	return c, nil
}

// BasicAuth returns an Auth middleware that asks for HTTP basic
// authentication with user and password, compared in constant time. Serve
// the dashboard over HTTPS only: basic authentication sends the password
// with every request. An empty user or password lets nobody in.
func BasicAuth(user, password string) func(http.Handler) http.Handler {
	usable := user != "" && password != ""
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
			// Both compared always, so timing tells nothing about which failed.
			userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
			passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
			if !ok || !usable || userOK&passOK != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="Baton", charset="UTF-8"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
