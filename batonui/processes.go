package batonui

import (
	"fmt"
	"net/http"

	"github.com/batonhq/baton"
)

// processesData is the processes page: the live worker processes
// (Client.ProcessList), with their workers added up.
type processesData struct {
	Queue     string // with ?queue=, the processes that work it alone
	Processes []*baton.ProcessInfo
	Busy      int // workers in use, over the processes listed
	Workers   int // workers, over the processes listed
}

// processes lists the live worker processes, or with ?queue= those that
// work one queue.
func (h *handler) processes(w http.ResponseWriter, r *http.Request) {
	queue := r.URL.Query().Get("queue")
	if queue != "" && baton.CheckQueueName(queue) != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Bad queue name %q.", queue))
		return
	}
	h.sampleIfDue(r.Context())
	list, err := h.client.ProcessList(r.Context())
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	title := "Processes"
	if queue != "" {
		title += " working " + queue
	}
	h.render(w, r, http.StatusOK, "processes", &view{Title: title, Nav: "processes", Data: workingProcesses(list, queue)})
}

// workingProcesses returns the processes of list that work queue (all
// of them for ""), with their workers added up.
func workingProcesses(list []*baton.ProcessInfo, queue string) *processesData {
	d := &processesData{Queue: queue}
	for _, p := range list {
		if queue != "" && !p.Works(queue) {
			continue
		}
		d.Processes = append(d.Processes, p)
		d.Busy += p.Busy
		d.Workers += p.Concurrency
	}
	return d
}
