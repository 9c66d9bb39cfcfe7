package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
)

// backend is what the commands work with: Baton's admin API and a Locker,
// on one Redis connection, and the Redis driver under them.
type backend struct {
	client *baton.Client
	locker *batonlock.Locker
	driver *batonredis.Driver
	close  func()
}

// connect opens the Redis named by --redis (or BATON_REDIS_URL). rueidis
// connects at once, so a wrong address fails here, as exitUnreachable.
func (a *app) connect() (*backend, error) {
	values := a.redis
	if len(values) == 0 {
		if env := os.Getenv("BATON_REDIS_URL"); env != "" {
			values = []string{env}
		}
	}
	opt, where, err := redisOption(values)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if a.tlsCA != "" {
		if err := addCA(&opt, a.tlsCA); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
	}
	prefix := a.prefix
	if prefix == "" {
		prefix = os.Getenv("BATON_PREFIX")
	}
	if opt.Dialer.Timeout == 0 && a.timeout > 0 {
		opt.Dialer.Timeout = min(a.timeout, rueidis.DefaultDialTimeout)
		opt.Sentinel.Dialer.Timeout = opt.Dialer.Timeout
	}
	rc, err := rueidis.NewClient(opt)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v", opt.Dialer.Timeout)
	}
	if err != nil {
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("cannot reach Redis at %s: %w", where, err)}
	}
	driver, err := batonredis.New(rc, &batonredis.Config{Prefix: prefix})
	if err != nil {
		rc.Close()
		return nil, &exitError{code: exitUsage, err: err}
	}
	closeAll := func() { driver.Close(); rc.Close() }
	client, err := baton.NewClient(driver, nil)
	if err != nil {
		closeAll()
		return nil, err
	}
	locker, err := batonlock.New(driver, nil)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &backend{client: client, locker: locker, driver: driver, close: closeAll}, nil
}

// redisOption turns the --redis values into rueidis options, and says where
// they point with any password left out. Each value may be a
// comma-separated list. The first entry is a URL for rueidis.ParseURL (a
// bare host:port means redis://host:port); the others add addresses, as
// ?addr= does: a Cluster's nodes or a Sentinel's sentinels. They may not
// carry options of their own, which would silently be ignored.
func redisOption(values []string) (rueidis.ClientOption, string, error) {
	var entries []string
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	if len(entries) == 0 {
		return rueidis.ClientOption{}, "", errors.New("no Redis given: pass --redis URL or set BATON_REDIS_URL (e.g. redis://127.0.0.1:6379)")
	}
	first := entries[0]
	if !strings.Contains(first, "://") {
		first = "redis://" + first
	}
	u, err := url.Parse(first)
	if err != nil {
		return rueidis.ClientOption{}, "", fmt.Errorf("bad --redis URL %q: %v", redact(entries[0]), err)
	}
	opt, err := rueidis.ParseURL(first)
	if err != nil {
		return rueidis.ClientOption{}, "", fmt.Errorf("bad --redis URL %q: %v", u.Redacted(), err)
	}
	if u.Scheme == "unix" && len(entries) > 1 {
		return rueidis.ClientOption{}, "", fmt.Errorf("bad --redis: a unix:// socket takes no further addresses")
	}
	for _, e := range entries[1:] {
		addr, err := extraAddr(e, u.Scheme)
		if err != nil {
			return rueidis.ClientOption{}, "", err
		}
		opt.InitAddress = append(opt.InitAddress, addr)
	}
	q := u.Query()
	if opt.Sentinel.MasterSet != "" {
		// rueidis talks to the sentinels with Sentinel's options only.
		opt.Sentinel.Dialer = opt.Dialer
		if opt.TLSConfig != nil {
			opt.Sentinel.TLSConfig = opt.TLSConfig.Clone()
			opt.Sentinel.TLSConfig.ServerName = ""
		}
		opt.Sentinel.Username = q.Get("sentinel_username")
		opt.Sentinel.Password = q.Get("sentinel_password")
		if opt.TLSConfig != nil {
			// The master is found through the sentinels: its name is not
			// the URL's host.
			opt.TLSConfig.ServerName = ""
		}
	}
	if opt.ClientName == "" {
		opt.ClientName = "baton-cli"
	}
	where := u.Redacted()
	if len(entries) > 1 {
		where += " (and " + strings.Join(opt.InitAddress[len(opt.InitAddress)-len(entries)+1:], ", ") + ")"
	}
	return opt, where, nil
}

// extraAddr is the host:port of a further --redis entry.
func extraAddr(e, scheme string) (string, error) {
	hostport := e
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return "", fmt.Errorf("bad --redis address %q: %v", redact(e), err)
		}
		if u.Scheme != scheme || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return "", fmt.Errorf("bad --redis address %q: after the first URL give only host:port; "+
				"scheme, credentials, database and options come from the first", u.Redacted())
		}
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		if !strings.Contains(err.Error(), "missing port") {
			return "", fmt.Errorf("bad --redis address %q: %v", hostport, err)
		}
		host, port = strings.Trim(hostport, "[]"), "6379"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" || strings.ContainsAny(host, "/?#@") {
		return "", fmt.Errorf("bad --redis address %q: want host:port", hostport)
	}
	return net.JoinHostPort(host, port), nil
}

// redact hides a password in a string that did not parse as a URL.
func redact(s string) string {
	if i := strings.Index(s, "@"); i >= 0 {
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			return s[:j+3] + "xxxxx" + s[i:]
		}
		return "xxxxx" + s[i:]
	}
	return s
}

// addCA makes the TLS connections trust the CAs in a PEM file.
func addCA(opt *rueidis.ClientOption, file string) error {
	if opt.TLSConfig == nil {
		return errors.New("--tls-ca needs a rediss:// URL")
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--tls-ca: no PEM certificate in %s", file)
	}
	for _, c := range []*tls.Config{opt.TLSConfig, opt.Sentinel.TLSConfig} {
		if c != nil {
			c.RootCAs = pool
		}
	}
	return nil
}
