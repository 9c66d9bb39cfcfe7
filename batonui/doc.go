// Package batonui is Baton's web dashboard: an http.Handler you mount in
// your own server to watch queues, jobs and concurrency keys, inspect
// standalone locks and, if you allow it, pause and resume queues, retry and
// delete jobs, and change the limits of concurrency keys.
//
//	ui, err := batonui.New(client, &batonui.Config{
//		BasePath: "/admin/baton",
//		Auth:     batonui.BasicAuth("admin", os.Getenv("BATON_UI_PASSWORD")),
//		Writable: true,
//	})
//	mux.Handle("/admin/baton/", ui)
//
// # Protect it
//
// Job arguments often hold personal data, and actions change what runs, so
// New requires Config.Auth: a middleware that lets a request through only
// when it may see the dashboard. BasicAuth is one (serve it over HTTPS);
// your single sign-on middleware is better. Set Config.NoAuth instead only
// when the dashboard is protected otherwise, for example by an
// authenticating proxy or a mux that listens on loopback.
//
// The dashboard is read-only unless Config.Writable is set: a read-only
// dashboard shows no forms and answers every POST with 403. Actions are
// POST requests, never GET, and cross-origin ones are refused with
// net/http's CrossOriginProtection (Sec-Fetch-Site, else Origin against
// Host), so another site cannot make a signed-in browser post to it. No
// secret appears in a URL, and the locks page never shows lease tokens.
// Every page is sent with a Content-Security-Policy that allows only the
// dashboard's own script and style, and every value from the backend is
// escaped by html/template.
//
// # What it shows
//
// The overview counts each queue's jobs by state (parked and dropped
// included) and its active concurrency keys, with throughput and failures
// over the last hour. Baton keeps no history, so that chart is measured by
// the dashboard itself from samples it takes while its pages are open, kept
// in memory; the page says so. A queue page lists its jobs by state, a page
// at a time; a job page shows its args, attempts, errors, concurrency key,
// fence and a timeline of its timestamps. A queue's keys page lists its
// active keys with their limits, holders, parked jobs, oldest wait and last
// fence, most parked first (or by oldest wait, within the page); a key's
// page shows its holders with their fences and leases, and forms to set its
// limit, halt it (limit 0) and reset it to the kinds' default. A key
// travels in the query (?key=), so it may hold any bytes. The dead page
// lists dead and cancelled jobs per queue. The locks page lists the
// batonlock keys in use with their limits, holders, waiters and last fence
// (Locker.List), and inspects any key by name (Config.Locker); the
// schedules page lists the recurring schedules the running clients
// registered (Client.ScheduleList)
// with their queue, kind, spec, last and next tick, and those given in
// Config.PeriodicJobs that are not registered yet. The processes page
// lists the live worker processes (Client.ProcessList): host, PID, name,
// running or stopping, busy workers of their concurrency, queues with
// their weights or priority order, when each started and last beat.
// Pages update themselves every Config.RefreshInterval with a small script,
// or a meta refresh where JavaScript is off; everything reads without
// JavaScript.
//
// The dashboard uses only the client's admin API, Locker.List and
// Locker.Inspect, and works on every backend. Package baton does not
// import it: a program that does not mount it does not compile it.
package batonui
