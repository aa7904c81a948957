// Package clientauth reads the credentials and TLS settings that store
// URLs name (cassandra://, kafka://): a password from the URL, a file or
// the environment, and a TLS client configuration from PEM files. Its
// errors name the URL parameter at fault and never hold a password.
package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Password returns the password of user: given (the URL's own) when not
// empty, else the first line of file when one is named, else the value of
// the environment variable env. A password without a user, an unreadable
// or empty file, fail with an error naming password_file.
func Password(user, given, file, env string) (string, error) {
	pw := given
	if pw == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("password_file: %w", err)
		}
		pw, _, _ = strings.Cut(string(b), "\n")
		pw = strings.TrimSuffix(pw, "\r")
		if pw == "" {
			return "", fmt.Errorf("password_file %s is empty", file)
		}
	}
	if pw == "" && user != "" {
		pw = os.Getenv(env)
	}
	if pw != "" && user == "" {
		return "", errors.New("a password without a user name")
	}
	return pw, nil
}

// TLS is the TLS settings of a URL: tls=true, and the PEM files and names
// of tls_ca, tls_cert, tls_key and tls_server_name.
type TLS struct {
	On                   bool
	CA, Cert, Key        string
	ServerName           string
	SkipHostVerification bool // tls_verify_host=false
}

// Param sets what the URL parameter name says and reports whether it is
// one of TLS's; a value that is not a boolean where one is wanted fails.
func (t *TLS) Param(name, value string) (bool, error) {
	switch name {
	case "tls", "tls_verify_host":
		on, err := strconv.ParseBool(value)
		if err != nil {
			return true, errors.New("want true or false")
		}
		if name == "tls" {
			t.On = on
		} else {
			t.SkipHostVerification = !on
		}
	case "tls_ca":
		t.CA = value
	case "tls_cert":
		t.Cert = value
	case "tls_key":
		t.Key = value
	case "tls_server_name":
		t.ServerName = value
	default:
		return false, nil
	}
	return true, nil
}

// Config returns the client configuration: nil without tls=true (and then
// no file may be named), else TLS 1.2 or later trusting the CA file (the
// system's CAs without one), with the client certificate of the cert and
// key files, checking that the server's certificate names ServerName (or
// the address dialled). With SkipHostVerification the chain is still
// checked against the CAs, not the names.
func (t TLS) Config() (*tls.Config, error) {
	if !t.On {
		if t.CA != "" || t.Cert != "" || t.Key != "" || t.ServerName != "" {
			return nil, errors.New("tls_ca, tls_cert, tls_key and tls_server_name need tls=true")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca %s holds no PEM certificate", t.CA)
		}
		cfg.RootCAs = pool
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, errors.New("tls_cert and tls_key go together")
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("tls_cert and tls_key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if t.SkipHostVerification {
		cfg.InsecureSkipVerify = true // the names only: VerifyConnection checks the chain
		cfg.VerifyConnection = VerifyChain(cfg.RootCAs)
	}
	return cfg, nil
}

// VerifyChain returns a tls.Config.VerifyConnection that checks a server's
// certificate chain against roots (nil: the system's), not its names.
func VerifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}
