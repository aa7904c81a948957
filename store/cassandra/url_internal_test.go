package cassandra

import (
	"errors"
	"slices"
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
		{name: "an IPv6 address without brackets", url: "cassandra://::1,h2/ks", invalid: true},
		{name: "an unclosed bracket", url: "cassandra://[::1:9042,h2/ks", invalid: true},
		{name: "ports that differ", url: "cassandra://h1:9042,h2:9043/ks", invalid: true},
		{name: "a port on some hosts only", url: "cassandra://h1,h2:9043/ks", invalid: true},
		{name: "serial consistency quorum", url: "cassandra://h1/ks?serial_consistency=quorum", invalid: true},
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
