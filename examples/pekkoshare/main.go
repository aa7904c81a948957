// Command pekkoshare is a Go service that shares a PostgreSQL journal with
// a Pekko Persistence R2DBC 1.2 service: it opens the plugin's tables
// (the store's r2dbc layout), binds Go types to the JVM's event and state
// classes, continues an entity the JVM service wrote, and reads the
// events by slices as the JVM's read journal does.
//
//	go run ./examples/pekkoshare -store 'postgres://postgres@127.0.0.1:5432/annals_test?schema=pekko'
//	go run ./examples/pekkoshare -store '…' -id f-1 -add 'from Go'
//
// The JVM service's entity is the Java class anchor.Fixture, whose events
// are the records anchor.Fixture$Added(int n, String text) and
// anchor.Fixture$Renamed(String name) and whose state is
// anchor.Fixture$State(int count, String name, List<String> texts), bound
// to jackson-json in its application.conf ("anchor.JsonSerializable" =
// jackson-json). The schema is the JVM service's (its
// pekko.persistence.r2dbc.schema); -migrate creates the plugin's tables
// in an empty one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/postgres"
)

// The JVM service's records, as Go types. Their JSON is Jackson's: the
// records' component names.
type (
	// Event is an event of the Fixture entity.
	Event interface{ isEvent() }
	// Added is anchor.Fixture$Added.
	Added struct {
		N    int    `json:"n"`
		Text string `json:"text"`
	}
	// Renamed is anchor.Fixture$Renamed.
	Renamed struct {
		Name string `json:"name"`
	}
	// State is anchor.Fixture$State, the entity's state and snapshots.
	State struct {
		Count int      `json:"count"`
		Name  string   `json:"name"`
		Texts []string `json:"texts"`
	}
)

func (Added) isEvent()   {}
func (Renamed) isEvent() {}

// Commands of the Fixture entity.
type (
	// Command is a command of the Fixture entity.
	Command interface{ isCommand() }
	// Get replies with the state.
	Get struct{ Reply entity.ReplyTo[State] }
	// Add persists an Added with the next number and replies with the
	// state.
	Add struct {
		Text  string
		Reply entity.ReplyTo[State]
	}
)

func (Get) isCommand() {}
func (Add) isCommand() {}

// Register binds the Go types to the JVM class names under the
// jackson-json serializer (id 31, the class name as manifest), for
// decoding and encoding.
func Register(r *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[Added](r, "anchor.Fixture$Added"),
		serialization.RegisterJSON[Renamed](r, "anchor.Fixture$Renamed"),
		serialization.RegisterJSON[State](r, "anchor.Fixture$State"),
	)
}

// Behavior is the JVM entity's behavior in Go: the same events, tags and
// state, so that either service can continue an entity the other wrote.
func Behavior() entity.Behavior[Command, Event, State] {
	var fx entity.Effects[Event, State]
	return entity.Behavior[Command, Event, State]{
		EntityType: "Fixture",
		Command: func(s State, c Command) entity.ReplyEffect[Event, State] {
			switch c := c.(type) {
			case Get:
				return fx.Reply(func(s State) { c.Reply.Send(s) })
			case Add:
				return fx.Persist(Added{N: s.Count + 1, Text: c.Text}).ThenReply(func(s State) { c.Reply.Send(s) })
			}
			return fx.Unhandled()
		},
		Event: func(s State, e Event) State {
			s.Count++
			switch e := e.(type) {
			case Added:
				s.Texts = append(slices.Clone(s.Texts), e.Text)
			case Renamed:
				s.Name = e.Name
			}
			return s
		},
		// The JVM entity's tagger: odd Added events and every Renamed.
		Tagger: func(e Event) []string {
			switch e := e.(type) {
			case Added:
				if e.N%2 == 1 {
					return []string{"fixture-odd"}
				}
			case Renamed:
				return []string{"fixture-renamed", "fixture-all"}
			}
			return nil
		},
		// Snapshots every 5 events, one row per id as the plugin keeps them.
		Snapshots: entity.SnapshotPolicy[Event, State]{Every: 5},
	}
}

func main() {
	store := flag.String("store", "postgres://postgres@127.0.0.1:5432/annals_test?schema=pekko", "the JVM service's PostgreSQL URL and schema")
	id := flag.String("id", "f-1", "the entity to show (Fixture|<id>)")
	add := flag.String("add", "", "if set, persist an Added with this text first")
	migrate := flag.Bool("migrate", false, "create the plugin's tables where they are missing")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *store, *id, *add, *migrate); err != nil {
		fmt.Fprintln(os.Stderr, "pekkoshare:", err)
		os.Exit(1)
	}
}

// run opens the JVM service's schema on the r2dbc layout, shows (and
// with add, continues) the entity Fixture|id, and lists the Fixture
// events by slices.
func run(ctx context.Context, out io.Writer, dsn, id, add string, migrate bool) error {
	reg := serialization.NewRegistry()
	if err := Register(reg); err != nil {
		return err
	}
	s, err := postgres.Open(ctx, dsn, postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithMigrate(migrate))
	if err != nil {
		return err
	}
	defer s.Close()
	h, err := entity.NewHost(Behavior(), entity.HostConfig{
		Journal: s.Journal(), Snapshots: s.Snapshots(), Registry: reg, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer h.Shutdown(context.WithoutCancel(ctx))

	st, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[State]) Command { return Get{Reply: r} })
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s recovered: count %d, name %q, texts %q\n", annals.PersistenceID("Fixture", id), st.Count, st.Name, st.Texts)
	if add != "" {
		if st, err = entity.Ask(ctx, h, id, func(r entity.ReplyTo[State]) Command { return Add{Text: add, Reply: r} }); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s persisted event %d: count %d, texts %q\n", annals.PersistenceID("Fixture", id), st.Count, st.Count, st.Texts)
	}

	fmt.Fprintln(out, "events by slices (Fixture, 0-1023):")
	for env, err := range s.Queries().CurrentEventsBySlices(ctx, "Fixture", 0, annals.NumberOfSlices-1, query.NoOffset()) {
		if err != nil {
			return err
		}
		v, err := reg.Deserialize(env.Payload, env.SerializerID, env.Manifest)
		if err != nil {
			return fmt.Errorf("%s #%d: %w", env.PersistenceID, env.SequenceNr, err)
		}
		fmt.Fprintf(out, "  %s #%d slice %d %+v tags %v at %s\n", env.PersistenceID, env.SequenceNr, env.Slice, v, env.Tags, env.Timestamp.Format("15:04:05.000000"))
	}
	return nil
}
