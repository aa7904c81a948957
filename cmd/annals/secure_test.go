package main

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestSecuredCassandraThroughTheCLI: init, in text and --json, reaches the
// secured Cassandra node (a password, TLS with the CA's file) from the URL
// alone and prints the URL with its password hidden; refused for a wrong
// password, it says authentication was refused, without the password
// either. The test logs in as a role of its own, whose password appears
// nowhere else.
func TestSecuredCassandraThroughTheCLI(t *testing.T) {
	addr, certs := cassandratest.SecureServer(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	role, password, keyspace := "annals_cli_"+suffix, "pw-"+suffix, "annals_cli_"+suffix
	ca := filepath.Join(certs, "ca.pem")
	params := url.Values{"tls": {"true"}, "tls_ca": {ca}, "tls_verify_host": {"true"}}
	// The node requires client certificates: the CLI test signs one with
	// the node's CA, as the store's own test does.
	certFile, keyFile := cassandratest.LoadCA(t, certs).Client(t, t.TempDir(), "cli", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	params.Set("tls_cert", certFile)
	params.Set("tls_key", keyFile)
	admin := "cassandra://" + cassandratest.SecureUser + ":" + cassandratest.SecurePassword + "@" + addr + "/" + keyspace + "?" + params.Encode()
	s, err := cassandra.Open(t.Context(), admin, cassandra.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Session().Query("DROP KEYSPACE IF EXISTS " + keyspace).Exec()
		_ = s.Session().Query("DROP ROLE IF EXISTS " + role).Exec()
		_ = s.Close()
	})
	if err := s.Session().Query("CREATE ROLE " + role + " WITH PASSWORD = '" + password + "' AND LOGIN = true AND SUPERUSER = true").Exec(); err != nil {
		t.Fatal(err)
	}
	store := "cassandra://" + role + ":" + password + "@" + addr + "/" + keyspace + "?" + params.Encode()
	for _, args := range [][]string{
		{"init", "--store", store},
		{"init", "--json", "--store", store},
	} {
		r := cli(t, nil, args...)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, password) || !strings.Contains(r.stdout, "xxxxx") {
			t.Errorf("annals %s: want exit 0 and the password shown as xxxxx; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
	}
	wrong := strings.Replace(store, password, password+"-wrong", 1)
	r := cli(t, nil, "init", "--json", "--store", wrong)
	if r.code == 0 || strings.Contains(r.stdout+r.stderr, password) || !strings.Contains(r.stdout+r.stderr, "authentication refused") {
		t.Errorf("annals init with a wrong password: want a failure saying authentication was refused, without the password; got %s", r)
	}
}

// TestSecuredPostgresThroughTheCLI: annals reaches a PostgreSQL server that
// takes TLS only with SCRAM passwords (scripts/services up postgres-ha),
// in text and with --json, showing the password as xxxxx; its commands
// read the standby too; a wrong password fails naming the cause, without
// the password.
func TestSecuredPostgresThroughTheCLI(t *testing.T) {
	pair := pgtest.HA(t)
	primary, standby, _ := pgtest.HASchema(t, pair)
	for _, args := range [][]string{
		{"init", "--store", primary},
		{"init", "--json", "--store", primary},
		{"stats", "--store", primary},
		{"stats", "--json", "--store", primary},
	} {
		r := cli(t, nil, args...)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, pair.Password) {
			t.Errorf("annals %s: want exit 0 and no password; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
		if args[0] == "init" && !strings.Contains(r.stdout, "xxxxx") {
			t.Errorf("annals %s: want the store named with its password as xxxxx; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
	}
	// The standby replays the schema init made; stats reads it there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := cli(t, nil, "stats", "--store", standby)
		if r.code == 0 && !strings.Contains(r.stdout+r.stderr, pair.Password) {
			break
		}
		if time.Now().After(deadline) || strings.Contains(r.stdout+r.stderr, pair.Password) {
			t.Fatalf("annals stats on the standby: want exit 0 and no password; got %s", r)
		}
		time.Sleep(200 * time.Millisecond) // the standby replays the schema
	}
	wrong := strings.Replace(primary, ":"+pair.Password+"@", ":"+pair.Password+"-wrong@", 1)
	r := cli(t, nil, "init", "--json", "--store", wrong)
	if r.code == 0 || strings.Contains(r.stdout+r.stderr, pair.Password) || !strings.Contains(r.stdout+r.stderr, "password authentication failed") {
		t.Errorf("annals init with a wrong password: want a failure naming it, without the password; got %s", r)
	}
}
