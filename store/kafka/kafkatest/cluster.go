package kafkatest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/annals-go/annals/internal/servicescript"
)

// ClusterService is the name of the secured cluster of three brokers in
// scripts/services and in ANNALS_TEST_REQUIRE.
const ClusterService = "kafka-cluster"

// ClusterUser is the SASL user `scripts/services up kafka-cluster` makes.
const ClusterUser = "annals"

// ClusterReplicas is the cluster's replication factor, and
// ClusterMinInSync its min.insync.replicas.
const (
	ClusterReplicas  = 3
	ClusterMinInSync = 2
)

// TestCluster is the secured cluster of `scripts/services up
// kafka-cluster`: three brokers taking SASL (SCRAM-SHA-512,
// SCRAM-SHA-256, PLAIN) over TLS, and, on listeners of their own, TLS
// with a client certificate signed by CA (MTLS).
type TestCluster struct {
	// Brokers are the brokers' client addresses, broker 1 first.
	Brokers []string
	// User is the SASL user; its password is the first line of
	// PasswordFile.
	User, PasswordFile string
	// CA is the PEM file of the CA that signed the brokers' certificate.
	CA string

	dir    string // the services folder: kafka-cluster.N.pid
	script string // scripts/services
	mtls   string // ANNALS_TEST_KAFKA_CLUSTER_MTLS
	certs  string // ANNALS_TEST_KAFKA_CLUSTER_CERTS
}

// KeyPair is a client certificate's PEM file and its key's.
type KeyPair struct{ Cert, Key string }

// MTLSCluster is the cluster's listeners that require a client
// certificate signed by its CA, and the client certificates `scripts/services
// up kafka-cluster` made for them, each for CN=annals-cert.
type MTLSCluster struct {
	// Brokers are the listeners' addresses, broker 1 first.
	Brokers []string
	// Client is signed by the cluster's CA and valid; Expired is signed
	// by it too, valid on 1 January 2020 only; Foreign is signed by a CA
	// the brokers do not trust.
	Client, Expired, Foreign KeyPair
}

// ClusterRequired reports whether ANNALS_TEST_REQUIRE lists kafka-cluster.
func ClusterRequired() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), ClusterService)
}

// Cluster returns the secured cluster after checking that its brokers
// accept connections; t is skipped, or failed when ClusterRequired, when
// they do not. It reads the cluster from ANNALS_TEST_KAFKA_CLUSTER,
// ANNALS_TEST_KAFKA_CLUSTER_MTLS, ANNALS_TEST_KAFKA_CLUSTER_CERTS,
// ANNALS_TEST_KAFKA_CLUSTER_PASSWORD_FILE and ANNALS_TEST_KAFKA_CLUSTER_DIR
// (`scripts/services env kafka-cluster`), or, when the first is not set,
// from what that command prints (an `unset` line clears its variable). The test shares the cluster with other tests of any process
// (a shared lock in the services folder) until it ends; a test that
// kills brokers takes it alone (ClusterAlone).
func Cluster(t testing.TB) *TestCluster {
	t.Helper()
	return cluster(t, false)
}

// ClusterAlone is Cluster for a test that kills brokers: it waits until
// no other test, in any process, uses the cluster, and holds it alone
// until it ends.
func ClusterAlone(t testing.TB) *TestCluster {
	t.Helper()
	return cluster(t, true)
}

// clusterUnavailable fails t when ClusterRequired, and skips it otherwise,
// saying what is missing (missing: msg) and what to run.
func clusterUnavailable(t testing.TB, missing, run, msg string) {
	t.Helper()
	if ClusterRequired() {
		t.Fatalf("the Kafka cluster is required (ANNALS_TEST_REQUIRE) and %s", msg)
	}
	t.Skipf("%s: %s; run %s", missing, msg, run)
}

func cluster(t testing.TB, exclusive bool) *TestCluster {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		clusterUnavailable(t, "no Kafka cluster", "`scripts/services up kafka-cluster`", fmt.Sprintf(format, args...))
	}
	script, err := servicescript.Path()
	if err != nil {
		unavailable("%v", err)
	}
	env := map[string]string{}
	for _, k := range []string{"ANNALS_TEST_KAFKA_CLUSTER", "ANNALS_TEST_KAFKA_CLUSTER_MTLS", "ANNALS_TEST_KAFKA_CLUSTER_CERTS", "ANNALS_TEST_KAFKA_CLUSTER_PASSWORD_FILE", "ANNALS_TEST_KAFKA_CLUSTER_DIR"} {
		env[k] = os.Getenv(k)
	}
	if env["ANNALS_TEST_KAFKA_CLUSTER"] == "" {
		out, err := exec.CommandContext(t.Context(), script, "env", ClusterService).Output()
		if err != nil {
			unavailable("`scripts/services env kafka-cluster` failed (%v)", err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			line := sc.Text()
			if k, ok := strings.CutPrefix(line, "unset "); ok {
				env[strings.TrimSpace(k)] = ""
			} else if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
				env[k] = v
			}
		}
	}
	c := &TestCluster{Brokers: strings.Split(env["ANNALS_TEST_KAFKA_CLUSTER"], ","), User: ClusterUser,
		PasswordFile: env["ANNALS_TEST_KAFKA_CLUSTER_PASSWORD_FILE"], CA: filepath.Join(env["ANNALS_TEST_KAFKA_CLUSTER_CERTS"], "ca.pem"),
		dir: env["ANNALS_TEST_KAFKA_CLUSTER_DIR"], script: script,
		mtls: env["ANNALS_TEST_KAFKA_CLUSTER_MTLS"], certs: env["ANNALS_TEST_KAFKA_CLUSTER_CERTS"]}
	if c.dir == "" || c.PasswordFile == "" || len(c.Brokers) != ClusterReplicas {
		unavailable("the environment names no cluster of %d brokers (%q)", ClusterReplicas, env["ANNALS_TEST_KAFKA_CLUSTER"])
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "kafka-cluster.tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("the cluster's test lock: %v", err)
	}
	if err := lockFile(f, exclusive); err != nil {
		f.Close()
		t.Fatalf("taking the cluster's test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	for _, b := range c.Brokers {
		conn, err := net.DialTimeout("tcp", b, 3*time.Second)
		if err != nil {
			unavailable("broker %s does not answer (%v)", b, err)
		}
		conn.Close()
	}
	return c
}

// MTLS returns the brokers' client-certificate listeners and the client
// certificates made for them, after checking that the files are there
// and the listeners accept connections; t is skipped, or failed when
// ClusterRequired, when they are not (a cluster started, or an
// environment set, by an older scripts/services has none).
func (c *TestCluster) MTLS(t testing.TB) *MTLSCluster {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		clusterUnavailable(t, "no client-certificate listeners on the Kafka cluster",
			"`scripts/services down kafka-cluster`, `scripts/services up kafka-cluster` and `eval \"$(scripts/services env kafka-cluster)\"`", fmt.Sprintf(format, args...))
	}
	if c.mtls == "" {
		unavailable("ANNALS_TEST_KAFKA_CLUSTER_MTLS is not set")
	}
	m := &MTLSCluster{Brokers: strings.Split(c.mtls, ",")}
	if len(m.Brokers) != ClusterReplicas {
		unavailable("ANNALS_TEST_KAFKA_CLUSTER_MTLS names no %d brokers (%q)", ClusterReplicas, c.mtls)
	}
	pair := func(name string) KeyPair {
		t.Helper()
		p := KeyPair{Cert: filepath.Join(c.certs, name+".pem"), Key: filepath.Join(c.certs, name+".key")}
		for _, f := range []string{p.Cert, p.Key} {
			if _, err := os.Stat(f); err != nil {
				unavailable("%v", err)
			}
		}
		return p
	}
	m.Client, m.Expired, m.Foreign = pair("client"), pair("expired-client"), pair("foreign-client")
	for _, b := range m.Brokers {
		conn, err := net.DialTimeout("tcp", b, 3*time.Second)
		if err != nil {
			unavailable("broker %s does not answer (%v)", b, err)
		}
		conn.Close()
	}
	return m
}

// Password is the user's password, read from PasswordFile.
func (c *TestCluster) Password(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		t.Fatalf("the cluster's password file: %v", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSuffix(pw, "\r")
}

// ClientOptions are the franz-go options of a client of the cluster:
// SCRAM-SHA-512 as User, over TLS checked against CA.
func (c *TestCluster) ClientOptions(t testing.TB) []kgo.Opt {
	t.Helper()
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatalf("the cluster's CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", c.CA)
	}
	return []kgo.Opt{kgo.SeedBrokers(c.Brokers...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: c.User, Pass: c.Password(t)}.AsSha512Mechanism())}
}

// Admin returns an admin client of the cluster, closed when t ends.
func (c *TestCluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(c.ClientOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// Prefix is the package's Prefix for the cluster: a name prefix unique to
// the call, whose topics and groups are deleted when t ends.
func (c *TestCluster) Prefix(t testing.TB, name string) string {
	t.Helper()
	prefix := fmt.Sprintf("annals-%s-%d-", name, time.Now().UnixNano())
	opts := c.ClientOptions(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		if groups, err := adm.ListGroups(ctx); err == nil {
			var mine []string
			for _, g := range groups.Groups() {
				if strings.HasPrefix(g, prefix) {
					mine = append(mine, g)
				}
			}
			if len(mine) > 0 {
				_, _ = adm.DeleteGroups(ctx, mine...) // a killed member's group expires later
			}
		}
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			t.Errorf("listing the test's topics (%s*): %v", prefix, err)
			return
		}
		var mine []string
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, prefix) {
				mine = append(mine, name)
			}
		}
		if len(mine) > 0 {
			if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
				t.Errorf("deleting the test's topics (%s*): %v", prefix, err)
			}
		}
	})
	return prefix
}

// CreateTopic creates topic with the given number of partitions,
// replicated on every broker, and waits until each partition's replicas
// are all in sync. With a leader (a broker's id), every partition has
// that broker as its preferred, and so first, leader.
func (c *TestCluster) CreateTopic(t testing.TB, topic string, partitions int32, leader ...int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(c.ClientOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, ClusterReplicas
	if len(leader) > 0 {
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
		replicas := []int32{leader[0]}
		for id := int32(1); id <= ClusterReplicas; id++ {
			if id != leader[0] {
				replicas = append(replicas, id)
			}
		}
		for p := range partitions {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition, a.Replicas = p, replicas
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating topic %s: %v", topic, err)
	}
	c.WaitInSync(t, topic)
}

// Leaders returns the leader of each partition of topic.
func (c *TestCluster) Leaders(t testing.TB, topic string) map[int32]int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	md, err := c.Admin(t).Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		t.Fatalf("metadata of %s: %v", topic, td.Err)
	}
	out := map[int32]int32{}
	for p, pd := range td.Partitions {
		out[p] = pd.Leader
	}
	return out
}

// WaitInSync waits, at most three minutes, until every partition of topic
// has a leader and all its replicas in sync.
func (c *TestCluster) WaitInSync(t testing.TB, topic string) {
	t.Helper()
	adm := c.Admin(t)
	deadline := time.Now().Add(3 * time.Minute)
	last := "no metadata yet"
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		md, err := adm.Metadata(ctx, topic)
		cancel()
		if err == nil {
			td := md.Topics[topic]
			ok := td.Err == nil && len(td.Partitions) > 0
			for _, pd := range td.Partitions {
				if pd.Leader < 0 || len(pd.ISR) < ClusterReplicas {
					ok = false
					last = fmt.Sprintf("partition %d: leader %d, in sync %v of %v", pd.Partition, pd.Leader, pd.ISR, pd.Replicas)
				}
			}
			if ok {
				return
			}
			if td.Err != nil {
				last = td.Err.Error()
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: replicas not all in sync after 3 minutes: %s", topic, last)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Pid is the process id of broker id, 0 when it does not run.
func (c *TestCluster) Pid(id int32) int {
	b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("kafka-cluster.%d.pid", id)))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid) {
		return 0
	}
	return pid
}

// Kill sends SIGKILL to broker id and waits until its process is gone;
// the first Kill of a test registers a cleanup that brings every broker
// back (Up).
func (c *TestCluster) Kill(t testing.TB, id int32) {
	t.Helper()
	pid := c.Pid(id)
	if pid == 0 {
		t.Fatalf("broker %d does not run", id)
	}
	t.Cleanup(func() { c.Up(t) })
	if err := sigkill(pid); err != nil {
		t.Fatalf("killing broker %d (pid %d): %v", id, pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("broker %d (pid %d) still there 30 s after SIGKILL", id, pid)
		}
		time.Sleep(50 * time.Millisecond) // no signal tells a foreign process's end
	}
}

// Up starts every broker that does not run (`scripts/services up
// kafka-cluster`), or only those of ids, and returns once they are ready.
func (c *TestCluster) Up(t testing.TB, ids ...int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.script, "up", ClusterService)
	if len(ids) > 0 {
		var only []string
		for _, id := range ids {
			only = append(only, strconv.Itoa(int(id)))
		}
		cmd.Env = append(os.Environ(), "ANNALS_KAFKA_CLUSTER_BROKERS="+strings.Join(only, " "))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/services up %s: %v\n%s", ClusterService, err, out)
	}
}
