package annals_test

import (
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
	// Finds the interoperability fixtures beside the checkout (a test helper).
	"internal/fixtures": {},
	// The outage drill the stores' tests run (a test helper).
	"internal/outagetest": {"engine", "entity", "examples/bank", "journal", "serialization", "snapshot"},
	"restart":             {},
	"engine":              {"internal/hooks", "journal", "recovery", "snapshot"},
	"storetest":           {".", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"entity":              {".", "durable", "engine", "internal/hooks", "journal", "recovery", "restart", "serialization", "snapshot"},
	"projection":          {".", "internal/hooks", "offsets", "query", "restart", "serialization"},
	"otelannals":          {"cluster", "engine", "entity", "membership", "projection", "query"},
	"delivery":            {".", "entity"},
	"cluster":             {".", "internal/hooks", "membership"},

	"store/memory":             {".", "durable", "journal", "membership", "offsets", "query", "snapshot"},
	"store/sqlite":             {".", "admin", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"store/postgres":           {".", "admin", "durable", "journal", "membership", "offsets", "query", "recovery", "snapshot"},
	"store/cassandra":          {".", "admin", "durable", "journal", "membership", "query", "snapshot"},
	"store/kafka":              {".", "admin", "journal", "query", "recovery", "serialization", "snapshot", "store/kafka/eventual", "store/kafka/wire"},
	"store/kafka/wire":         {},
	"store/kafka/eventual":     {"store/kafka/wire"},
	"store/kafka/eventual/cql": {"store/kafka/eventual"},
	"store/kafka/eventual/pg":  {"store/kafka/eventual"},
	"store/kafka/kafkatest":    {"store/kafka"},
	// Entities shared out by the Kafka journal's consumer group.
	"store/kafka/kafkacluster":      {".", "cluster", "internal/hooks", "membership", "store/kafka"},
	"store/kafka/wire/wiretest":     {"internal/fixtures", "store/kafka/wire"},
	"store/postgres/pgtest":         {"store/postgres"},
	"store/cassandra/cassandratest": {"store/cassandra"},
	// Above every store: one URL opens a whole stack.
	"stores": {"admin", "durable", "journal", "membership", "offsets", "query", "snapshot", "store/cassandra", "store/kafka", "store/kafka/eventual", "store/kafka/eventual/cql", "store/kafka/eventual/pg", "store/memory", "store/postgres", "store/sqlite"},

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
