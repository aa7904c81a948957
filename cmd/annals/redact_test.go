package main

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestRedact: a store URL's passwords, its own and an eventual store's in
// a kafka:// URL, never reach the output.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sqlite:./annals.db", "sqlite:./annals.db"},
		{"postgres://annals@db/app", "postgres://annals@db/app"},
		{"postgres://annals:s3cret@db/app?schema=x", "postgres://annals:xxxxx@db/app?schema=x"},
		{"kafka://k:9092/?eventual=postgres://u:s3cret@db/app", "kafka://k:9092/?eventual=postgres://u:xxxxx@db/app"},
		{"cassandra://u:s3cret@c:9042/ks", "cassandra://u:xxxxx@c:9042/ks"},
	} {
		if got := stores.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestCommandsHidePasswords: init (text and --json), check --json and
// copy --json print the store URL without its password (the test server
// trusts loopback connections, so the password is not checked).
func TestCommandsHidePasswords(t *testing.T) {
	t.Parallel()
	dsn, _ := pgtest.Schema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	withPassword := u.String()
	src := "sqlite:" + filepath.Join(t.TempDir(), "src.db")
	cli(t, nil, "init", "--store", src).want(t, 0, nil, nil)
	for _, args := range [][]string{
		{"init", "--dry-run", "--store", withPassword},
		{"init", "--json", "--store", withPassword},
		{"check", "--json", "--short", "--run", "journal/SecondWriterConflict", "--store", withPassword},
		{"copy", "--json", "--from", src, "--to", withPassword},
	} {
		r := cli(t, nil, args...)
		if r.code != 0 || strings.Contains(r.stdout+r.stderr, "s3cret-pw") || !strings.Contains(r.stdout, "xxxxx") {
			t.Errorf("annals %s: want exit 0 and the password shown as xxxxx; got %s", args[0], r)
		}
	}
}
