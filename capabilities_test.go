package annals_test

import (
	"database/sql"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/sqlite"
	"github.com/annals-go/annals/storetest"
)

// capability is an interface a store may implement, with the suites of
// the compliance kit that check it ("" when none does): the names of the
// suites storetest.Run runs, or an exported function of package
// storetest.
type capability struct {
	name  string
	iface reflect.Type
	suite string
}

func ifaceOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// capabilities is the index of what a store may implement.
var capabilities = []capability{
	{"journal.Journal", ifaceOf[journal.Journal](), "journal, RunJournalAcross"},
	{"journal.FencedWriter", ifaceOf[journal.FencedWriter](), "fenced-writes"},
	{"snapshot.Store", ifaceOf[snapshot.Store](), "snapshots"},
	{"recovery.Reader", ifaceOf[recovery.Reader](), "recovery"},
	{"recovery.BatchReader", ifaceOf[recovery.BatchReader](), "recovery"},
	{"query.EventsByPersistenceIDQuery", ifaceOf[query.EventsByPersistenceIDQuery](), "queries"},
	{"query.EventsByTagQuery", ifaceOf[query.EventsByTagQuery](), "queries, batch-queries"},
	{"query.EventsBySlicesQuery", ifaceOf[query.EventsBySlicesQuery](), "queries, batch-queries"},
	{"query.PersistenceIDsQuery", ifaceOf[query.PersistenceIDsQuery](), "queries"},
	{"offsets.Store", ifaceOf[offsets.Store](), "offsets"},
	{"offsets.TxStore (its own Tx)", nil, "offsets"},
	{"durable.Store", ifaceOf[durable.Store](), "durable"},
	{"durable.Batcher", ifaceOf[durable.Batcher](), "durable"},
	{"query.DurableStateChangesBySlicesQuery", ifaceOf[query.DurableStateChangesBySlicesQuery](), "durable"},
	{"query.DurableStateChangesByTagQuery", ifaceOf[query.DurableStateChangesByTagQuery](), "durable"},
	{"membership.Store", ifaceOf[membership.Store](), "membership, RunMembershipAcross"},
	{"membership.TxChecker (its own Tx)", nil, ""},
	{"admin.Migrator", ifaceOf[admin.Migrator](), ""},
	{"admin.StatsReader", ifaceOf[admin.StatsReader](), ""},
	{"admin.ProjectionLister", ifaceOf[admin.ProjectionLister](), ""},
	{"admin.BacklogReader", ifaceOf[admin.BacklogReader](), ""},
	{"admin.IntegrityChecker", ifaceOf[admin.IntegrityChecker](), ""},
	{"admin.Purger", ifaceOf[admin.Purger](), ""},
	{"admin.SerializerRewriter", ifaceOf[admin.SerializerRewriter](), ""},
	{"admin.BaselineOpener", ifaceOf[admin.BaselineOpener](), ""},
}

// storeParts are the values each store hands out (by their types).
var storeParts = []struct {
	name  string
	parts []reflect.Type
	tx    map[string]reflect.Type // offsets.TxStore / membership.TxChecker with the store's Tx
}{
	{"memory", types(new(memory.Store), new(memory.Journal), new(memory.Snapshots), new(memory.Queries), new(memory.Projections), new(memory.DurableState), new(memory.Membership)),
		map[string]reflect.Type{"offsets.TxStore (its own Tx)": ifaceOf[offsets.TxStore[*memory.Tx]]()}},
	{"sqlite", types(new(sqlite.Store), new(sqlite.Journal), new(sqlite.Snapshots), new(sqlite.Queries), new(sqlite.Projections), new(sqlite.DurableState), new(sqlite.Membership), new(sqlite.Migrator)),
		map[string]reflect.Type{"offsets.TxStore (its own Tx)": ifaceOf[offsets.TxStore[*sql.Tx]](), "membership.TxChecker (its own Tx)": ifaceOf[membership.TxChecker[*sql.Tx]]()}},
	{"postgres", types(new(postgres.Store), new(postgres.Journal), new(postgres.Snapshots), new(postgres.Queries), new(postgres.Projections), new(postgres.DurableState), new(postgres.Membership), new(postgres.Migrator)),
		map[string]reflect.Type{"offsets.TxStore (its own Tx)": ifaceOf[offsets.TxStore[pgx.Tx]](), "membership.TxChecker (its own Tx)": ifaceOf[membership.TxChecker[pgx.Tx]]()}},
	{"cassandra", types(new(cassandra.Store), new(cassandra.Journal), new(cassandra.Snapshots), new(cassandra.ReadJournal), new(cassandra.DurableState), new(cassandra.Membership), new(cassandra.Migrator)), nil},
	{"kafka", types(new(kafka.Journal), new(kafka.ReadJournal)), nil},
}

func types(vs ...any) []reflect.Type {
	out := make([]reflect.Type, len(vs))
	for i, v := range vs {
		out[i] = reflect.TypeOf(v)
	}
	return out
}

// offers reports whether one of a store's parts implements c.
func offers(c capability, parts []reflect.Type, tx map[string]reflect.Type) bool {
	iface := c.iface
	if iface == nil {
		iface = tx[c.name]
		if iface == nil {
			return false
		}
	}
	return slices.ContainsFunc(parts, func(t reflect.Type) bool { return t.Implements(iface) })
}

// TestStoreCapabilitiesTable: the table "What each store offers" in
// docs/stores.md is the one the stores' types give: every interface a
// store may implement, the kit's suites that check it (suites the kit
// has), and which store
// implements it (by type, through its parts: Journal(), Snapshots(),
// Queries() or ReadJournal(), Projections(), DurableState(), Membership(),
// the store itself for the admin capabilities, and its Migrator).
func TestStoreCapabilitiesTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("| capability | kit suite | memory | sqlite | postgres | cassandra | kafka |\n|---|---|---|---|---|---|---|\n")
	for _, c := range capabilities {
		suite := "—"
		if c.suite != "" {
			var names []string
			for name := range strings.SplitSeq(c.suite, ", ") {
				if strings.HasPrefix(name, "Run") {
					names = append(names, "`storetest."+name+"`")
					continue
				}
				// The kit refuses an exception naming a suite it has not.
				if _, err := storetest.Check(t.Context(), storetest.Store{Exceptions: map[string]string{name: "checking the name"}}, storetest.Options{}); err != nil {
					t.Errorf("%s: %v", c.name, err)
				}
				names = append(names, "`"+name+"`")
			}
			suite = strings.Join(names, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s |", c.name, suite)
		for _, s := range storeParts {
			mark := " "
			if offers(c, s.parts, s.tx) {
				mark = " ✓ "
			}
			b.WriteString(mark + "|")
		}
		b.WriteString("\n")
	}
	want := b.String()
	doc, err := os.ReadFile("docs/stores.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- capabilities -->\n(.*?)<!-- /capabilities -->`).FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/stores.md has no <!-- capabilities --> table; it should be:\n%s", want)
	}
	if string(m[1]) != want {
		t.Errorf("docs/stores.md's capabilities table differs from the stores' types; it should be:\n%s", want)
	}
}
