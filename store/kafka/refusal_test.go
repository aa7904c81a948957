package kafka_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/internal/testcerts"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// certBroker listens on 127.0.0.1 for TLS connections that must present a
// client certificate signed by ca (crypto/tls's server, not Kafka: a
// connection it accepts gets no answer). It stops when t ends.
func certBroker(t *testing.T, ca testcerts.CA) string {
	t.Helper()
	cfg := ca.Server(t)
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool(t, ca.File)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				// A refused handshake sends its alert and fails the read;
				// an accepted one reads until the client hangs up.
				_, _ = io.Copy(io.Discard, conn)
			})
		}
	})
	return ln.Addr().String()
}

func pool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", file)
	}
	return p
}

// TestOpenNamesACertificateRefusal: brokers that require a client
// certificate and refuse the client's (none, an expired one, one of a CA
// they do not trust) fail Open at once with an error that names the
// certificate and what is wrong with it, the TLS alert after it.
func TestOpenNamesACertificateRefusal(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.New(t, dir, "broker-ca")
	foreign := testcerts.New(t, dir, "foreign-ca")
	now := time.Now()
	expiredCert, expiredKey := ca.Client(t, dir, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	foreignCert, foreignKey := foreign.Client(t, dir, "stranger", now.Add(-time.Hour), now.Add(time.Hour))
	broker := certBroker(t, ca)

	for _, c := range []struct {
		name, cert, key string
		says            []string
	}{
		{"no client certificate", "", "",
			[]string{"the brokers at [" + broker + "] require a client certificate, and the client has none: ", "remote error: tls: certificate required"}},
		{"an expired client certificate", expiredCert, expiredKey,
			[]string{"the brokers at [" + broker + "] refused the client certificate CN=expired: it expired on " + now.Add(-24*time.Hour).UTC().Format("2006-01-02 15:04:05 UTC") + ": ", "remote error: tls: expired certificate"}},
		{"a client certificate of a CA the brokers do not trust", foreignCert, foreignKey,
			[]string{"the brokers at [" + broker + "] refused the client certificate CN=stranger, issued by CN=foreign-ca, a CA they may not trust: ", "remote error: tls: certificate required"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: pool(t, ca.File), MinVersion: tls.VersionTLS12}
			if c.cert != "" {
				pair, err := tls.LoadX509KeyPair(c.cert, c.key)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{pair}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			j, err := kafka.Open(ctx, []string{broker}, struct{ eventual.Tables }{}, kafka.WithClientOptions(kgo.DialTLSConfig(cfg)))
			if err == nil {
				j.Close()
				t.Fatal("Open succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("Open failed only when its context ended: %v", err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if _, ok := errors.AsType[*net.OpError](err); !ok {
				t.Errorf("error %q does not wrap the TLS alert's *net.OpError", err)
			}
		})
	}
}

// TestCertificateRefusal: only a TLS alert about the
// client's certificate is described as a refusal of it, and the
// description says what the client knows of its certificate.
func TestCertificateRefusal(t *testing.T) {
	now := time.Now()
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	dir := t.TempDir()
	early, earlyKey := testcerts.New(t, dir, "ca").Client(t, dir, "early", now.Add(time.Hour), now.Add(2*time.Hour))
	pair, err := tls.LoadX509KeyPair(early, earlyKey)
	if err != nil {
		t.Fatal(err)
	}
	notYet := &tls.Config{Certificates: []tls.Certificate{pair}}
	validCert, validKey := testcerts.New(t, dir, "ca2").Client(t, dir, "valid", now.Add(-time.Hour), now.Add(time.Hour))
	valid, err := tls.LoadX509KeyPair(validCert, validKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		err  error
		cfg  *tls.Config
		want string
	}{
		{"EOF", io.EOF, &tls.Config{}, ""},
		{"a dial error", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, &tls.Config{}, ""},
		{"a handshake failure alert", &net.OpError{Op: "remote error", Err: tls.AlertError(40)}, &tls.Config{}, ""},
		{"bad certificate, no certificate", &net.OpError{Op: "remote error", Err: tls.AlertError(42)}, &tls.Config{},
			"require a client certificate, and the client has none"},
		{"unknown certificate, TLS settings unknown", &net.OpError{Op: "remote error", Err: tls.AlertError(46)}, nil,
			"refused the client's certificate, or its want of one"},
		{"unknown certificate, a certificate that does not parse", &net.OpError{Op: "remote error", Err: tls.AlertError(46)}, withCert,
			"refused the client certificate"},
		{"expired certificate, several certificates (the handshake chose which)", &net.OpError{Op: "remote error", Err: tls.AlertError(45)},
			&tls.Config{Certificates: []tls.Certificate{pair, pair}}, "refused the client's certificate, or its want of one"},
		{"a reset, a certificate not valid yet (the alert lost)", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.ECONNRESET)}, notYet,
			"refused the client certificate CN=early: it is not valid before " + pair.Leaf.NotBefore.UTC().Format("2006-01-02 15:04:05 UTC")},
		{"a reset, a valid certificate", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.ECONNRESET)},
			&tls.Config{Certificates: []tls.Certificate{valid}}, ""},
		{"unknown certificate, a certificate not valid yet", &net.OpError{Op: "remote error", Err: tls.AlertError(46)}, notYet,
			"refused the client certificate CN=early: it is not valid before " + pair.Leaf.NotBefore.UTC().Format("2006-01-02 15:04:05 UTC")},
	} {
		if got := kafka.CertificateRefusal(c.err, c.cfg, now); got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}
