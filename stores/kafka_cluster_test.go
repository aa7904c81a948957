package stores_test

import (
	"context"
	"math"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/internal/testcerts"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/stores"
)

// clusterFailBound is how long a refused connection to the secured
// cluster may take to fail: it fails at once, where a hang would wait
// out its context.
const clusterFailBound = 30 * time.Second

// TestKafkaClusterSecured: a kafka:// URL reaches the secured cluster of
// three brokers (`scripts/services up kafka-cluster`: SASL over TLS only)
// with each mechanism it offers, the password from a file, and the
// journal writes and reads back there, its eventual store in PostgreSQL.
// A wrong password, a CA that did not sign the brokers' certificate,
// plaintext to the TLS listener and TLS without SASL each fail at once
// (well within clusterFailBound) with an error naming the cause, and no
// error shows the password.
func TestKafkaClusterSecured(t *testing.T) {
	c := kafkatest.Cluster(t)
	password := c.Password(t)
	prefix := c.Prefix(t, "secured")
	eventual := pgURL(t)
	otherCA := testcerts.New(t, t.TempDir(), "other").File
	at := func(userInfo string, params ...string) string {
		v := url.Values{"topic_prefix": {prefix}}
		for i := 0; i < len(params); i += 2 {
			v.Set(params[i], params[i+1])
		}
		return "kafka://" + userInfo + strings.Join(c.Brokers, ",") + "/?" + v.Encode() + "&eventual=" + eventual
	}
	secured := func(mechanism string) []string {
		return []string{"sasl", mechanism, "tls", "true", "tls_ca", c.CA, "password_file", c.PasswordFile}
	}

	for i, mechanism := range []string{"scram-sha-512", "scram-sha-256", "plain"} {
		t.Run(mechanism, func(t *testing.T) {
			writeAndReplay(t, at(c.User+"@", secured(mechanism)...), "Account|cluster-"+mechanism, byte('a'+i))
		})
	}

	for _, f := range []struct {
		name, url string
		says      []string
	}{
		{"wrong password", at(c.User+":wrong-pw@", "sasl", "scram-sha-512", "tls", "true", "tls_ca", c.CA),
			[]string{"SASL_AUTHENTICATION_FAILED", "invalid credentials"}},
		{"wrong password, plain", at(c.User+":wrong-pw@", "sasl", "plain", "tls", "true", "tls_ca", c.CA),
			[]string{"SASL_AUTHENTICATION_FAILED", "Invalid username or password"}},
		{"a CA that did not sign the brokers' certificate", at(c.User+"@", "sasl", "scram-sha-512", "tls", "true", "tls_ca", otherCA, "password_file", c.PasswordFile),
			[]string{"certificate signed by unknown authority"}},
		{"plaintext to the TLS listener", at(c.User+"@", "sasl", "scram-sha-512", "password_file", c.PasswordFile),
			[]string{"plaintext connection speaking to a tls endpoint"}},
		{"TLS without SASL", at("", "tls", "true", "tls_ca", c.CA),
			[]string{"SASL is required"}},
	} {
		t.Run(f.name, func(t *testing.T) {
			err := mustFail(t, f.url, f.says...)
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "wrong-pw") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestKafkaClusterClientCertificate: a kafka:// URL with a client
// certificate (tls_cert, tls_key) signed by the cluster's CA reaches its
// brokers' client-certificate listeners (SSL, ssl.client.auth=required),
// and the journal writes and reads back there. No client certificate, an
// expired one, and one signed by a CA the brokers do not trust each fail
// at once (well within clusterFailBound) with an error naming the
// certificate and what is wrong with it, then the brokers' TLS alert.
func TestKafkaClusterClientCertificate(t *testing.T) {
	c := kafkatest.Cluster(t)
	m := c.MTLS(t)
	prefix := c.Prefix(t, "mtls")
	eventual := pgURL(t)
	at := func(cert kafkatest.KeyPair) string {
		v := url.Values{"topic_prefix": {prefix}, "tls": {"true"}, "tls_ca": {c.CA}}
		if cert.Cert != "" {
			v.Set("tls_cert", cert.Cert)
			v.Set("tls_key", cert.Key)
		}
		return "kafka://" + strings.Join(m.Brokers, ",") + "/?" + v.Encode() + "&eventual=" + eventual
	}
	brokers := "the brokers at [" + strings.Join(m.Brokers, " ") + "] "

	t.Run("a client certificate of the cluster's CA", func(t *testing.T) {
		writeAndReplay(t, at(m.Client), "Account|cluster-mtls", 'm')
	})
	for _, f := range []struct {
		name string
		cert kafkatest.KeyPair
		says string
	}{
		{"no client certificate", kafkatest.KeyPair{},
			brokers + "require a client certificate, and the client has none: "},
		{"an expired client certificate", m.Expired,
			brokers + "refused the client certificate CN=annals-cert: it expired on 2020-01-02 00:00:00 UTC: "},
		{"a client certificate of a CA the brokers do not trust", m.Foreign,
			brokers + "refused the client certificate CN=annals-cert, issued by CN=Annals test foreign CA, a CA they may not trust: "},
	} {
		t.Run(f.name, func(t *testing.T) {
			err := mustFail(t, at(f.cert), f.says, "remote error: tls: ")
			t.Logf("the error: %v", err)
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("the error shows key material: %v", err)
			}
			if f.cert.Key != "" {
				key, rerr := os.ReadFile(f.cert.Key)
				if rerr != nil {
					t.Fatal(rerr)
				}
				for line := range strings.Lines(string(key)) {
					if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") && strings.Contains(err.Error(), line) {
						t.Errorf("the error shows a line of the key %s: %v", f.cert.Key, err)
					}
				}
			}
		})
	}
}

// writeAndReplay opens the stack of raw, writes three events of pid (two
// atomic writes, payloads starting with tag) and reads them back.
func writeAndReplay(t *testing.T, raw, pid string, tag byte) {
	t.Helper()
	ctx := t.Context()
	st, err := stores.Open(ctx, raw, stores.WithMigrate(true))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer st.Close()
	var events []journal.Repr
	for seq := int64(1); seq <= 3; seq++ {
		events = append(events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte{tag, byte(seq)}, SerializerID: 1, Manifest: "m", WriterID: "w"})
	}
	res, err := st.Journal.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: events[:2]}, {PersistenceID: pid, Events: events[2:]}})
	if err != nil || res != nil && (res[0] != nil || res[1] != nil) {
		t.Fatalf("Write: %v %v", res, err)
	}
	if n, err := st.Journal.HighestSequenceNr(ctx, pid, 0); err != nil || n != 3 {
		t.Fatalf("HighestSequenceNr = %d, %v; want 3", n, err)
	}
	var got []journal.Repr
	for r, err := range st.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
		got = append(got, r)
	}
	if len(got) != len(events) {
		t.Fatalf("Replay returned %d events; want %d", len(got), len(events))
	}
	for k, r := range got {
		if r.SequenceNr != events[k].SequenceNr || string(r.Payload) != string(events[k].Payload) {
			t.Errorf("event %d: seq %d payload %q; want seq %d payload %q", k, r.SequenceNr, r.Payload, events[k].SequenceNr, events[k].Payload)
		}
	}
}

// mustFail opens the stack of raw and writes through it, which must fail
// within clusterFailBound (not when that runs out) with an error saying
// each of says; it returns the error.
func mustFail(t *testing.T, raw string, says ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), clusterFailBound)
	defer cancel()
	st, err := stores.Open(ctx, raw, stores.WithMigrate(true))
	if err == nil {
		pid := "Account|must-fail"
		w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1, Manifest: "m", WriterID: "w"}}}
		_, err = st.Journal.Write(ctx, []journal.AtomicWrite{w})
		st.Close()
	}
	if err == nil {
		t.Fatal("the journal opened and wrote")
	}
	if ctx.Err() != nil {
		t.Fatalf("it failed only when its %v ran out: %v", clusterFailBound, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	return err
}

// TestKafkaClusterURLRedacted: the Stack of a URL holding the cluster's
// password prints it hidden, in its description and in the URL's String.
func TestKafkaClusterURLRedacted(t *testing.T) {
	c := kafkatest.Cluster(t)
	password := c.Password(t)
	raw := "kafka://" + c.User + ":" + url.QueryEscape(password) + "@" + strings.Join(c.Brokers, ",") +
		"/?sasl=scram-sha-512&tls=true&tls_ca=" + url.QueryEscape(c.CA) + "&topic_prefix=" + c.Prefix(t, "redact") + "&eventual=" + pgURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := stores.Open(ctx, raw, stores.WithMigrate(true))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer st.Close()
	k, err := stores.ParseKafkaURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"Where": st.Where, "KafkaURL.String": k.String(), "Redact": stores.Redact(raw)} {
		if strings.Contains(s, password) || !strings.Contains(s, strings.Join(c.Brokers, ",")) {
			t.Errorf("%s = %q: want the brokers, without the password", what, s)
		}
	}
}
