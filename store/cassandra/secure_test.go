package cassandra_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/internal/testcerts"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// TestSecuredCluster: the store connects to a node that demands a password
// and TLS with client certificates, from the URL alone (the password also
// from a file or the environment), and writes and reads there; every way
// of getting it wrong fails Open with an error naming the problem, within
// the timeout, and no error shows the password.
func TestSecuredCluster(t *testing.T) {
	addr, certs := cassandratest.SecureServer(t)
	ca := cassandratest.LoadCA(t, certs)
	dir := t.TempDir()
	now := time.Now()
	cert, key := ca.Client(t, dir, "client", now.Add(-time.Hour), now.Add(24*time.Hour))
	expiredCert, expiredKey := ca.Client(t, dir, "expired", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	stranger := testcerts.New(t, dir, "stranger")
	strangerCert, strangerKey := stranger.Client(t, dir, "stranger", now.Add(-time.Hour), now.Add(24*time.Hour))
	passwordFile := filepath.Join(dir, "password")
	if err := os.WriteFile(passwordFile, []byte(cassandratest.SecurePassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	keyspace := "annals_secure_" + hex.EncodeToString(b[:])
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	tlsGood := []string{"tls", "true", "tls_ca", ca.File, "tls_cert", cert, "tls_key", key}
	at := func(user string, params ...string) string {
		return "cassandra://" + user + addr + "/" + keyspace + "?" + q(params...) + "&timeout=5s"
	}
	// The node is in SimpleSnitch's datacenter1: local_dc routes to it first.
	good := at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", append(tlsGood, "local_dc", "datacenter1", "consistency", "local_quorum")...)

	ctx := t.Context()
	s, err := cassandra.Open(ctx, good, cassandra.WithMigrate(true))
	if err != nil {
		t.Fatalf("Open of the secured node with password and client certificate: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Session().Query("DROP KEYSPACE IF EXISTS " + keyspace).Exec()
		_ = s.Close()
	})
	pid := "Account|secured"
	w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1, Manifest: "m", WriterID: "w"}}}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || (res != nil && res[0] != nil) {
		t.Fatalf("write over TLS: %v %v", res, err)
	}
	if n, err := s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil || n != 1 {
		t.Fatalf("read over TLS: %d %v", n, err)
	}

	t.Setenv(cassandra.PasswordEnv, "")
	ok := []struct{ name, url, env string }{
		{"password from password_file", at(cassandratest.SecureUser+"@", append(tlsGood, "password_file", passwordFile)...), ""},
		{"password from " + cassandra.PasswordEnv, at(cassandratest.SecureUser+"@", tlsGood...), cassandratest.SecurePassword},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(cassandra.PasswordEnv, c.env)
			s, err := cassandra.Open(ctx, c.url)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			_ = s.Close()
		})
	}

	bad := []struct {
		name, url string
		is        error  // errors.Is target
		says      string // what the message names, lower case
	}{
		{"wrong password", at("cassandra:wrong@", tlsGood...), cassandra.ErrAuthentication, "password"},
		{"no credentials", at("", tlsGood...), cassandra.ErrAuthentication, "authentication"},
		{"plaintext to the TLS port", at(cassandratest.SecureUser + ":" + cassandratest.SecurePassword + "@"), cassandra.ErrUnreachable, ""},
		{"a CA that did not sign the node's certificate", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_ca", stranger.File, "tls_cert", cert, "tls_key", key), cassandra.ErrUnreachable, "certificate"},
		{"no client certificate", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_ca", ca.File), cassandra.ErrUnreachable, ""},
		{"an expired client certificate", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_ca", ca.File, "tls_cert", expiredCert, "tls_key", expiredKey), cassandra.ErrUnreachable, ""},
		{"a client certificate of another CA", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_ca", ca.File, "tls_cert", strangerCert, "tls_key", strangerKey), cassandra.ErrUnreachable, ""},
		{"a missing CA file", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_ca", filepath.Join(dir, "none.pem")), cassandra.ErrInvalidConfig, "tls_ca"},
		{"a certificate without its key", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls", "true", "tls_cert", cert), cassandra.ErrInvalidConfig, "tls_key"},
		{"TLS files without tls=true", at(cassandratest.SecureUser+":"+cassandratest.SecurePassword+"@", "tls_ca", ca.File), cassandra.ErrInvalidConfig, "tls=true"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := cassandra.Open(octx, c.url)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, c.is) {
				t.Errorf("error %v, want one wrapping %v", err, c.is)
			}
			if c.says != "" && !strings.Contains(strings.ToLower(err.Error()), c.says) {
				t.Errorf("error %q does not name %q", err, c.says)
			}
			if octx.Err() != nil {
				t.Errorf("Open returned only when its context ended (%v): it must fail on its own", octx.Err())
			}
			if strings.Contains(err.Error(), cassandratest.SecurePassword+"@") || strings.Contains(err.Error(), ":wrong@") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
