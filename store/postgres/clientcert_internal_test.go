package postgres

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/internal/testcerts"
)

// TestInvalidClientCertificate: a client certificate out of its validity
// is described with its subject and the bound it passed; a valid one, none,
// or one that does not parse is not.
func TestInvalidClientCertificate(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	ca := testcerts.New(t, dir, "ca")
	load := func(name string, from, to time.Time) *tls.Config {
		cert, key := ca.Client(t, dir, name, from, to)
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	for _, c := range []struct {
		name string
		cfg  *tls.Config
		want string // "" for none
	}{
		{"no TLS", nil, ""},
		{"no client certificate", &tls.Config{}, ""},
		{"a certificate that does not parse", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{{1, 2, 3}}}}}, ""},
		{"valid", load("valid", now.Add(-time.Hour), now.Add(time.Hour)), ""},
		{"expired", load("expired", now.Add(-2*time.Hour), now.Add(-time.Hour)), "the client certificate CN=expired (sslcert) expired on "},
		{"not valid yet", load("early", now.Add(time.Hour), now.Add(2*time.Hour)), "the client certificate CN=early (sslcert) is not valid before "},
	} {
		got := invalidClientCertificate(c.cfg, now)
		if c.want == "" && got != "" || c.want != "" && !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q…", c.name, got, c.want)
		}
	}
}
