package cassandratest

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/internal/testcerts"
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

// LoadCA returns the secured node's CA (ca.pem and ca.key in certs, as
// SecureServer returns it), which signs the client certificates it takes.
func LoadCA(t testing.TB, certs string) testcerts.CA {
	t.Helper()
	return testcerts.Load(t, filepath.Join(certs, "ca.pem"), filepath.Join(certs, "ca.key"))
}
