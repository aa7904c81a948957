package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestWriteNotifies: a write call sends one NOTIFY on the store's channel
// (its insert statement carries it), tagged or not, sent again as one
// statement per atomic write (a write whose data the server refuses among
// others), and fenced (after the lease check), in each layout and
// ordering; with WithNotify(false) it sends none. After each call the
// test sends a probe of its own on the channel: the notifications before
// the probe are the call's.
func TestWriteNotifies(t *testing.T) {
	t.Parallel()
	for _, c := range layoutsAndOrderings {
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
				m := s.Membership()
				cluster, holder := "notify", membership.Holder{Name: "a", Incarnation: "1"}
				if err := m.Join(ctx, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:1"}, time.Minute); err != nil {
					t.Fatal(err)
				}
				lease, err := m.Acquire(ctx, cluster, "r0", holder, membership.MinTTL)
				if err != nil {
					t.Fatal(err)
				}
				token := journal.FenceToken{Store: m, Cluster: cluster, Lease: "r0", Holder: holder.Name, HolderIncarnation: holder.Incarnation, Epoch: lease.Epoch}
				for k, call := range []struct {
					name    string
					tags    []string
					refused bool // a write the server refuses is among the call's: one statement per write
					fenced  bool
				}{
					{name: "untagged"},
					{name: "tagged", tags: []string{"blue", "red"}},
					{name: "one statement per write", refused: true},
					{name: "fenced", fenced: true},
				} {
					pid := fmt.Sprint("Notify|", k)
					w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{
						{PersistenceID: pid, SequenceNr: 1, Payload: []byte("a"), Tags: call.tags},
						{PersistenceID: pid, SequenceNr: 2, Payload: []byte("b"), Tags: call.tags},
					}}
					other := journal.AtomicWrite{PersistenceID: pid + "x", Events: []journal.Repr{{PersistenceID: pid + "x", SequenceNr: 1, Payload: []byte("c")}}}
					writes := []journal.AtomicWrite{w, other}
					if call.refused {
						bad := journal.AtomicWrite{PersistenceID: pid + "bad", Events: []journal.Repr{{PersistenceID: pid + "bad", SequenceNr: 1, Payload: []byte("d"), Manifest: "nul\x00byte"}}}
						writes = []journal.AtomicWrite{w, bad, other}
					}
					var res []error
					var err error
					if call.fenced {
						res, err = s.Journal().WriteFenced(ctx, writes, []journal.FenceToken{token, token})
					} else {
						res, err = s.Journal().Write(ctx, writes)
					}
					if err != nil {
						t.Fatalf("%s: %v", call.name, err)
					}
					for i, e := range res {
						if refusedOne := call.refused && i == 1; (e != nil) != refusedOne {
							t.Fatalf("%s: write %d: %v", call.name, i, e)
						}
					}
					if call.refused && res == nil {
						t.Fatalf("%s: the write the server refuses was stored", call.name)
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
						t.Errorf("%s: %d notifications %q before the probe, want %d", call.name, len(before), before, want)
					}
				}
			})
		}
	}
}
