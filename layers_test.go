package annals_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// layers is the import policy of ARCHITECTURE.md: for each package of the
// module, the packages of the module it may import (paths relative to the
// module; "." is the root). A package missing here, or an import not
// listed, fails TestLayers: change the policy here and in ARCHITECTURE.md
// together. Programs (cmd/..., examples/...) may import anything.
var layers = map[string][]string{
	".":             {},
	"journal":       {},
	"snapshot":      {},
	"durable":       {},
	"membership":    {},
	"query":         {"journal"},
	"recovery":      {"journal", "snapshot"},
	"serialization": {"journal", "snapshot"},
	"offsets":       {"query"},
	"admin":         {"journal", "offsets", "query"},

	"internal/hooks": {},
	// A wake-up once after a delay, shared by the cluster members.
	"internal/wake": {},
	// Finds the interoperability fixtures beside the checkout (a test helper).
	"internal/fixtures":   {},
	"internal/clientauth": {},
	// Certificates for the tests of TLS connections (a test helper).
	"internal/testcerts": {},
	// Where scripts/services is, for the tests that kill servers (a test helper).
	"internal/servicescript": {},
	// The outage drill the stores' tests run (a test helper).
	"internal/outagetest": {"engine", "entity", "examples/bank", "journal", "serialization", "snapshot"},
	"restart":             {},
	"engine":              {"durable", "internal/hooks", "journal", "recovery", "snapshot"},
	"storetest":           {".", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"entity":              {".", "durable", "engine", "internal/hooks", "journal", "recovery", "restart", "serialization", "snapshot"},
	"projection":          {".", "internal/hooks", "offsets", "query", "restart", "serialization"},
	"otelannals":          {"cluster", "engine", "entity", "membership", "projection", "query"},
	"delivery":            {".", "entity"},
	"cluster":             {".", "internal/hooks", "internal/wake", "journal", "membership"},

	"store/memory":             {".", "durable", "journal", "membership", "offsets", "query", "snapshot"},
	"store/sqlite":             {".", "admin", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"store/postgres":           {".", "admin", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"store/cassandra":          {".", "admin", "durable", "internal/clientauth", "journal", "membership", "query", "snapshot"},
	"store/kafka":              {".", "admin", "journal", "query", "recovery", "serialization", "snapshot", "store/kafka/eventual", "store/kafka/wire"},
	"store/kafka/wire":         {},
	"store/kafka/eventual":     {"store/kafka/wire"},
	"store/kafka/eventual/cql": {"store/kafka/eventual"},
	"store/kafka/eventual/pg":  {"store/kafka/eventual"},
	"store/kafka/kafkatest":    {"internal/servicescript", "journal", "store/kafka", "store/kafka/eventual"},
	// The Kafka journal's failure tests on the cluster of three brokers
	// (tests only; no code of its own).
	"store/kafka/clustertest": {},
	// Entities shared out by the Kafka journal's consumer group.
	"store/kafka/kafkacluster":      {".", "cluster", "internal/wake", "journal", "membership", "store/kafka"},
	"store/kafka/wire/wiretest":     {"internal/fixtures", "store/kafka/wire"},
	"store/postgres/pgtest":         {"store/postgres", "storetest"},
	"store/cassandra/cassandratest": {"internal/servicescript", "internal/testcerts", "store/cassandra"},
	// Above every store: one URL opens a whole stack.
	"stores": {"admin", "durable", "internal/clientauth", "journal", "membership", "offsets", "query", "snapshot", "store/cassandra", "store/kafka", "store/kafka/eventual", "store/kafka/eventual/cql", "store/kafka/eventual/pg", "store/memory", "store/postgres", "store/sqlite"},

	"store/kafka/eventual/eventualtest":      {"store/kafka/eventual", "store/kafka/wire", "store/kafka/wire/wiretest"},
	"store/kafka/eventual/cql/cqltest":       {"store/cassandra/cassandratest", "store/kafka/eventual/cql"},
	"store/kafka/eventual/pg/pgeventualtest": {"store/kafka/eventual/pg", "store/postgres/pgtest"},
	"engine/enginetest":                      {"engine", "journal"},
	"entity/behaviortest":                    {".", "entity", "serialization", "store/memory"},
	"entity/entitytest":                      {"entity", "journal", "serialization", "snapshot", "store/memory"},
	// Real stores for the module's own entity tests (a test helper).
	"internal/entitystores": {"engine", "entity/entitytest", "journal", "snapshot", "store/postgres", "store/postgres/pgtest", "store/sqlite"},
}

// TestLayers checks every package's imports of the module against layers,
// as Go's own go/build deps test does for the standard library.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/annals-go/annals"
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		fields := strings.Fields(line)
		pkg, _ := rel(fields[0])
		if strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "examples/") {
			continue
		}
		allowed, known := layers[pkg]
		if !known {
			t.Errorf("package %s is not in the layering policy (layers_test.go, ARCHITECTURE.md)", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if dep, internal := rel(imp); internal && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s, which the layering policy does not allow (layers_test.go, ARCHITECTURE.md)", pkg, dep)
			}
		}
	}
}

// levels orders the packages of layers from the top (imported by none of
// the module's libraries) to the bottom, as ARCHITECTURE.md's diagram
// draws them: a package may import packages of lower levels only, and of
// its own level only as sameLevel allows.
var levels = [][]string{
	{"entity/entitytest", "entity/behaviortest", "engine/enginetest", "store/postgres/pgtest", "store/kafka/eventual/pg/pgeventualtest",
		"store/cassandra/cassandratest", "store/kafka/eventual/cql/cqltest", "store/kafka/kafkatest", "store/kafka/wire/wiretest",
		"store/kafka/eventual/eventualtest", "internal/outagetest", "internal/entitystores", "store/kafka/clustertest"},
	{"otelannals"},
	{"cluster", "store/kafka/kafkacluster", "delivery", "entity", "projection", "stores"},
	{"engine", "storetest", "store/memory", "store/sqlite", "store/postgres", "store/cassandra", "store/kafka",
		"store/kafka/eventual", "store/kafka/eventual/cql", "store/kafka/eventual/pg", "store/kafka/wire"},
	{"admin"},
	{"offsets"},
	{"query", "recovery", "serialization"},
	{"journal", "snapshot", "durable", "membership"},
	{".", "restart", "internal/hooks", "internal/wake", "internal/fixtures", "internal/clientauth", "internal/testcerts", "internal/servicescript"},
}

// sameLevel lists the imports allowed within a level (test helpers may
// import each other: helperLevel).
var sameLevel = map[string][]string{
	"delivery":                 {"entity"},
	"store/kafka/kafkacluster": {"cluster"},
	"store/kafka":              {"store/kafka/eventual", "store/kafka/wire"},
	"store/kafka/eventual":     {"store/kafka/wire"},
	"store/kafka/eventual/cql": {"store/kafka/eventual"},
	"store/kafka/eventual/pg":  {"store/kafka/eventual"},
}

// helperLevel is the level of the test helpers.
const helperLevel = 0

// TestLevels: every package of the policy has one level, and every import
// the policy allows goes down the levels (or across as sameLevel says).
func TestLevels(t *testing.T) {
	level := map[string]int{}
	for i, pkgs := range levels {
		for _, p := range pkgs {
			if _, dup := level[p]; dup {
				t.Errorf("package %s is in two levels", p)
			}
			level[p] = i
		}
	}
	for pkg, allowed := range layers {
		l, ok := level[pkg]
		if !ok {
			t.Errorf("package %s has no level (layers_test.go levels, ARCHITECTURE.md's diagram)", pkg)
			continue
		}
		for _, dep := range allowed {
			d, ok := level[dep]
			switch {
			case !ok && strings.HasPrefix(dep, "examples/"):
				// internal/outagetest drives examples/bank (ARCHITECTURE.md).
			case !ok:
				t.Errorf("%s may import %s, which has no level", pkg, dep)
			case d < l:
				t.Errorf("%s (level %d) may import %s, a level above it (%d)", pkg, l, dep, d)
			case d == l && l != helperLevel && !slices.Contains(sameLevel[pkg], dep):
				t.Errorf("%s may import %s of its own level, which sameLevel does not allow", pkg, dep)
			}
		}
	}
	for p := range level {
		if _, ok := layers[p]; !ok {
			t.Errorf("level lists %s, which the policy (layers) does not", p)
		}
	}
}

// TestArchitectureDiagram: ARCHITECTURE.md's diagram has one section per
// level, below the programs', and names each package in its level's
// section (by its path, or the end of its path).
func TestArchitectureDiagram(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "```\n")
	diagram, _, _ := strings.Cut(rest, "```")
	var sections [][]string
	var words []string
	for line := range strings.Lines(diagram) {
		if strings.HasPrefix(strings.TrimSpace(line), "----") {
			sections = append(sections, words)
			words = nil
			continue
		}
		for _, w := range strings.Fields(line) {
			words = append(words, strings.Trim(w, "(),"))
		}
	}
	sections = append(sections, words)
	if len(sections) != len(levels)+1 {
		t.Fatalf("ARCHITECTURE.md's diagram has %d sections, want the programs' and %d levels", len(sections), len(levels))
	}
	for i, pkgs := range levels {
		for _, p := range pkgs {
			name := p
			if p == "." {
				name = "annals"
			}
			if !slices.ContainsFunc(sections[i+1], func(w string) bool { return w == name || strings.HasSuffix(name, "/"+w) }) {
				t.Errorf("ARCHITECTURE.md's diagram does not name %s in section %d (%s)", p, i+1, strings.Join(sections[i+1][:min(4, len(sections[i+1]))], " "))
			}
		}
	}
}
