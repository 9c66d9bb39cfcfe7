package batonui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// handler is the dashboard. It reads and changes Baton only through the
// client's admin API (and Locker.Inspect for locks).
type handler struct {
	client *baton.Client
	cfg    *config
	base   string // cfg.BasePath
	pages  map[string]*template.Template
	root   http.Handler // the mux behind the middleware
	hist   history
	now    func() time.Time
}

// New returns the dashboard for client as an http.Handler to mount at
// cfg.BasePath+"/" in your own mux. It checks cfg and does not contact the
// backend.
func New(client *baton.Client, cfg *Config) (http.Handler, error) {
	if client == nil {
		return nil, errors.New("batonui: New: nil client")
	}
	c, err := newConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := &handler{client: client, cfg: c, base: c.BasePath, now: time.Now}
	if h.pages, err = parsePages(h.funcs()); err != nil {
		return nil, err
	}
	h.root = h.routes()
	return h, nil
}

// routes are every URL of the dashboard, under the base path. A
// concurrency key travels in the query, never in the path (see keys.go).
func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))

	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /queues/{queue}", h.queueName(h.queue))
	mux.HandleFunc("GET /queues/{queue}/jobs/{id}", h.queueName(h.job))
	mux.HandleFunc("GET /queues/{queue}/keys", h.queueName(h.keys)) // ?key=: one key
	mux.HandleFunc("GET /queues/{queue}/keys/{key...}", h.queueName(h.keyPath))
	mux.HandleFunc("GET /dead", h.dead)
	mux.HandleFunc("GET /locks", h.locks)
	mux.HandleFunc("GET /schedules", h.schedules)
	mux.HandleFunc("GET /processes", h.processes)

	mux.HandleFunc("POST /queues/{queue}/pause", h.queueName(h.pause))
	mux.HandleFunc("POST /queues/{queue}/resume", h.queueName(h.resume))
	mux.HandleFunc("POST /queues/{queue}/jobs/{id}/retry", h.queueName(h.retry))
	mux.HandleFunc("POST /queues/{queue}/jobs/{id}/delete", h.queueName(h.delete))
	mux.HandleFunc("POST /queues/{queue}/jobs/{id}/cancel", h.queueName(h.cancel))
	mux.HandleFunc("POST /queues/{queue}/keys/limit", h.queueName(h.setLimit)) // ?key=
	mux.HandleFunc("POST /queues/{queue}/keys/reset", h.queueName(h.resetLimit))

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A page or an action asked for with the other method: 405, as
		// the mux would answer without this catch-all.
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if m == r.Method || m == http.MethodGet && r.Method == http.MethodHead {
				continue
			}
			other := r.Clone(r.Context())
			other.Method = m
			if _, pattern := mux.Handler(other); pattern != "/" {
				w.Header().Set("Allow", m)
				h.fail(w, r, http.StatusMethodNotAllowed, "This address takes "+m+" requests only.")
				return
			}
		}
		h.fail(w, r, http.StatusNotFound, "No such page.")
	})

	// Outermost first: headers on every answer, then authentication, then
	// CSRF, then read-only mode, all before any route runs.
	var next http.Handler = mux
	next = h.readOnly(next)
	h.cfg.csrf.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "Cross-origin request refused: actions must come from the dashboard's own pages.")
	}))
	next = h.cfg.csrf.Handler(next)
	if h.cfg.Auth != nil {
		next = h.cfg.Auth(next)
	}
	if h.base != "" {
		next = http.StripPrefix(h.base, next)
	}
	return securityHeaders(next)
}

// queueName wraps a route whose path names a queue: a name that baton
// refuses is answered 400 before any admin call, since the admin API's
// error for it cannot be told from a failure of the backend (502).
func (h *handler) queueName(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if msg := badQueue(r.PathValue("queue")); msg != "" {
			h.fail(w, r, http.StatusBadRequest, msg)
			return
		}
		next(w, r)
	}
}

// badQueue says why baton refuses q as a queue name (baton.CheckQueueName),
// or "" if it takes it.
func badQueue(q string) string {
	if baton.CheckQueueName(q) != nil {
		return fmt.Sprintf("No queue can be named %q: a queue name has 1 to 128 bytes of A-Z a-z 0-9 _ . : -", truncate(q, 60))
	}
	return ""
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.root.ServeHTTP(w, r)
}

// securityHeaders keeps pages out of frames and caches, and lets them run
// only the dashboard's own script and style: no inline script can run even
// if some data escaped its escaping.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=300")
		next.ServeHTTP(w, r)
	})
}

// readOnly refuses every request but GET and HEAD unless the dashboard is
// writable, and bounds the bodies of those it lets through.
func (h *handler) readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if !h.cfg.Writable {
			h.fail(w, r, http.StatusForbidden, "The dashboard is read-only (Config.Writable is off).")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10) // a form is a few bytes
		next.ServeHTTP(w, r)
	})
}

// parsePages parses each page with the layout and the partials.
func parsePages(funcs template.FuncMap) (map[string]*template.Template, error) {
	common, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, fmt.Errorf("batonui: templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "queue", "keys", "key", "job", "dead", "locks", "schedules", "processes", "error"} {
		t, err := common.Clone()
		if err == nil {
			t, err = t.ParseFS(templateFS, "templates/"+name+".html")
		}
		if err != nil {
			return nil, fmt.Errorf("batonui: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what the layout renders; Data is the page's own.
type view struct {
	Title    string
	Nav      string // the menu entry to mark
	Base     string
	Writable bool
	Refresh  int // seconds; 0: off
	Flash    string
	Now      time.Time
	Data     any
}

// render writes page with data, buffered so that a template error becomes
// a clean 500.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	v.Base, v.Writable, v.Now = h.base, h.cfg.Writable, h.now()
	if h.cfg.RefreshInterval > 0 && status == http.StatusOK {
		// Whole seconds, rounded up: never more often than configured.
		v.Refresh = int((h.cfg.RefreshInterval + time.Second - 1) / time.Second)
	}
	if v.Flash == "" {
		v.Flash = flashes[r.URL.Query().Get("done")]
	}
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.cfg.Logger.Error("batonui: rendering", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", &view{Title: http.StatusText(status), Data: msg})
}

// backendError reports a failed admin call: a missing job or key as 404, a
// refused transition (retrying a running job) as 409, anything else as 502.
// Baton's errors name no secret, so the page shows them.
func (h *handler) backendError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, baton.ErrJobNotFound):
		h.fail(w, r, http.StatusNotFound, "No such job: it may have been deleted, or swept after its retention period.")
	case errors.Is(err, baton.ErrKeyNotFound):
		h.fail(w, r, http.StatusNotFound, "No such key in this queue now: a key is idle, and keeps no state, unless jobs of it hold a slot or are parked or a limit is set for it. Keys belong to one queue.")
	case errors.Is(err, batondriver.ErrBadParams):
		h.fail(w, r, http.StatusConflict, "Refused: "+err.Error())
	case errors.Is(err, context.Canceled):
		// The browser went away.
	default:
		h.cfg.Logger.Error("batonui: admin call failed", "path", r.URL.Path, "err", err)
		h.fail(w, r, http.StatusBadGateway, "Baton answered with an error: "+err.Error())
	}
}

// flashes are the only messages a redirect after an action may show,
// chosen by a code in its URL.
var flashes = map[string]string{
	"paused":    "Queue paused: no process fetches from it until it is resumed.",
	"resumed":   "Queue resumed.",
	"retried":   "Job retried, with its attempts reset: it is available now, or parked if its concurrency key is busy.",
	"deleted":   "Job deleted.",
	"cancelled": "Job cancelled: it will not run. Its concurrency key's slot, if it held one, went to the next parked job.",
	"stopping":  "Job asked to stop: its worker cancels the handler's context now, and the job ends cancelled, not retried, unless the handler completes it first.",
	"limit":     "Limit stored: it holds for every process, over the kinds' default, until reset. Parked jobs start as slots free.",
	"halted":    "Key halted: no job of it starts until its limit is raised or reset. Running jobs finish.",
	"reset":     "Limit reset: the default limit of the key's jobs applies again.",
}

// redirectBack answers an action with 303 to the form's "return" field if
// it is a path of the dashboard, else to fallback (a path under the base).
func (h *handler) redirectBack(w http.ResponseWriter, r *http.Request, fallback, done string) {
	target := h.base + fallback
	if ret := r.PostFormValue("return"); ret != "" {
		if u, ok := h.localURL(ret); ok {
			target = u
		}
	}
	h.redirectTo(w, r, target, done)
}

// redirectTo answers an action with 303 to target, a URL of the dashboard,
// marked with the code of its message.
func (h *handler) redirectTo(w http.ResponseWriter, r *http.Request, target, done string) {
	u, _ := url.Parse(target)
	q := u.Query()
	q.Set("done", done)
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// localURL accepts only a path (and query) under the dashboard's base:
// never another host, so that no form can turn the dashboard into an open
// redirect.
func (h *handler) localURL(s string) (string, bool) {
	if strings.ContainsAny(s, "\\\r\n") || strings.HasPrefix(s, "//") {
		return "", false
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	// Dot segments are resolved first, as http.Redirect and browsers
	// resolve them ("%2e%2e" included): "/base/../x" is not under /base.
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if !strings.HasPrefix(clean, h.base+"/") {
		return "", false
	}
	if clean != u.Path {
		u.Path, u.RawPath = clean, ""
	}
	u.Fragment = ""
	return u.RequestURI(), true
}
