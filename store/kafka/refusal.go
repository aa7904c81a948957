package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// isCertificateAlert reports whether text is that of a TLS alert
// (crypto/tls's) with which a server refuses a client's certificate, or
// the want of one.
func isCertificateAlert(text string) bool {
	switch text {
	case "tls: bad certificate", "tls: unsupported certificate", "tls: revoked certificate", "tls: expired certificate",
		"tls: unknown certificate", "tls: unknown certificate authority", "tls: certificate required":
		return true
	}
	return false
}

// certificateRefusal says why the brokers refused a client connecting
// with cfg (nil: TLS settings unknown) when err holds a TLS alert of
// theirs about the client's certificate, as "refused …" or "require …",
// to follow "the brokers at […]"; "" when err holds none. The alert alone
// is vague (a Java broker answers an expired certificate with "unknown
// certificate", no certificate with "bad certificate"), so it looks at the
// client's own certificate: none, not valid at now, or its issuer. Go's
// client does not send a certificate whose issuer is not among the CAs
// the server names, so a certificate of a CA the brokers do not trust
// reaches them as none.
func certificateRefusal(err error, cfg *tls.Config, now time.Time) string {
	op, ok := errors.AsType[*net.OpError](err)
	if !ok || op.Op != "remote error" || op.Err == nil || !isCertificateAlert(op.Err.Error()) {
		// With TLS 1.3 the brokers refuse a certificate after the
		// client's side of the handshake, and their alert may be lost to
		// a reset of the connection: a certificate out of its validity
		// is named then too.
		if (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)) &&
			cfg != nil && cfg.GetClientCertificate == nil && len(cfg.Certificates) == 1 {
			if cert := leafOf(cfg.Certificates[0]); cert != nil {
				return outOfValidity(cert, now)
			}
		}
		return ""
	}
	switch {
	case cfg == nil || cfg.GetClientCertificate != nil || len(cfg.Certificates) > 1:
		// Which certificate was sent is the handshake's choice.
		return "refused the client's certificate, or its want of one"
	case len(cfg.Certificates) == 0:
		return "require a client certificate, and the client has none"
	}
	cert := leafOf(cfg.Certificates[0])
	if cert == nil {
		return "refused the client certificate"
	}
	if d := outOfValidity(cert, now); d != "" {
		return d
	}
	return fmt.Sprintf("refused the client certificate %s, issued by %s, a CA they may not trust", cert.Subject, cert.Issuer)
}

// leafOf returns the parsed leaf of c, nil when it has none or it does
// not parse.
func leafOf(c tls.Certificate) *x509.Certificate {
	if c.Leaf != nil {
		return c.Leaf
	}
	if len(c.Certificate) == 0 {
		return nil
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// outOfValidity describes the refusal of cert when it is not valid at now,
// "" when it is.
func outOfValidity(cert *x509.Certificate, now time.Time) string {
	const day = "2006-01-02 15:04:05 MST"
	switch {
	case now.After(cert.NotAfter):
		return fmt.Sprintf("refused the client certificate %s: it expired on %s", cert.Subject, cert.NotAfter.UTC().Format(day))
	case now.Before(cert.NotBefore):
		return fmt.Sprintf("refused the client certificate %s: it is not valid before %s", cert.Subject, cert.NotBefore.UTC().Format(day))
	}
	return ""
}
