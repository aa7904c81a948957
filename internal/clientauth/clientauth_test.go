package clientauth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPassword: the URL's password wins, then the first line of the file
// (without its line ending, LF or CRLF), then the environment; a password
// without a user, and an empty or missing file, fail naming password_file
// or the user.
func TestPassword(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lf, crlf, empty := file("lf", "s3cret\nnext\n"), file("crlf", "s3cret\r\nnext\r\n"), file("empty", "\n")
	const env = "CLIENTAUTH_TEST_PASSWORD"
	t.Setenv(env, "from-env")
	for _, c := range []struct {
		name, user, given, file string
		want, bad               string
	}{
		{name: "given", user: "u", given: "g", file: lf, want: "g"},
		{name: "file LF", user: "u", file: lf, want: "s3cret"},
		{name: "file CRLF", user: "u", file: crlf, want: "s3cret"},
		{name: "environment", user: "u", want: "from-env"},
		{name: "no user, no password", want: ""},
		{name: "password without user", given: "g", bad: "without a user"},
		{name: "empty file", user: "u", file: empty, bad: "empty"},
		{name: "missing file", user: "u", file: filepath.Join(dir, "none"), bad: "password_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Password(c.user, c.given, c.file, env)
			if c.bad != "" {
				if err == nil || !strings.Contains(err.Error(), c.bad) {
					t.Fatalf("Password: %q, %v; want an error naming %q", got, err, c.bad)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Password = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
