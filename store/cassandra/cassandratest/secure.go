package cassandratest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// DefaultSecureAddress is the secured node `scripts/services up
// cassandra-secure` starts: password authentication (the superuser
// SecureUser, SecurePassword) and TLS with client certificates.
const DefaultSecureAddress = "127.0.0.1:9142"

// The secured node's superuser, made by Cassandra at its first start.
const (
	SecureUser     = "cassandra"
	SecurePassword = "cassandra"
)

// SecureServer returns the secured test node's address
// (ANNALS_TEST_CASSANDRA_SECURE, else DefaultSecureAddress) and the folder
// of its certificates (ANNALS_TEST_CASSANDRA_SECURE_CERTS: ca.pem, ca.key)
// after checking that it accepts connections. When it does not, t is
// skipped, or failed when ANNALS_TEST_REQUIRE lists cassandra-secure.
func SecureServer(t testing.TB) (addr, certs string) {
	t.Helper()
	addr, certs = os.Getenv("ANNALS_TEST_CASSANDRA_SECURE"), os.Getenv("ANNALS_TEST_CASSANDRA_SECURE_CERTS")
	if addr == "" {
		addr = DefaultSecureAddress
	}
	required := slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "cassandra-secure")
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		conn.Close()
		if certs == "" {
			err = os.ErrNotExist
		}
	}
	if err != nil {
		if required {
			t.Fatalf("the secured Cassandra at %s is required (ANNALS_TEST_REQUIRE), and it does not answer or ANNALS_TEST_CASSANDRA_SECURE_CERTS is unset: %v", addr, err)
		}
		t.Skipf("no secured Cassandra at %s, or ANNALS_TEST_CASSANDRA_SECURE_CERTS unset (%v): run `scripts/services up cassandra-secure` and `eval \"$(scripts/services env cassandra-secure)\"`", addr, err)
	}
	return addr, certs
}

// CA is a certificate authority that signs test client certificates.
type CA struct {
	cert *x509.Certificate
	key  any
	// File is its certificate, PEM.
	File string
}

// LoadCA returns the secured node's CA (ca.pem and ca.key in certs, as
// SecureServer returns it).
func LoadCA(t testing.TB, certs string) CA {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return CA{cert: cert, key: pair.PrivateKey, File: filepath.Join(certs, "ca.pem")}
}

// NewCA makes a CA no node trusts, its certificate in dir.
func NewCA(t testing.TB, dir string) CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stranger CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "stranger-ca.pem")
	writePEM(t, file, "CERTIFICATE", der)
	return CA{cert: cert, key: key, File: file}
}

// ClientCert writes a client certificate signed by ca, valid from
// notBefore to notAfter, and its key into dir, and returns their files.
func (ca CA) ClientCert(t testing.TB, dir, name string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t testing.TB, file, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
