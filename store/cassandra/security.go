package cassandra

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// PasswordEnv is the environment variable Open reads the password from
// when the URL names a user without a password and no password_file.
const PasswordEnv = "ANNALS_CASSANDRA_PASSWORD"

// security is how the store authenticates and encrypts its connections,
// and which nodes it prefers.
type security struct {
	username, password string
	passwordFile       string
	tlsURL             bool   // tls=true in the URL
	tlsVerifyHost      bool   // check the node's certificate names its address (default true)
	tlsCA              string // PEM file of the CAs to trust (default: the system's)
	tlsCert, tlsKey    string // PEM files of the client certificate and its key
	tlsServerName      string // the name the nodes' certificates must carry (default: each node's address)
	tlsConfig          *tls.Config
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

// parseSecurity reads the URL's user info and its security parameters;
// it reports whether name was one of them.
func parseSecurity(name, v string, sec *security) (bool, error) {
	switch name {
	case "password_file":
		sec.passwordFile = v
	case "local_dc":
		sec.localDC = v
	case "tls", "tls_verify_host":
		on, err := strconv.ParseBool(v)
		if err != nil {
			return true, errors.New("want true or false")
		}
		if name == "tls" {
			sec.tlsURL = on
		} else {
			sec.tlsVerifyHost = on
		}
	case "tls_ca":
		sec.tlsCA = v
	case "tls_cert":
		sec.tlsCert = v
	case "tls_key":
		sec.tlsKey = v
	case "tls_server_name":
		sec.tlsServerName = v
	default:
		return false, nil
	}
	return true, nil
}

// userInfo takes the URL's user and password.
func (sec *security) userInfo(u *url.URL) {
	if u.User == nil {
		return
	}
	sec.username = u.User.Username()
	sec.password, _ = u.User.Password()
}

// resolve fills the password from its file or PasswordEnv, and builds the
// TLS configuration of the URL's parameters; it checks that they agree.
func (sec *security) resolve() error {
	if sec.password == "" && sec.passwordFile != "" {
		b, err := os.ReadFile(sec.passwordFile)
		if err != nil {
			return fmt.Errorf("%w: password_file: %w", ErrInvalidConfig, err)
		}
		sec.password, _, _ = strings.Cut(strings.TrimRight(string(b), "\r\n"), "\n")
		if sec.password == "" {
			return fmt.Errorf("%w: password_file %s is empty", ErrInvalidConfig, sec.passwordFile)
		}
	}
	if sec.username != "" && sec.password == "" {
		sec.password = os.Getenv(PasswordEnv)
	}
	if sec.password != "" && sec.username == "" {
		return fmt.Errorf("%w: a password without a user name", ErrInvalidConfig)
	}
	if sec.tlsConfig != nil {
		return nil
	}
	files := sec.tlsCA != "" || sec.tlsCert != "" || sec.tlsKey != "" || sec.tlsServerName != ""
	if !sec.tlsURL {
		if files {
			return fmt.Errorf("%w: tls_ca, tls_cert, tls_key and tls_server_name need tls=true", ErrInvalidConfig)
		}
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: sec.tlsServerName}
	if sec.tlsCA != "" {
		pem, err := os.ReadFile(sec.tlsCA)
		if err != nil {
			return fmt.Errorf("%w: tls_ca: %w", ErrInvalidConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: tls_ca %s holds no PEM certificate", ErrInvalidConfig, sec.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if (sec.tlsCert == "") != (sec.tlsKey == "") {
		return fmt.Errorf("%w: tls_cert and tls_key go together", ErrInvalidConfig)
	}
	if sec.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(sec.tlsCert, sec.tlsKey)
		if err != nil {
			return fmt.Errorf("%w: tls_cert and tls_key: %w", ErrInvalidConfig, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	sec.tlsConfig = cfg
	return nil
}

// apply sets the cluster's authenticator, TLS and host selection.
func (sec *security) apply(cluster *gocql.ClusterConfig) {
	if sec.username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: sec.username, Password: sec.password}
	}
	if sec.tlsConfig != nil {
		cluster.SslOpts = &gocql.SslOptions{Config: sec.tlsConfig.Clone(), EnableHostVerification: sec.tlsVerifyHost}
		if !sec.tlsVerifyHost {
			// The chain is still checked against the CAs; only the names are
			// not (nodes known by addresses their certificates do not carry).
			cluster.SslOpts.Config.InsecureSkipVerify = true
			cluster.SslOpts.Config.VerifyConnection = verifyChain(cluster.SslOpts.Config.RootCAs)
		}
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

// verifyChain checks a node's certificate chain against roots (nil: the
// system's), not its names.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("cassandra: the node sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}
