package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestWriteNotifies: a write call sends one NOTIFY on the store's channel
// (its insert statement carries it), tagged or not, in each layout and
// ordering; with WithNotify(false) it sends none. After each write the
// test sends a probe of its own on the channel: the notifications before
// the probe are the write's.
func TestWriteNotifies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts []postgres.Option
	}{
		{"annals/commit", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}},
		{"annals/timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
	} {
		for _, notify := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/notify=%t", c.name, notify), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				s := open(t, append(c.opts, postgres.WithNotify(notify))...)
				channel := postgres.Channel(s)
				listener, err := pgx.Connect(ctx, pgtest.DSN())
				if err != nil {
					t.Fatal(err)
				}
				defer listener.Close(context.Background())
				if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
					t.Fatal(err)
				}
				for k, tags := range [][]string{nil, {"blue", "red"}} {
					pid := fmt.Sprint("Notify|", k)
					w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{
						{PersistenceID: pid, SequenceNr: 1, Payload: []byte("a"), Tags: tags},
						{PersistenceID: pid, SequenceNr: 2, Payload: []byte("b"), Tags: tags},
					}}
					other := journal.AtomicWrite{PersistenceID: pid + "x", Events: []journal.Repr{{PersistenceID: pid + "x", SequenceNr: 1, Payload: []byte("c")}}}
					if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w, other}); err != nil || res != nil {
						t.Fatal(res, err)
					}
					probe := fmt.Sprint("probe-", k)
					if _, err := s.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, channel, probe); err != nil {
						t.Fatal(err)
					}
					var before []string
					for {
						n, err := listener.WaitForNotification(ctx)
						if err != nil {
							t.Fatal(err)
						}
						if n.Payload == probe {
							break
						}
						before = append(before, n.Payload)
					}
					want := 0
					if notify {
						want = 1
					}
					if len(before) != want {
						t.Errorf("write %d (tags %v): %d notifications %q before the probe, want %d", k, tags, len(before), before, want)
					}
				}
			})
		}
	}
}
