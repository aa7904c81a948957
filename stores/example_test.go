package stores_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/stores"
)

// Open a stack on an SQLite file, write an event and read it back, and
// create a read-model table in a transaction of the read model's
// database. On another store only the URL changes (and, on PostgreSQL,
// *sql.Tx becomes pgx.Tx):
//
//	postgres://app@db:5432/app?schema=annals
//	cassandra://127.0.0.1:9042/app?readmodel=sqlite:./readmodel.db
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "stack")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	stack, err := stores.Open(ctx, "sqlite:"+filepath.Join(dir, "app.db"), stores.WithMigrate(true))
	if err != nil {
		log.Fatal(err)
	}
	defer stack.Close()

	pid := "Account|a-1"
	if _, err := stack.Journal.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{
		{PersistenceID: pid, SequenceNr: 1, Payload: []byte(`{"amount":100}`), SerializerID: 31, Manifest: "Deposited", Tags: []string{"accounts"}},
	}}}); err != nil {
		log.Fatal(err)
	}
	for env, err := range stack.Queries.CurrentEventsByPersistenceID(ctx, pid, 1, 100) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(env.PersistenceID, env.SequenceNr, env.Manifest, string(env.Payload))
	}

	readModel, err := stores.ReadModelOf[*sql.Tx](stack) // the offsets, with the read model's transactions
	if err != nil {
		log.Fatal(err)
	}
	err = readModel.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS balances (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`)
		return err
	})
	fmt.Println(stack.Kind, "read model:", stack.ReadModelKind, err)
	// Output:
	// Account|a-1 1 Deposited {"amount":100}
	// sqlite read model: sqlite <nil>
}
