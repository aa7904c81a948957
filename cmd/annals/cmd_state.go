package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

// stateJSON is the --json shape of annals state.
type stateJSON struct {
	PersistenceID string    `json:"persistence_id"`
	Found         bool      `json:"found"`
	Revision      int64     `json:"revision,omitempty"`
	Timestamp     time.Time `json:"timestamp,omitzero"`
	SerializerID  int32     `json:"serializer_id,omitempty"`
	Manifest      string    `json:"manifest,omitempty"`
	Tag           string    `json:"tag,omitempty"`
	PayloadSize   int       `json:"payload_size,omitempty"`
	Payload       any       `json:"payload,omitempty"`
	PayloadBase64 []byte    `json:"payload_base64,omitempty"`
}

// errNoDurableState reports a store that keeps no durable state.
var errNoDurableState = errors.New("this store keeps no durable state")

func stateCommand() *command {
	return &command{
		name: "state", args: "ID", summary: "show the durable state of a persistence id",
		help: `Shows the durable state stored for one persistence id (entities made
with entity.NewDurableHost): its revision, when it was stored, serializer,
manifest, tag and payload (shown as events shows payloads). An id with
nothing stored (never written, or deleted) prints so and exits 0.

--json prints {"persistence_id", "found", "revision", "timestamp",
"serializer_id", "manifest", "tag", "payload_size", "payload" or
"payload_base64"}.`,
		examples: []string{
			"annals state --store sqlite:./annals.db 'Profile|p-1'",
			"annals state 'Profile|p-1' --json",
		},
		minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			full := fs.Bool("full", false, "print the whole payload")
			return func(e *env, args []string) error {
				pid := args[0]
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				if s.Durable == nil {
					return fmt.Errorf("%s: %w", s.Where, errNoDurableState)
				}
				o, found, err := s.Durable.Get(e.ctx, pid)
				if err != nil {
					return err
				}
				if *asJSON {
					out := stateJSON{PersistenceID: pid, Found: found}
					if found {
						out.Revision, out.Timestamp, out.SerializerID, out.Manifest, out.Tag, out.PayloadSize = o.Revision, o.Timestamp.UTC(), o.SerializerID, o.Manifest, o.Tag, len(o.Payload)
						out.Payload, out.PayloadBase64 = payloadJSON(o.SerializerID, o.Payload)
					}
					return writeJSON(e.stdout, out)
				}
				if !found {
					fmt.Fprintf(e.stderr, "no durable state of %q\n", pid)
					return nil
				}
				tw := table(e.stdout, "REVISION", "TIMESTAMP", "SERIALIZER", "MANIFEST", "TAG", "SIZE", "PAYLOAD")
				row(tw, o.Revision, timeText(o.Timestamp), serializerText(o.SerializerID), textOr(o.Manifest, "-"), textOr(o.Tag, "-"), bytesText(int64(len(o.Payload))), payloadText(o.SerializerID, o.Payload, *full))
				return tw.Flush()
			}
		},
	}
}
