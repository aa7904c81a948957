// Command quickstart writes, replays and snapshots one bank account's events
// on the embedded SQLite store, without the entity runtime: the storage
// layer as a program.
//
//	go run ./examples/quickstart            # uses ./quickstart.db
//	go run ./examples/quickstart -db x.db   # another file
//
// Run it twice: the second run continues from the stored events.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
)

// Deposited and Withdrawn are the account's events.
type Deposited struct{ Amount int64 }
type Withdrawn struct{ Amount int64 }

// Balance is the account's state, kept in snapshots.
type Balance struct{ Cents int64 }

func main() {
	db := flag.String("db", "quickstart.db", "SQLite database file")
	flag.Parse()
	if err := run(context.Background(), *db); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string) error {
	reg := serialization.NewRegistry()
	for _, err := range []error{
		serialization.RegisterJSON[Deposited](reg, "bank.Deposited"),
		serialization.RegisterJSON[Withdrawn](reg, "bank.Withdrawn"),
		serialization.RegisterJSON[Balance](reg, "bank.Balance"),
	} {
		if err != nil {
			return err
		}
	}

	store, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer store.Close()
	front, err := engine.NewFront(store.Journal(), engine.Config{})
	if err != nil {
		return err
	}
	defer front.Close()

	pid := annals.PersistenceID("Account", "a-1")
	fmt.Printf("account %s (slice %d) in %s\n", pid, annals.Slice(pid), store.Path())

	// 1. Write: one atomic write of two events, then one more event.
	next, err := front.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		return err
	}
	event := func(v any) (journal.Repr, error) {
		next++
		payload, id, manifest, err := reg.Serialize(v)
		return journal.Repr{PersistenceID: pid, SequenceNr: next, Payload: payload, SerializerID: id, Manifest: manifest, WriterID: "quickstart", Tags: []string{"bank"}}, err
	}
	var batch []journal.Repr
	for _, v := range []any{Deposited{Amount: 10_000}, Withdrawn{Amount: 2_500}} {
		e, err := event(v)
		if err != nil {
			return err
		}
		batch = append(batch, e)
	}
	if err := front.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: batch}); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	e, err := event(Deposited{Amount: 125})
	if err != nil {
		return err
	}
	if err := front.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{e}}); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	fmt.Printf("wrote events %d..%d\n", next-2, next)

	// 2. Recover: the latest snapshot, then the events after it.
	state, from := Balance{}, int64(1)
	snap, ok, err := store.Snapshots().Load(ctx, pid, snapshot.Latest())
	if err != nil {
		return err
	}
	if ok {
		v, err := reg.DeserializeSnapshot(snap)
		if err != nil {
			return err
		}
		state, from = v.(Balance), snap.Metadata.SequenceNr+1
		fmt.Printf("snapshot at %d: balance %d\n", snap.Metadata.SequenceNr, state.Cents)
	}
	replayed := 0
	for r, err := range front.Replay(ctx, pid, from, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			return err
		}
		v, err := reg.DeserializeRepr(r)
		if err != nil {
			return err
		}
		switch ev := v.(type) {
		case Deposited:
			state.Cents += ev.Amount
		case Withdrawn:
			state.Cents -= ev.Amount
		default:
			return errors.New("unexpected event type")
		}
		replayed++
	}
	fmt.Printf("replayed %d events from %d: balance %d\n", replayed, from, state.Cents)

	// 3. Snapshot the state at the highest sequence number.
	payload, id, manifest, err := reg.Serialize(state)
	if err != nil {
		return err
	}
	if err := store.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: next}, Payload: payload, SerializerID: id, Manifest: manifest}); err != nil {
		return err
	}
	fmt.Printf("saved snapshot at %d\n", next)
	return nil
}
