package stores_test

import (
	"context"
	"math"
	"net/url"
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
			ctx := t.Context()
			st, err := stores.Open(ctx, at(c.User+"@", secured(mechanism)...), stores.WithMigrate(true))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer st.Close()
			pid := "Account|cluster-" + mechanism
			var events []journal.Repr
			for seq := int64(1); seq <= 3; seq++ {
				events = append(events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte{byte('a' + i), byte(seq)}, SerializerID: 1, Manifest: "m", WriterID: "w"})
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
			ctx, cancel := context.WithTimeout(t.Context(), clusterFailBound)
			defer cancel()
			st, err := stores.Open(ctx, f.url, stores.WithMigrate(true))
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
			for _, s := range f.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "wrong-pw") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
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
