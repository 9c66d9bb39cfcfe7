package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run(context.Background(), nil, &out, &errOut))
	require.Contains(t, errOut.String(), "usage: baton")
	errOut.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"frobnicate"}, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown command "frobnicate"`)
}

func TestDemoBadRedis(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"demo", "--redis", "http://nope"}, &out, &errOut))
	require.Contains(t, errOut.String(), "bad --redis URL")
	errOut.Reset()
	// Port 1 on loopback refuses connections.
	require.Equal(t, 1, run(context.Background(), []string{"demo", "--redis", "redis://127.0.0.1:1"}, &out, &errOut))
	require.Contains(t, errOut.String(), "cannot reach Redis")
}
