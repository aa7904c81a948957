package cassandra_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// Added is the event of the Pekko program in testdata/pekko
// (annals.interop.Added, serialized by Pekko's jackson-json).
type Added struct {
	Item string `json:"item"`
}

// pekkoDir holds the Maven module of the Pekko program.
var pekkoDir = filepath.Join("testdata", "pekko")

// pekko builds the Pekko program (once per run of the package's tests:
// Maven skips an up-to-date build) and returns a function that runs it
// with arguments and returns its standard output's lines. The JVM starts
// fast (C1 only): the interop test runs short programs.
func pekko(t *testing.T) func(args ...string) []string {
	return pekkoWith(t, 2*time.Minute, "-Xmx512m", "-XX:TieredStopAtLevel=1")
}

// pekkoWith is pekko with the JVM's options and each run's time limit.
// It skips t when Java or Maven is missing, and fails it when
// ANNALS_TEST_REQUIRE lists cassandra.
func pekkoWith(t testing.TB, limit time.Duration, jvm ...string) func(args ...string) []string {
	t.Helper()
	for _, tool := range []string{"mvn", "java"} {
		if _, err := exec.LookPath(tool); err != nil {
			if cassandratest.Required() {
				t.Fatalf("the Pekko program needs %s (Java 17 and Maven): %v", tool, err)
			}
			t.Skipf("no %s: the Pekko program needs Java 17 and Maven", tool)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "mvn", "-q", "-B", "package")
	build.Dir = pekkoDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the Pekko program (mvn -q -B package in %s; the first build downloads Pekko from Maven Central): %v\n%s", pekkoDir, err, out)
	}
	return func(args ...string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		cmd := exec.CommandContext(ctx, "java", append(append(slices.Clone(jvm),
			"-Ddatastax-java-driver.basic.contact-points.0="+cassandratest.Address(),
			"-cp", "target/classes:target/dependency/*", "annals.interop.Main"), args...)...)
		cmd.Dir = pekkoDir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("pekko %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
		}
		return strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	}
}

// TestPekkoSharesAKeyspace: a Pekko Persistence Cassandra 1.1 service and
// Annals share one keyspace both ways. Events Pekko wrote through a typed
// EventSourcedBehavior are replayed by Annals (decoded through the
// registry: jackson-json's id, the class name as manifest) and found by its
// events by tag; events Annals wrote are recovered by Pekko and found by
// Pekko's eventsByTag; an id started by either is continued by the other,
// with tag sequence numbers that continue across them.
func TestPekkoSharesAKeyspace(t *testing.T) {
	s := cassandratest.Open(t, cassandra.WithBucketSize(cassandra.Hour), cassandra.WithEventualConsistencyDelay(0),
		cassandra.WithFirstTimeBucket(time.Now().Add(-24*time.Hour)))
	run := pekko(t)
	ks := s.Keyspace()
	reg := serialization.NewRegistry()
	if err := serialization.RegisterJSON[Added](reg, "annals.interop.Added"); err != nil {
		t.Fatal(err)
	}
	items := func(pid string) []string {
		t.Helper()
		var out []string
		for r, err := range s.Journal().Replay(t.Context(), pid, 1, 1<<62, 1<<62) {
			if err != nil {
				t.Fatal(err)
			}
			v, err := reg.DeserializeRepr(r)
			if err != nil {
				t.Fatalf("decode %s %d (serializer %d, manifest %q): %v", pid, r.SequenceNr, r.SerializerID, r.Manifest, err)
			}
			out = append(out, v.(Added).Item)
		}
		return out
	}
	// write persists items of pid through Annals, as an entity would after
	// recovering: highest number first.
	write := func(pid string, tags []string, values ...string) {
		t.Helper()
		highest, err := s.Journal().HighestSequenceNr(t.Context(), pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := journal.AtomicWrite{PersistenceID: pid}
		for i, v := range values {
			payload, id, manifest, err := reg.Serialize(Added{Item: v})
			if err != nil {
				t.Fatal(err)
			}
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: highest + int64(i) + 1, Payload: payload, SerializerID: id, Manifest: manifest, Tags: tags})
		}
		mustWriteAll(t, s.Journal(), w)
	}
	byTagItems := func(tag string) []string {
		t.Helper()
		var out []string
		for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			v, err := reg.DeserializeRepr(env.Repr())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, env.PersistenceID+" "+v.(Added).Item)
		}
		return out
	}

	// Pekko starts Cart|p1; Annals reads it and continues it.
	if got := run("write", ks, "Cart|p1", "interop,cart-a", "a", "b", "c"); !slices.Equal(got, []string{"recovered ", "written 3"}) {
		t.Fatalf("pekko write: %q", got)
	}
	if got := items("Cart|p1"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Annals replays Pekko's events as %v, want [a b c]", got)
	}
	if got := byTagItems("cart-a"); !slices.Equal(got, []string{"Cart|p1 a", "Cart|p1 b", "Cart|p1 c"}) {
		t.Errorf("Annals' events by tag of Pekko's rows: %v", got)
	}
	write("Cart|p1", []string{"interop"}, "d")

	// Annals starts Cart|g1; Pekko recovers and continues it.
	write("Cart|g1", []string{"interop"}, "x", "y")
	if got := run("recover", ks, "Cart|p1"); !slices.Equal(got, []string{"recovered a,b,c,d"}) {
		t.Errorf("Pekko recovers Cart|p1 as %q, want a,b,c,d", got)
	}
	if got := run("write", ks, "Cart|g1", "interop", "z"); !slices.Equal(got, []string{"recovered x,y", "written 1"}) {
		t.Errorf("Pekko continues Cart|g1: %q, want it to recover x,y and write 1", got)
	}
	if got := items("Cart|g1"); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Errorf("Annals replays Cart|g1 as %v, want [x y z]", got)
	}

	// Annals writes Cart|far from 1,000,001 (two partitions in, as a copy
	// of a journal whose first million events were deleted does): Pekko
	// recovers it, starting where the deleted-to mark says, and continues
	// it; Annals reads what Pekko wrote after it.
	far := journal.AtomicWrite{PersistenceID: "Cart|far"}
	for i, v := range []string{"f1", "f2"} {
		payload, id, manifest, err := reg.Serialize(Added{Item: v})
		if err != nil {
			t.Fatal(err)
		}
		far.Events = append(far.Events, journal.Repr{PersistenceID: "Cart|far", SequenceNr: 1_000_001 + int64(i), Payload: payload, SerializerID: id, Manifest: manifest})
	}
	mustWriteAll(t, s.Journal(), far)
	if got := run("write", ks, "Cart|far", "", "f3"); !slices.Equal(got, []string{"recovered f1,f2", "written 1"}) {
		t.Errorf("Pekko continues Cart|far: %q, want it to recover f1,f2 and write 1", got)
	}
	if got := items("Cart|far"); !slices.Equal(got, []string{"f1", "f2", "f3"}) {
		t.Errorf("Annals replays Cart|far as %v, want [f1 f2 f3]", got)
	}
	if n, err := s.Journal().HighestSequenceNr(t.Context(), "Cart|far", 0); err != nil || n != 1_000_003 {
		t.Errorf("HighestSequenceNr of Cart|far = %d, %v; want 1000003", n, err)
	}

	// Both sides' events by tag see all seven events, each id's in order.
	perID := func(lines []string, field func(string) (string, string)) map[string][]string {
		out := map[string][]string{}
		for _, l := range lines {
			id, item := field(l)
			out[id] = append(out[id], item)
		}
		return out
	}
	want := map[string][]string{"Cart|p1": {"a", "b", "c", "d"}, "Cart|g1": {"x", "y", "z"}}
	pekkoLines := run("tag", ks, "interop", "7")
	gotPekko := perID(pekkoLines, func(l string) (string, string) {
		f := strings.Fields(l) // PID SEQNR ITEM OFFSET
		if len(f) < 3 {
			t.Fatalf("pekko tag line %q", l)
		}
		return f[0], f[2]
	})
	gotAnnals := perID(byTagItems("interop"), func(l string) (string, string) {
		id, item, _ := strings.Cut(l, " ")
		return id, item
	})
	for id, w := range want {
		if !slices.Equal(gotPekko[id], w) {
			t.Errorf("Pekko's eventsByTag for %s: %v, want %v (all: %q)", id, gotPekko[id], w, pekkoLines)
		}
		if !slices.Equal(gotAnnals[id], w) {
			t.Errorf("Annals' events by tag for %s: %v, want %v", id, gotAnnals[id], w)
		}
	}
}
