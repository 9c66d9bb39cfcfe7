package batonui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonui"
)

// Mount the dashboard under /admin/baton/, behind basic authentication,
// with its actions on.
func ExampleNew() {
	client, err := baton.NewClient(batonmem.New(), nil)
	if err != nil {
		panic(err)
	}
	ui, err := batonui.New(client, &batonui.Config{
		BasePath: "/admin/baton",
		Auth:     batonui.BasicAuth("admin", "correct horse battery staple"),
		Writable: true,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/baton/", ui)

	req := httptest.NewRequest(http.MethodGet, "/admin/baton/", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println("anonymous:", rec.Code)

	req.SetBasicAuth("admin", "correct horse battery staple")
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println("signed in:", rec.Code)
	// Output:
	// anonymous: 401
	// signed in: 200
}
