package stores_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/annals-go/annals/internal/testcerts"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/stores"
)

// TestKafkaURLSecured: a kafka:// URL reaches brokers that demand SASL
// (SCRAM-SHA-512) over TLS, the password from the URL, a file or the
// environment; the journal it opens writes and reads there, and a URL
// built from it for other topics keeps the credentials. A wrong password,
// plaintext to the TLS listener or a CA that did not sign the brokers'
// certificate fails within a bound, never showing the password; contradictory
// settings fail as bad URLs, naming the parameter. The brokers are
// franz-go's in-process Kafka (kfake), with SASL and TLS on.
func TestKafkaURLSecured(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.New(t, dir, "ca")
	serverTLS, caFile := ca.Server(t), ca.File
	const user, password = "annals", "pw-Zq7s"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", user, password), kfake.TLS(serverTLS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	broker := c.ListenAddrs()[0]
	eventual := pgURL(t)
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := func(userInfo string, params ...string) string {
		v := url.Values{}
		for i := 0; i < len(params); i += 2 {
			v.Set(params[i], params[i+1])
		}
		return "kafka://" + userInfo + broker + "/?" + v.Encode() + "&eventual=" + eventual
	}
	tlsOK := []string{"sasl", "scram-sha-512", "tls", "true", "tls_ca", caFile}
	ctx := t.Context()

	good := []struct{ name, url, env string }{
		{"password in the URL", at(user+":"+password+"@", tlsOK...), ""},
		{"password_file", at(user+"@", append(tlsOK, "password_file", pwFile)...), ""},
		{stores.KafkaPasswordEnv, at(user+"@", tlsOK...), password},
	}
	for i, g := range good {
		t.Run(g.name, func(t *testing.T) {
			t.Setenv(stores.KafkaPasswordEnv, g.env)
			st, err := stores.Open(ctx, g.url, stores.WithMigrate(true))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer st.Close()
			pid := "Account|secured-" + string(rune('a'+i))
			w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1, Manifest: "m", WriterID: "w"}}}
			if res, err := st.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || (res != nil && res[0] != nil) {
				t.Fatalf("write through SASL and TLS: %v %v", res, err)
			}
			if n, err := st.Journal.HighestSequenceNr(ctx, pid, 0); err != nil || n != 1 {
				t.Fatalf("read through SASL and TLS: %d %v", n, err)
			}
			k, err := stores.ParseKafkaURL(g.url)
			if err != nil {
				t.Fatal(err)
			}
			again, err := stores.ParseKafkaURL(k.With("other-", eventual))
			if err != nil || len(again.ClientOptions) != len(k.ClientOptions) || again.TopicPrefix != "other-" {
				t.Errorf("a URL built with With: %+v, %v; want the same credentials and the prefix other-", again, err)
			}
		})
	}

	t.Setenv(stores.KafkaPasswordEnv, "")
	failing := []struct{ name, url string }{
		{"wrong password", at(user+":wrong-pw@", tlsOK...)},
		{"plaintext to the TLS listener", at(user+":"+password+"@", "sasl", "scram-sha-512")},
		{"a CA that did not sign the brokers' certificate", at(user+":"+password+"@", "sasl", "scram-sha-512", "tls", "true", "tls_ca", pwFile+".none")},
	}
	for _, f := range failing {
		t.Run(f.name, func(t *testing.T) {
			octx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			st, err := stores.Open(octx, f.url, stores.WithMigrate(true))
			if err == nil {
				pid := "Account|must-fail"
				w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{}`), SerializerID: 1, Manifest: "m", WriterID: "w"}}}
				_, err = st.Journal.Write(octx, []journal.AtomicWrite{w})
				st.Close()
			}
			if err == nil {
				t.Fatal("the journal wrote")
			}
			t.Logf("%v", err)
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "wrong-pw") {
				t.Errorf("the error shows the password: %v", err)
			}
			if octx.Err() != nil {
				t.Errorf("it failed only when its context ended: %v", err)
			}
		})
	}

	for _, b := range []struct{ name, url, says string }{
		{"user without sasl", at(user+":"+password+"@", "tls", "true"), "sasl"},
		{"sasl without user", at("", "sasl", "plain"), "needs a user"},
		{"unknown mechanism", at(user+":"+password+"@", "sasl", "gssapi"), "gssapi"},
		{"tls_ca without tls", at(user+":"+password+"@", "sasl", "plain", "tls_ca", caFile), "tls=true"},
		{"empty password file", at(user+"@", "sasl", "plain", "password_file", filepath.Join(dir, "none")), "password_file"},
	} {
		t.Run(b.name, func(t *testing.T) {
			_, err := stores.ParseKafkaURL(b.url)
			if !errors.Is(err, stores.ErrBadURL) || !strings.Contains(err.Error(), b.says) || strings.Contains(err.Error(), password) {
				t.Errorf("ParseKafkaURL: %v; want a bad URL naming %q, without the password", err, b.says)
			}
		})
	}
}

// TestKafkaURLPrintsNoPassword: a parsed kafka:// URL printed with %v or
// %+v hides its password.
func TestKafkaURLPrintsNoPassword(t *testing.T) {
	k, err := stores.ParseKafkaURL("kafka://svc:pw-Zq7s@k:9092/?sasl=plain&eventual=postgres://u:pw-Zq7s@db/app")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%s"} {
		if out := fmt.Sprintf(f, k); strings.Contains(out, "pw-Zq7s") || !strings.Contains(out, "xxxxx") {
			t.Errorf("Sprintf(%q) = %q: the password shows", f, out)
		}
	}
}
