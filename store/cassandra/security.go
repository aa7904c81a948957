package cassandra

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/internal/clientauth"
)

// PasswordEnv is the environment variable Open reads the password from
// when the URL names a user without a password and no password_file.
const PasswordEnv = "ANNALS_CASSANDRA_PASSWORD"

// security is how the store authenticates and encrypts its connections,
// and which nodes it prefers.
type security struct {
	username, password string
	passwordFile       string
	tlsURL             clientauth.TLS // the URL's tls parameters
	tlsConfig          *tls.Config    // WithTLS's, or made from tlsURL
	localDC            string
}

// WithCredentials makes the store log in with username and password
// (Cassandra's PasswordAuthenticator), over the URL's user info, its
// password_file and PasswordEnv.
func WithCredentials(username, password string) Option {
	return func(c *config) { c.sec.username, c.sec.password, c.sec.passwordFile = username, password, "" }
}

// WithTLS makes the store connect over TLS with cfg, used as it is (a
// copy): its RootCAs, its Certificates (a client certificate), its
// ServerName (empty: each node's address is checked against its
// certificate). It replaces the URL's tls parameters.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) { c.sec.tlsConfig = cfg.Clone() }
}

// WithLocalDatacenter makes the store send its requests to the nodes of
// datacenter dc first (LOCAL_QUORUM and LOCAL_ONE then stay in it), as the
// URL parameter local_dc does. Requests go to a replica of their partition
// in either case (token-aware routing).
func WithLocalDatacenter(dc string) Option { return func(c *config) { c.sec.localDC = dc } }

// parseSecurity reads a URL parameter of the security settings; it
// reports whether name was one of them.
func parseSecurity(name, v string, sec *security) (bool, error) {
	switch name {
	case "password_file":
		sec.passwordFile = v
	case "local_dc":
		sec.localDC = v
	default:
		return sec.tlsURL.Param(name, v)
	}
	return true, nil
}

// resolve fills the password from its file or PasswordEnv, and makes the
// TLS configuration of the URL's parameters unless WithTLS gave one.
func (sec *security) resolve() error {
	pw, err := clientauth.Password(sec.username, sec.password, sec.passwordFile, PasswordEnv)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	sec.password = pw
	if sec.tlsConfig != nil {
		return nil
	}
	if sec.tlsConfig, err = sec.tlsURL.Config(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// apply sets the cluster's authenticator, TLS and host selection.
func (sec *security) apply(cluster *gocql.ClusterConfig) {
	if sec.username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: sec.username, Password: sec.password}
	}
	if sec.tlsConfig != nil {
		cluster.SslOpts = &gocql.SslOptions{Config: sec.tlsConfig.Clone(), EnableHostVerification: !sec.tlsConfig.InsecureSkipVerify}
	}
	fallback := gocql.RoundRobinHostPolicy()
	if sec.localDC != "" {
		fallback = gocql.DCAwareRoundRobinPolicy(sec.localDC)
	}
	cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(fallback)
}

// authRefused reports whether err is the cluster refusing the store's
// credentials (an authentication error frame), or asking for credentials
// the store was not given. The driver keeps the frame's type only on later
// connections: the first one's error reaches Open as text (gocql's control
// connection formats it with %v), so the texts are matched too: the
// driver's "authentication required" and Cassandra's PasswordAuthenticator
// refusal ("Provided username … and/or password are incorrect").
func authRefused(err error) bool {
	var re gocql.RequestError
	if errors.As(err, &re) && re.Code() == gocql.ErrCodeCredentials {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "authentication required") || strings.Contains(msg, "password are incorrect")
}
