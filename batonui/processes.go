package batonui

import (
	"net/http"

	"github.com/batonhq/baton"
)

// processesData is the processes page: the live worker processes
// (Client.ProcessList), with their workers added up.
type processesData struct {
	Processes []*baton.ProcessInfo
	Busy      int // workers in use, over every process
	Workers   int // workers, over every process
}

// processes lists the live worker processes.
func (h *handler) processes(w http.ResponseWriter, r *http.Request) {
	h.sampleIfDue(r.Context())
	list, err := h.client.ProcessList(r.Context())
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	d := &processesData{Processes: list}
	for _, p := range list {
		d.Busy += p.Busy
		d.Workers += p.Concurrency
	}
	h.render(w, r, http.StatusOK, "processes", &view{Title: "Processes", Nav: "processes", Data: d})
}
