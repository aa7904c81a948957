package cassandra

import (
	"errors"
	"slices"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// TestURLContactPointsAndConsistency: a URL names several contact points
// (each host:port, or a host alone with the default port), the
// consistency of reads and writes together or apart, and the serial
// consistency of lightweight transactions; the nodes of one URL share a
// port, and a serial consistency other than serial or local_serial is
// refused.
func TestURLContactPointsAndConsistency(t *testing.T) {
	cases := []struct {
		name                string
		url                 string
		hosts               []string
		read, write, serial gocql.Consistency
		guard               WriteGuard // 0: none configured (the keyspace's)
		invalid             bool
	}{
		{name: "one host", url: "cassandra://h1/ks",
			hosts: []string{"h1:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial},
		{name: "several hosts with ports", url: "cassandra://10.0.0.1:9142,10.0.0.2:9142,10.0.0.3:9142/ks?consistency=quorum",
			hosts: []string{"10.0.0.1:9142", "10.0.0.2:9142", "10.0.0.3:9142"}, read: gocql.Quorum, write: gocql.Quorum, serial: gocql.LocalSerial},
		{name: "several hosts, the default port", url: "cassandra://h1,h2,h3/ks?serial_consistency=serial",
			hosts: []string{"h1:9042", "h2:9042", "h3:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.Serial},
		{name: "reads and writes apart", url: "cassandra://h1:9042,h2:9042/ks?read_consistency=one&write_consistency=all&serial_consistency=LOCAL_SERIAL",
			hosts: []string{"h1:9042", "h2:9042"}, read: gocql.One, write: gocql.All, serial: gocql.LocalSerial},
		{name: "IPv6 addresses", url: "cassandra://[::1]:9142,[fd00::2]:9142/ks",
			hosts: []string{"[::1]:9142", "[fd00::2]:9142"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial},
		{name: "IPv6 addresses, the default port, a user", url: "cassandra://u:p%2Fw@[::1],[fd00::2],10.0.0.3/ks?consistency=one",
			hosts: []string{"[::1]:9042", "[fd00::2]:9042", "10.0.0.3:9042"}, read: gocql.One, write: gocql.One, serial: gocql.LocalSerial},
		{name: "an IPv6 address with a zone", url: "cassandra://[fe80::1%25eth0]:9042,[fe80::2%25eth0]/ks",
			hosts: []string{"[fe80::1%eth0]:9042", "[fe80::2%eth0]:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial},
		{name: "a password with reserved characters, escaped", url: "cassandra://admin:p%2C%2F%40%23%3F@h1,h2/ks",
			hosts: []string{"h1:9042", "h2:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial},
		{name: "an IPv6 address without brackets", url: "cassandra://::1,h2/ks", invalid: true},
		{name: "a later host with a space", url: "cassandra://h1,h 2/ks", invalid: true},
		{name: "a later host with a bad escape", url: "cassandra://h1,h%zz/ks", invalid: true},
		{name: "empty brackets", url: "cassandra://h1,[]/ks", invalid: true},
		{name: "a name in brackets", url: "cassandra://[h1]/ks", invalid: true},
		{name: "a signed port", url: "cassandra://h1:9042,h2:+9042/ks", invalid: true},
		{name: "an unclosed bracket", url: "cassandra://[::1:9042,h2/ks", invalid: true},
		{name: "ports that differ", url: "cassandra://h1:9042,h2:9043/ks", invalid: true},
		{name: "a port on some hosts only", url: "cassandra://h1,h2:9043/ks", invalid: true},
		{name: "serial consistency quorum", url: "cassandra://h1/ks?serial_consistency=quorum", invalid: true},
		{name: "the conditional guard", url: "cassandra://h1/ks?write_guard=Conditional",
			hosts: []string{"h1:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial, guard: GuardConditional},
		{name: "the claims guard", url: "cassandra://h1/ks?write_guard=claims",
			hosts: []string{"h1:9042"}, read: gocql.LocalQuorum, write: gocql.LocalQuorum, serial: gocql.LocalSerial, guard: GuardClaims},
		{name: "an unknown guard", url: "cassandra://h1/ks?write_guard=lwt", invalid: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultConfig()
			err := parseURL(c.url, &cfg)
			if err == nil {
				err = cfg.validate()
			}
			if c.invalid {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("%s: got %v, want ErrInvalidConfig", c.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.url, err)
			}
			if !slices.Equal(cfg.hosts, c.hosts) {
				t.Errorf("hosts %v, want %v", cfg.hosts, c.hosts)
			}
			if cfg.readCL != c.read || cfg.writeCL != c.write || cfg.serialCL != c.serial {
				t.Errorf("consistency read %v write %v serial %v, want %v, %v, %v", cfg.readCL, cfg.writeCL, cfg.serialCL, c.read, c.write, c.serial)
			}
			if cfg.guard != c.guard {
				t.Errorf("write guard %v, want %v", cfg.guard, c.guard)
			}
		})
	}
	t.Run("option", func(t *testing.T) {
		cfg := defaultConfig()
		if err := parseURL("cassandra://h1/ks?serial_consistency=local_serial", &cfg); err != nil {
			t.Fatal(err)
		}
		WithSerialConsistency(gocql.Serial)(&cfg)
		if cfg.serialCL != gocql.Serial {
			t.Errorf("WithSerialConsistency(Serial) after the URL: %v, want SERIAL (options override the URL)", cfg.serialCL)
		}
		WithSerialConsistency(gocql.Quorum)(&cfg)
		if err := cfg.validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("WithSerialConsistency(Quorum): validate gives %v, want ErrInvalidConfig", err)
		}
	})
}

// TestURLPasswordNeverHosts: a password holding an unescaped /, #, ?, @ or
// , (a mistake: the URL wants them percent-encoded) is never read as
// hosts, and no error quotes a part of it.
func TestURLPasswordNeverHosts(t *testing.T) {
	for _, c := range []struct{ url, secret string }{
		{"cassandra://admin:p:ss/word@h1/ks", "ss/word"},
		{"cassandra://admin:9042,hunter2#x@h1/ks", "hunter2"},
		{"cassandra://u:,sec?ret@h1/ks", "sec"},
		{"cassandra://u:12,sec#ret@h1/ks", "sec"},
		{"cassandra://u:pa@ss@h1,h2/ks", "pa@ss"},
	} {
		t.Run(c.url, func(t *testing.T) {
			cfg := defaultConfig()
			err := parseURL(c.url, &cfg)
			if err == nil {
				err = cfg.validate()
			}
			for _, h := range cfg.hosts {
				if h != "h1:9042" && h != "h2:9042" {
					t.Errorf("host %q is not one of the URL's hosts (h1, h2): it comes from the password", h)
				}
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error %v does not wrap ErrInvalidConfig", err)
				}
				if strings.Contains(err.Error(), c.secret) {
					t.Errorf("error %q shows the password", err)
				}
			}
		})
	}
}
