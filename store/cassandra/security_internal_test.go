package cassandra

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecurityParameters: the URL's user info and security parameters
// become the store's credentials and TLS settings, the password from a file
// or PasswordEnv when the URL has none, and contradictory or unreadable
// settings fail with ErrInvalidConfig naming the parameter.
func TestSecurityParameters(t *testing.T) {
	dir := t.TempDir()
	pwFile, empty := filepath.Join(dir, "pw"), filepath.Join(dir, "empty")
	if err := os.WriteFile(pwFile, []byte("from-file\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, url, env  string
		user, password  string
		tls, verifyHost bool
		localDC         string
		bad             string // a word the error names; "" when none
	}{
		{name: "none", url: "cassandra://h/ks"},
		{name: "user info", url: "cassandra://app:s3cret@h/ks", user: "app", password: "s3cret"},
		{name: "password file", url: "cassandra://app@h/ks?password_file=" + pwFile, user: "app", password: "from-file"},
		{name: "environment", url: "cassandra://app@h/ks", env: "from-env", user: "app", password: "from-env"},
		{name: "user info wins over the environment", url: "cassandra://app:s3cret@h/ks", env: "from-env", user: "app", password: "s3cret"},
		{name: "tls and local dc", url: "cassandra://h/ks?tls=true&local_dc=dc1", tls: true, verifyHost: true, localDC: "dc1"},
		{name: "tls without host verification", url: "cassandra://h/ks?tls=true&tls_verify_host=false", tls: true},
		{name: "empty password file", url: "cassandra://app@h/ks?password_file=" + empty, bad: "empty"},
		{name: "missing password file", url: "cassandra://app@h/ks?password_file=" + filepath.Join(dir, "none"), bad: "password_file"},
		{name: "tls not a boolean", url: "cassandra://h/ks?tls=yes-please", bad: "tls"},
		{name: "CA without tls", url: "cassandra://h/ks?tls_ca=" + pwFile, bad: "tls=true"},
		{name: "CA file not PEM", url: "cassandra://h/ks?tls=true&tls_ca=" + pwFile, bad: "pem"},
		{name: "key without certificate", url: "cassandra://h/ks?tls=true&tls_key=" + pwFile, bad: "tls_cert"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(PasswordEnv, c.env)
			cfg := defaultConfig()
			err := parseURL(c.url, &cfg)
			if err == nil {
				err = cfg.sec.resolve()
			}
			if c.bad != "" {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(strings.ToLower(err.Error()), c.bad) {
					t.Fatalf("error %v, want ErrInvalidConfig naming %q", err, c.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sec := cfg.sec
			if sec.username != c.user || sec.password != c.password || (sec.tlsConfig != nil) != c.tls || (sec.tlsConfig != nil && sec.tlsConfig.InsecureSkipVerify == c.verifyHost) || sec.localDC != c.localDC {
				t.Errorf("got user %q password %q tls %v local dc %q", sec.username, sec.password, sec.tlsConfig != nil, sec.localDC)
			}
		})
	}
}

// TestURLErrorsHideThePassword: a URL that does not parse (a password
// with an unescaped % or /) fails naming the problem, without the URL's
// text, which holds the password.
func TestURLErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{"cassandra://admin:s3cr%t@h/ks", "cassandra://admin:s3c/ret@h/ks"} {
		cfg := defaultConfig()
		err := parseURL(raw, &cfg)
		if err == nil {
			err = cfg.validate()
		}
		if !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), "s3c") {
			t.Errorf("parseURL(%q): %v; want ErrInvalidConfig without the password", raw, err)
		}
	}
}
