package main

import (
	"net/url"
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
