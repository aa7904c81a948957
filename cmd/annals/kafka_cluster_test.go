package main

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestSecuredKafkaClusterThroughTheCLI: init and stats, in text and
// --json, reach the secured cluster of three brokers (SCRAM-SHA-512 over
// TLS, the CA's file in the URL) from the URL alone and print the URL
// with its password hidden; refused for a wrong password, init says the
// SASL authentication failed, without the password either.
func TestSecuredKafkaClusterThroughTheCLI(t *testing.T) {
	t.Parallel()
	c := kafkatest.Cluster(t)
	password := c.Password(t)
	dsn, _ := pgtest.Schema(t)
	prefix := c.Prefix(t, "cli")
	store := func(pw string) string {
		return "kafka://" + c.User + ":" + url.QueryEscape(pw) + "@" + strings.Join(c.Brokers, ",") +
			"/?sasl=scram-sha-512&tls=true&tls_ca=" + url.QueryEscape(c.CA) + "&topic_prefix=" + prefix + "&eventual=" + dsn
	}
	for _, args := range [][]string{
		{"init", "--store", store(password)},
		{"init", "--json", "--store", store(password)},
		{"stats", "--store", store(password)},
		{"stats", "--json", "--store", store(password)},
	} {
		r := cli(t, nil, args...)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, password) {
			t.Errorf("annals %s: want exit 0 without the password; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
		if args[0] == "init" && (!strings.Contains(r.stdout, "xxxxx") || !strings.Contains(r.stdout, c.Brokers[0])) {
			t.Errorf("annals %s: want the URL, its brokers shown and its password as xxxxx; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
	}
	for _, json := range []bool{false, true} {
		args := []string{"init", "--store", store(password + "-wrong")}
		if json {
			args = []string{"init", "--json", "--store", store(password + "-wrong")}
		}
		r := cli(t, nil, args...)
		if r.code == 0 || strings.Contains(r.stdout+r.stderr, password) || !strings.Contains(r.stdout+r.stderr, "SASL_AUTHENTICATION_FAILED") {
			t.Errorf("annals %s with a wrong password: want a failure saying the SASL authentication failed, without the password; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
	}
}

// TestKafkaClusterClientCertificateThroughTheCLI: init and stats, in text
// and --json, reach the cluster's client-certificate listeners from a URL
// naming the certificate and key files (tls_cert, tls_key) and print no
// key material; with the expired certificate init fails saying so.
func TestKafkaClusterClientCertificateThroughTheCLI(t *testing.T) {
	t.Parallel()
	c := kafkatest.Cluster(t)
	m := c.MTLS(t)
	dsn, _ := pgtest.Schema(t)
	prefix := c.Prefix(t, "cli-mtls")
	key, err := os.ReadFile(m.Client.Key)
	if err != nil {
		t.Fatal(err)
	}
	keyLines := strings.Split(strings.TrimSpace(string(key)), "\n")
	if len(keyLines) < 3 {
		t.Fatalf("%s holds no PEM key", m.Client.Key)
	}
	store := func(cert kafkatest.KeyPair) string {
		return "kafka://" + strings.Join(m.Brokers, ",") + "/?tls=true&tls_ca=" + url.QueryEscape(c.CA) +
			"&tls_cert=" + url.QueryEscape(cert.Cert) + "&tls_key=" + url.QueryEscape(cert.Key) + "&topic_prefix=" + prefix + "&eventual=" + dsn
	}
	leaks := func(out string) bool {
		return strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, keyLines[1]) || strings.Contains(out, c.Password(t))
	}
	for _, args := range [][]string{
		{"init", "--store", store(m.Client)},
		{"stats", "--store", store(m.Client)},
		{"stats", "--json", "--store", store(m.Client)},
	} {
		r := cli(t, nil, args...)
		if r.code != 0 || leaks(r.stdout+r.stderr) {
			t.Errorf("annals %s: want exit 0 without key material or password; got %s", strings.Join(args[:len(args)-1], " "), r)
		}
		if args[0] == "init" && !strings.Contains(r.stdout, m.Brokers[0]) {
			t.Errorf("annals init: want the URL with its brokers; got %s", r)
		}
	}
	r := cli(t, nil, "init", "--store", store(m.Expired))
	if r.code == 0 || leaks(r.stdout+r.stderr) || !strings.Contains(r.stdout+r.stderr, "refused the client certificate CN=annals-cert: it expired on") {
		t.Errorf("annals init with an expired client certificate: want a failure saying it expired, without key material; got %s", r)
	}
}
