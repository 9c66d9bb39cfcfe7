package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

func TestUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, exitUsage, run(context.Background(), nil, &out, &errOut))
	require.Contains(t, errOut.String(), "baton [command]")
	require.Contains(t, errOut.String(), "no command given")
	errOut.Reset()
	require.Equal(t, exitUsage, run(context.Background(), []string{"frobnicate"}, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown command "frobnicate"`)
	out.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"--help"}, &out, &errOut))
	require.Contains(t, out.String(), "Exit codes")
	out.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"help", "jobs", "list"}, &out, &errOut))
	require.Contains(t, out.String(), "--limit N       show at most N jobs (1..1000) (default 20)")
	errOut.Reset()
	require.Equal(t, exitUsage, run(context.Background(), []string{"help", "frob"}, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown help topic "frob"`)
}

func TestRedisOption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []string
		addrs  []string
		check  func(t *testing.T, where string)
	}{
		{name: "standalone", values: []string{"redis://127.0.0.1:7000/2"}, addrs: []string{"127.0.0.1:7000"}},
		{name: "bare address", values: []string{"10.0.0.1:7000"}, addrs: []string{"10.0.0.1:7000"}},
		{name: "default port", values: []string{"redis://db.internal"}, addrs: []string{"db.internal:6379"}},
		{
			name:   "cluster as a list",
			values: []string{"redis://:pw@n1:7000, n2:7001,redis://n3"},
			addrs:  []string{"n1:7000", "n2:7001", "n3:6379"},
			check: func(t *testing.T, where string) {
				require.NotContains(t, where, "pw")
				require.Contains(t, where, "n2:7001")
			},
		},
		{name: "cluster as repeated flags", values: []string{"n1:7000", "n2:7000"}, addrs: []string{"n1:7000", "n2:7000"}},
		{name: "cluster with addr=", values: []string{"redis://n1:7000?addr=n2:7000"}, addrs: []string{"n1:7000", "n2:7000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opt, where, err := redisOption(tc.values)
			require.NoError(t, err)
			require.Equal(t, tc.addrs, opt.InitAddress)
			require.Equal(t, "baton-cli", opt.ClientName)
			if tc.check != nil {
				tc.check(t, where)
			}
		})
	}

	t.Run("database and credentials", func(t *testing.T) {
		t.Parallel()
		opt, where, err := redisOption([]string{"redis://u:secret@h:1/3"})
		require.NoError(t, err)
		require.Equal(t, 3, opt.SelectDB)
		require.Equal(t, "u", opt.Username)
		require.Equal(t, "secret", opt.Password)
		require.NotContains(t, where, "secret")
	})

	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		opt, _, err := redisOption([]string{"rediss://cache.example:6380?skip_verify=true"})
		require.NoError(t, err)
		require.NotNil(t, opt.TLSConfig)
		require.True(t, opt.TLSConfig.InsecureSkipVerify)
		require.Equal(t, "cache.example", opt.TLSConfig.ServerName)
		require.Nil(t, opt.Sentinel.TLSConfig)
	})

	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		opt, _, err := redisOption([]string{"rediss://:masterpw@s1:26379,s2:26379?master_set=mymaster&sentinel_password=sentpw&dial_timeout=2s"})
		require.Error(t, err, "options belong to the first URL, before the list")
		opt, _, err = redisOption([]string{"rediss://:masterpw@s1:26379?master_set=mymaster&sentinel_password=sentpw&dial_timeout=2s", "s2:26379"})
		require.NoError(t, err)
		require.Equal(t, []string{"s1:26379", "s2:26379"}, opt.InitAddress)
		require.Equal(t, "mymaster", opt.Sentinel.MasterSet)
		require.Equal(t, "masterpw", opt.Password)
		require.Equal(t, "sentpw", opt.Sentinel.Password)
		require.NotNil(t, opt.Sentinel.TLSConfig)
		require.Empty(t, opt.TLSConfig.ServerName, "the master is not at the sentinel's host name")
		require.Equal(t, opt.Dialer.Timeout, opt.Sentinel.Dialer.Timeout)
	})

	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"none", nil, "no Redis given"},
		{"scheme", []string{"http://h:1"}, "invalid URL scheme"},
		{"database", []string{"redis://h:1/x"}, "invalid database"},
		{"password not echoed", []string{"redis://u:hunter2@h:1/x"}, "xxxxx"},
		{"options on a later address", []string{"redis://h:1", "redis://h2:1/4"}, "only host:port"},
		{"scheme of a later address", []string{"redis://h:1", "rediss://h2:1"}, "only host:port"},
		{"bad later address", []string{"redis://h:1,h2:1:2"}, "bad --redis address"},
		{"unix with more", []string{"unix:///tmp/r.sock,h:1"}, "unix://"},
	} {
		t.Run("bad "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := redisOption(tc.values)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// TestReportOneLine: an error joined over several queues is still reported
// on one line.
func TestReportOneLine(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	a := &app{stderr: &errOut}
	a.report(&exitError{code: exitFailed, err: errors.Join(errors.New(`stats of "a": boom`), errors.New(`stats of "b": boom`))})
	require.Equal(t, "baton: stats of \"a\": boom; stats of \"b\": boom\n", errOut.String())
}
