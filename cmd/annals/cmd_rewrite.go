package main

import (
	"flag"
	"fmt"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/serialization"
)

// rewriteJSON is the --json shape of annals rewrite-serializer.
type rewriteJSON struct {
	Store         string `json:"store"`
	From          int32  `json:"from"`
	To            int32  `json:"to"`
	DryRun        bool   `json:"dry_run"`
	Events        int64  `json:"events"`
	Snapshots     int64  `json:"snapshots"`
	DurableStates int64  `json:"durable_states"`
}

func rewriteSerializerCommand() *command {
	return &command{
		name: "rewrite-serializer", summary: "store payloads under another serializer id (33 → 31 for JVM services)",
		help: fmt.Sprintf(`Changes the serializer id stored beside every event, snapshot and durable
state payload from --from to --to, in one transaction, leaving the payloads
as they are. Earlier versions of Annals wrote their JSON under id %d, which
is jackson-cbor's in Akka and Pekko; Annals now writes %d, jackson-json's,
and still reads %d. Before a JVM service reads a store Annals wrote with an
earlier version, rewrite %d to %d (the defaults). Rows of a JVM service
sharing the store are rewritten too if they carry --from: Pekko's own
jackson-cbor payloads are stored under %d, so do not run this on a store a
JVM service writes CBOR to.

It asks on a terminal and refuses without one unless --yes; --dry-run
counts what would change and changes nothing.

--json prints {"store", "from", "to", "dry_run", "events", "snapshots",
"durable_states"}.`, serialization.LegacyJSONID, serialization.JSONID, serialization.LegacyJSONID,
			serialization.LegacyJSONID, serialization.JSONID, serialization.LegacyJSONID),
		examples: []string{
			"annals rewrite-serializer --store sqlite:./annals.db --dry-run",
			"annals rewrite-serializer --store 'postgres://db/app?schema=orders' --yes",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			from := fs.Int("from", int(serialization.LegacyJSONID), "the serializer `ID` to replace")
			to := fs.Int("to", int(serialization.JSONID), "the serializer `ID` to store instead")
			yes := fs.Bool("yes", false, "rewrite without asking")
			dry := fs.Bool("dry-run", false, "count what would change; change nothing")
			return func(e *env, _ []string) error {
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				rw, ok := s.Admin.(admin.SerializerRewriter)
				if !ok {
					return fmt.Errorf("%s: this store cannot rewrite serializer ids", s.Where)
				}
				if !*dry {
					if err := e.confirm(fmt.Sprintf("store every payload of %s under serializer %d instead of %d?", s.Where, *to, *from), *yes); err != nil {
						return err
					}
				}
				r, err := rw.RewriteSerializerID(e.ctx, int32(*from), int32(*to), *dry)
				if err != nil {
					return err
				}
				out := rewriteJSON{Store: s.Where, From: int32(*from), To: int32(*to), DryRun: *dry, Events: r.Events, Snapshots: r.Snapshots, DurableStates: r.DurableStates}
				if *asJSON {
					return writeJSON(e.stdout, out)
				}
				verb := "rewrote"
				if *dry {
					verb = "would rewrite"
				}
				fmt.Fprintf(e.stdout, "%s %s events, %s snapshots and %s durable states from serializer %d to %d\n",
					verb, num(r.Events), num(r.Snapshots), num(r.DurableStates), *from, *to)
				return nil
			}
		},
	}
}
