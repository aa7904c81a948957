package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

func initCommand() *command {
	return schemaCommand("init", true, "create a store's schema (or upgrade it)",
		`Creates the store (for SQLite, the database file) and its schema, or
upgrades an existing schema as migrate does. Running it on a current
schema changes nothing. --dry-run prints the SQL it would run and changes
nothing (it does not create the file). For PostgreSQL, --layout r2dbc
creates the tables of Akka and Pekko Persistence R2DBC instead of Annals'
own, to share them with a JVM service (the URL parameter layout=r2dbc
does the same).`,
		[]string{
			"annals init --store sqlite:./annals.db",
			"annals init --store sqlite:./annals.db --dry-run",
			"annals init --store 'postgres://app@db/app?schema=orders' --layout r2dbc",
		})
}

func migrateCommand() *command {
	return schemaCommand("migrate", false, "upgrade a store's schema to this version of annals",
		`Upgrades the schema of an existing store to the version this annals
writes. Reading commands refuse a store whose schema is older, and
applications migrate on open; migrate lets you do it deliberately, and
--dry-run prints the SQL first without changing anything.`,
		[]string{
			"annals migrate --store sqlite:./annals.db --dry-run",
			"annals migrate --store sqlite:./annals.db",
		})
}

func schemaCommand(name string, create bool, summary, what string, examples []string) *command {
	return &command{
		name: name, summary: summary,
		help: what + `

--json prints {"store": "URL", "from_version": N, "to_version": N,
"dry_run": bool, "steps": [{"from": N, "to": N, "sql": "..." (dry runs
only)}]}; steps are those run (or, with --dry-run, those that would run).`,
		examples: examples,
		maxArgs:  0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			dry := fs.Bool("dry-run", false, "print the SQL that would run; change nothing")
			layout := new(string)
			if create {
				layout = fs.String("layout", "", "the `LAYOUT` of a PostgreSQL schema: annals (the default) or r2dbc (Akka's and Pekko's R2DBC tables); a schema holding the other is refused")
			}
			return func(e *env, _ []string) error {
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				if url, err = withLayout(url, *layout); err != nil {
					return err
				}
				m, err := e.mux.Migrator(e.ctx, url)
				if err != nil {
					return err
				}
				if c, ok := m.(io.Closer); ok {
					defer c.Close()
				}
				current, latest, err := m.SchemaVersion(e.ctx)
				if err != nil {
					return err
				}
				if !create && current == 0 && latest > 0 {
					return fmt.Errorf("%s has no Annals schema to upgrade; create it with: annals init --store %s", stores.Redact(url), stores.Redact(url))
				}
				var steps []admin.Migration
				if *dry {
					steps, err = m.PendingMigrations(e.ctx)
				} else {
					steps, err = m.Migrate(e.ctx)
				}
				if err != nil {
					return err
				}
				return printSchemaResult(e, url, current, latest, steps, *dry, *asJSON)
			}
		},
	}
}

func printSchemaResult(e *env, url string, current, latest int, steps []admin.Migration, dry, asJSON bool) error {
	url = stores.Redact(url)
	if asJSON {
		type stepJSON struct {
			From int    `json:"from"`
			To   int    `json:"to"`
			SQL  string `json:"sql,omitempty"`
		}
		out := struct {
			Store  string     `json:"store"`
			From   int        `json:"from_version"`
			To     int        `json:"to_version"`
			DryRun bool       `json:"dry_run"`
			Steps  []stepJSON `json:"steps"`
		}{url, current, latest, dry, []stepJSON{}}
		for _, st := range steps {
			j := stepJSON{From: st.From, To: st.To}
			if dry {
				j.SQL = st.SQL
			}
			out.Steps = append(out.Steps, j)
		}
		return writeJSON(e.stdout, out)
	}
	switch {
	case len(steps) == 0:
		fmt.Fprintf(e.stdout, "%s: schema version %d is current; nothing to do\n", url, current)
	case dry:
		fmt.Fprintf(e.stdout, "-- %s: schema version %d → %d; would run (nothing changed):\n", url, current, latest)
		for _, st := range steps {
			fmt.Fprintf(e.stdout, "\n-- step %d → %d\n%s", st.From, st.To, st.SQL)
			if !strings.HasSuffix(st.SQL, "\n") {
				fmt.Fprintln(e.stdout)
			}
		}
	case current == 0:
		fmt.Fprintf(e.stdout, "%s: created schema version %d\n", url, latest)
	default:
		fmt.Fprintf(e.stdout, "%s: migrated schema version %d → %d (%d steps)\n", url, current, latest, len(steps))
	}
	return nil
}

// withLayout adds the URL parameter layout to a postgres:// URL; an empty
// layout leaves the URL as it is, and other stores have no layouts.
func withLayout(u, layout string) (string, error) {
	if layout == "" {
		return u, nil
	}
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", usagef("--layout is for postgres:// stores, not %s", stores.Redact(u))
	}
	q := parsed.Query()
	q.Set("layout", layout)
	parsed.RawQuery = q.Encode()
	return parsed.String(), nil
}
