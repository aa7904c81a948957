package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/cmd/annals/internal/console"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
)

func consoleCommand() *command {
	return &command{
		name: "console", summary: "a web console: journals, entities' timelines, a live tail, projections, the cluster, the slices",
		help: `Serves a web console over the store until Ctrl-C: the store's figures and
events per second (Overview), ids by type and prefix and one id's timeline
with payloads decoded, snapshots and deletions (Entities), events followed
as they are written (Live tail), projection instances with their backlog
and lag (Projections), the cluster's members, ranges and projection
placement (Cluster), and how events, projection instances and ranges
spread over the 1,024 slices (Slices); on the Kafka journal each
partition's replicated offset beside its end (Kafka), on Cassandra how far
each tag's views are written (Tags). /api/overview, /api/ids,
/api/entity, /api/projections, /api/cluster, /api/slices, /api/kafka and
/api/tags give the same figures as JSON; /api/tail streams events as
server-sent events. At 1,000,000 events or more by a cheap estimate the
overview shows that estimate instead of statistics that scan the journal.

It listens on loopback unless --listen names another address; then it
requires a token (--token, $ANNALS_CONSOLE_TOKEN, or one it generates and
prints): open the printed link once (it sets a cookie), or send
"Authorization: Bearer TOKEN". It is read-only unless --allow-writes, which
lets the Projections page pause, resume and reset instances, each after a
confirmation page. The store URL is shown with its passwords replaced.

With --registry demo, an account's timeline shows its state at a chosen
sequence number, folded by the demo's account behavior from the latest
snapshot at or below it.`,
		examples: []string{
			"annals console --store sqlite:./annals.db",
			"annals console --store postgres://app@db/app --listen 127.0.0.1:9000 --allow-writes",
			"annals console --store sqlite:./annals.db --listen 0.0.0.0:8080   # prints a link with a token",
			"annals console --store sqlite:./annals-demo.db --registry demo   # the accounts' state at any sequence number",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store := storeFlag(fs)
			listen := fs.String("listen", "127.0.0.1:8080", "the `ADDRESS` to listen on (HOST:PORT; a host off loopback requires a token)")
			token := fs.String("token", "", "the bearer `TOKEN` requests must carry (default $ANNALS_CONSOLE_TOKEN; generated when listening off loopback)")
			writes := fs.Bool("allow-writes", false, "let the Projections page pause, resume and reset instances")
			clusterName := fs.String("cluster", cluster.DefaultCluster, "the `NAME` of the cluster the Cluster and Slices pages show")
			every := fs.Duration("sample-every", 10*time.Second, "how often the charts sample the events written and the projections' lag")
			var specs []string
			fs.Func("registry", "the `SPEC` of a registry, as annals verify takes it ("+registrySpecHelp+"); with demo the timeline shows the demo's accounts' state at a sequence number; repeat it", func(v string) error {
				specs = append(specs, v)
				return nil
			})
			return func(e *env, _ []string) error {
				if *every < 100*time.Millisecond {
					return usagef("--sample-every must be at least 100ms")
				}
				reg, err := newVerifyRegistry(specs)
				if err != nil {
					return err
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				s, err := e.mux.Open(e.ctx, url, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				tok := *token
				if tok == "" {
					tok = e.getenv("ANNALS_CONSOLE_TOKEN")
				}
				loopback := console.IsLoopback(*listen)
				if tok == "" && !loopback {
					tok = console.NewToken()
				}
				opt := console.Options{
					Store: s, URL: url, FormatPayload: consolePayload, Token: tok, AllowWrites: *writes,
					LoopbackHosts: loopback, Cluster: *clusterName, SampleEvery: *every,
					Log: log.New(e.stderr, "", log.LstdFlags),
				}
				opt.States, opt.NoStateHint = consoleStates(reg)
				if m, err := e.mux.Migrator(e.ctx, url); err == nil {
					if c, ok := m.(io.Closer); ok {
						defer c.Close()
					}
					opt.SchemaVersion = m.SchemaVersion
				}
				srv, err := console.New(opt)
				if err != nil {
					return err
				}
				ln, err := net.Listen("tcp", *listen)
				if err != nil {
					return err
				}
				link := "http://" + linkHost(ln.Addr()) + "/"
				if tok != "" {
					link += "?token=" + tok
				}
				mode := "read-only"
				if *writes {
					mode = "writes allowed (projections: pause, resume, reset)"
				}
				fmt.Fprintf(e.stderr, "annals console: %s, %s\n", stores.Redact(url), mode)
				fmt.Fprintf(e.stdout, "%s\n", link)
				if tok != "" {
					fmt.Fprintf(e.stderr, "token required: open the link above, or send Authorization: Bearer %s\n", tok)
				}
				ctx, cancel := context.WithCancel(e.ctx)
				defer cancel()
				go srv.Run(ctx)
				hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
				done := make(chan error, 1)
				go func() { done <- hs.Serve(ln) }()
				select {
				case err := <-done:
					return err
				case <-ctx.Done():
				}
				shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
				defer stop()
				if err := hs.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					return err
				}
				return nil
			}
		},
	}
}

// linkHost is the host:port of a link to a listener: this machine's
// name when it listens on every address.
func linkHost(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// consoleStates are the behaviors the console folds states with: the
// demo's bank accounts when the registry names demo. Other registries
// decode events but give no behavior.
func consoleStates(reg *verifyRegistry) (map[string]console.StateFolder, string) {
	if !reg.demo {
		return nil, "Start the console with --registry demo to see the state of the demo's accounts (entity type " + bank.EntityType + ")."
	}
	return map[string]console.StateFolder{bank.EntityType: console.BehaviorState(bank.Behavior(), reg.decoder)},
		"The console knows the behavior of the demo's accounts (" + bank.EntityType + ") only."
}

// consolePayload formats a payload for the console as the events command
// shows it: JSON (gzipped or not) indented, other payloads quoted when
// they are text, else in hex.
func consolePayload(serializerID int32, _ string, p []byte) console.Payload {
	out := console.Payload{Kind: serializerText(serializerID), Size: len(p)}
	if text, ok := jsonText(serializerID, p); ok {
		var b bytes.Buffer
		if json.Indent(&b, text, "", "  ") == nil {
			out.Text = b.String()
			return out
		}
	}
	out.Text = payloadText(serializerID, p, true)
	return out
}
