package demo

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/batondriver/batonmem"
)

func TestDemoHolds(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := Run(context.Background(), batonmem.New(), &out, &Config{Users: 3, Webhooks: 30, Section: 10 * time.Millisecond})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
}
