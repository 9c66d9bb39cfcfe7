// Baton dashboard: keeps the open page up to date by fetching it again
// every data-refresh seconds and swapping its <main>; asks before
// submitting forms marked data-confirm. Without JavaScript the page
// refreshes itself with a meta refresh instead, and forms submit at once.
(function () {
	"use strict";

	document.addEventListener("submit", function (e) {
		var msg = e.target.getAttribute("data-confirm");
		if (msg && !window.confirm(msg)) {
			e.preventDefault();
		}
	});

	// A redirect after an action carries ?done=... to show its message
	// once; drop it so that reloading and live updates do not repeat it.
	if (window.URLSearchParams && window.history.replaceState) {
		var u = new URL(window.location.href);
		if (u.searchParams.has("done")) {
			u.searchParams.delete("done");
			window.history.replaceState(null, "", u.toString());
		}
	}

	var secs = parseInt(document.body.getAttribute("data-refresh"), 10);
	if (!(secs > 0) || !window.fetch || !window.DOMParser) {
		return;
	}
	var status = document.getElementById("live");

	// busy: the user is typing or selecting; do not pull the page away.
	function busy() {
		var a = document.activeElement;
		if (a && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) {
			return true;
		}
		var sel = window.getSelection && window.getSelection();
		return !!(sel && String(sel) !== "");
	}

	function mark(ok, why) {
		if (!status) {
			return;
		}
		status.className = ok ? "live" : "live off";
		status.textContent = ok ? "live" : "paused";
		status.title = ok ? "This page updates itself every " + secs + "s." : "Live updates failed (" + why + "); retrying.";
	}

	function tick() {
		if (document.hidden || busy()) {
			return later();
		}
		fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
			.then(function (r) {
				if (!r.ok) {
					throw new Error("HTTP " + r.status);
				}
				return r.text();
			})
			.then(function (html) {
				var doc = new DOMParser().parseFromString(html, "text/html");
				var fresh = doc.querySelector("main");
				var cur = document.querySelector("main");
				if (fresh && cur && !busy()) {
					cur.replaceWith(document.adoptNode(fresh));
					document.title = doc.title;
				}
				mark(true);
			})
			.catch(function (err) {
				mark(false, err.message);
			})
			.then(later);
	}

	function later() {
		window.setTimeout(tick, secs * 1000);
	}
	later();
})();
