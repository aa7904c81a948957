package pgtest

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// HAPair is the secured primary and hot standby `scripts/services up
// postgres-ha` starts: TLS only, SCRAM passwords, synchronous streaming
// replication.
type HAPair struct {
	// Primary and Standby are the servers' URLs, with sslmode=verify-full
	// and the CA, and without the password.
	Primary, Standby string
	// PasswordFile holds the superuser's password (its first line).
	PasswordFile string
	// Certs is the folder of the CA (ca.pem, ca.key) and the servers'
	// certificate.
	Certs string
	// Password is the superuser's password.
	Password string
}

// WithPassword returns dsn with the pair's password in its user info.
func (p HAPair) WithPassword(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.User = url.UserPassword(u.User.Username(), p.Password)
	return u.String()
}

// HARequired reports whether ANNALS_TEST_REQUIRE lists postgres-ha.
func HARequired() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "postgres-ha")
}

// HA returns the secured pair of ANNALS_TEST_POSTGRES_HA,
// ANNALS_TEST_POSTGRES_HA_STANDBY, ANNALS_TEST_POSTGRES_HA_PASSWORD_FILE
// and ANNALS_TEST_POSTGRES_HA_CERTS (`eval "$(scripts/services env
// postgres-ha)"` sets them) after checking that both answer. When they are
// not set or do not answer, t is skipped, or failed when HARequired.
func HA(t testing.TB) HAPair {
	t.Helper()
	p := HAPair{
		Primary: os.Getenv("ANNALS_TEST_POSTGRES_HA"), Standby: os.Getenv("ANNALS_TEST_POSTGRES_HA_STANDBY"),
		PasswordFile: os.Getenv("ANNALS_TEST_POSTGRES_HA_PASSWORD_FILE"), Certs: os.Getenv("ANNALS_TEST_POSTGRES_HA_CERTS"),
	}
	missing := func(format string, args ...any) {
		t.Helper()
		if HARequired() {
			t.Fatalf("the secured PostgreSQL pair is required (ANNALS_TEST_REQUIRE lists postgres-ha): "+format, args...)
		}
		t.Skipf("no secured PostgreSQL pair: "+format+"; run `scripts/services up postgres-ha` and `eval \"$(scripts/services env postgres-ha)\"`", args...)
	}
	if p.Primary == "" || p.Standby == "" || p.PasswordFile == "" || p.Certs == "" {
		missing("ANNALS_TEST_POSTGRES_HA and its companions are not set")
	}
	b, err := os.ReadFile(p.PasswordFile)
	if err != nil {
		missing("%v", err)
	}
	p.Password, _, _ = strings.Cut(strings.TrimRight(string(b), "\r\n"), "\n")
	for _, dsn := range []string{p.Primary, p.Standby} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, p.WithPassword(dsn))
		if err != nil {
			cancel()
			missing("%s does not answer: %v", redacted(dsn), err)
		}
		conn.Close(ctx)
		cancel()
	}
	return p
}

// redacted returns dsn without its password.
func redacted(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// HASchema reserves a schema name unique to this test run on the pair (see
// Schema), registers its removal from the primary at the end of the test,
// and returns the primary's and the standby's URLs with the password and
// schema=<name>.
func HASchema(t testing.TB, p HAPair) (primary, standby, schema string) {
	t.Helper()
	schema = uniqueSchema()
	primary = WithParam(p.WithPassword(p.Primary), "schema", schema)
	standby = WithParam(p.WithPassword(p.Standby), "schema", schema)
	t.Cleanup(func() { drop(t, primary) })
	return primary, standby, schema
}
