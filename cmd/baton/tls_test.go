package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

// testTLS runs baton with rediss:// against a redis-server of its own that
// also listens with TLS, on a certificate for 127.0.0.1 from a CA made
// here. The plain port is for the harness and the seeding.
func testTLS(t *testing.T, bin string) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tlsPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	srv := redistest.StartT(t, &redistest.Options{Args: []string{
		"--tls-port", tlsPort, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
	}})
	f := seed(newFixture(t, bin, "rediss://127.0.0.1:"+tlsPort, srv.Addr()))

	var s statsOut
	f.runJSON(&s, "stats", "--tls-ca", caFile)
	require.Equal(t, 2, s.Queues)

	r := f.run("queues")
	require.Equal(t, exitUnreachable, r.code, "the CA is not in the system pool")
	require.Contains(t, r.stderr, "certificate")

	r = cli(t, bin, nil, "--redis", "rediss://127.0.0.1:"+tlsPort+"?skip_verify=true", "--prefix", f.prefix, "jobs", "show", f.dead)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "smtp: 550 no such user")

	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not a certificate"), 0o600))
	r = f.run("--tls-ca", bad, "queues")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "no PEM certificate")
}

// writeCerts writes a CA and a server certificate and key for 127.0.0.1,
// as PEM files in dir.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	caKey, srvKey := newKey(), newKey()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baton test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}
