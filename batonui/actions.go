package batonui

import (
	"net/http"
	"net/url"

	"github.com/batonhq/baton"
)

// The actions. Each is a POST that got past authentication, the CSRF
// check and read-only mode (see routes), and answers with a redirect to
// the page it came from, so that reloading that page repeats nothing.

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if err := h.client.QueuePause(r.Context(), q); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: queue paused", "queue", q)
	h.redirectBack(w, r, "/queues/"+url.PathEscape(q), "paused")
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if err := h.client.QueueResume(r.Context(), q); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: queue resumed", "queue", q)
	h.redirectBack(w, r, "/queues/"+url.PathEscape(q), "resumed")
}

func (h *handler) retry(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PathValue("id")
	if _, err := h.client.JobRetry(r.Context(), q, id); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: job retried", "queue", q, "job_id", id)
	h.redirectBack(w, r, "/queues/"+url.PathEscape(q)+"/jobs/"+url.PathEscape(id), "retried")
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PathValue("id")
	row, err := h.client.JobCancel(r.Context(), q, id)
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	done := "cancelled"
	if row.State == baton.JobStateRunning {
		done = "stopping"
	}
	h.cfg.Logger.Info("batonui: job cancelled", "queue", q, "job_id", id, "state", row.State)
	h.redirectBack(w, r, "/queues/"+url.PathEscape(q)+"/jobs/"+url.PathEscape(id), done)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	q, id := r.PathValue("queue"), r.PathValue("id")
	if err := h.client.JobDelete(r.Context(), q, id); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: job deleted", "queue", q, "job_id", id)
	h.redirectBack(w, r, "/queues/"+url.PathEscape(q), "deleted")
}
