// Command cluster is the bank accounts as an HTTP service that runs as
// several processes on one store, with no router of its own: the processes
// share the accounts through package cluster (leases on the store), and
// each forwards a request to the process that owns its account.
//
// Start one process per terminal, each with its own address, on the same
// store (PostgreSQL, Cassandra, SQLite for processes on one machine, or the
// Kafka journal, whose consumer group shares the accounts out by partition:
// -store 'kafka://127.0.0.1:9092/?eventual=postgres://…'):
//
//	go run ./examples/cluster -store 'postgres://postgres@127.0.0.1:5432/annals_test?schema=bank&migrate=true' -listen 127.0.0.1:8081
//	go run ./examples/cluster -store 'postgres://postgres@127.0.0.1:5432/annals_test?schema=bank&migrate=true' -listen 127.0.0.1:8082
//	go run ./examples/cluster -store 'postgres://postgres@127.0.0.1:5432/annals_test?schema=bank&migrate=true' -listen 127.0.0.1:8083
//
// then send requests to any of them:
//
//	curl -X POST '127.0.0.1:8081/accounts/alice/deposit?amount=100'
//	curl 127.0.0.1:8083/accounts/alice
//	curl 127.0.0.1:8082/cluster
//
// The API: POST /accounts/{id}/deposit?amount=N and POST
// /accounts/{id}/withdraw?amount=N answer the new balance; GET
// /accounts/{id} the balance; GET /balances the read model of every
// balance (JSON), kept by a projection of four instances that run spread
// over the members, each on one member at a time, in the store's own
// database on PostgreSQL and SQLite, and in the database readmodel= names
// on Cassandra and the Kafka journal (the instances then hold their
// leases in that database: a second cluster, of daemons only; on
// Cassandra, which answers events by tag only, each account's events
// carry the tag of its instance); GET /cluster this process's member and
// the ranges it holds (JSON). Every answer about an account carries the
// header Served-By: the member that ran the command. SIGTERM or Ctrl-C
// hands the process's accounts to the others, then stops it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
	"github.com/annals-go/annals/stores"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// backend is what the service runs on.
type backend struct {
	journal    journal.Journal
	snapshots  snapshot.Store
	membership membership.Store
	// kafka is the Kafka journal, whose members share the accounts
	// through a consumer group instead of leases; nil on other stores.
	kafka *kafka.Journal
	// daemonsApart is set when the projection instances keep their
	// leases in the read model's database, apart from the accounts'
	// membership (the Kafka journal with readmodel=): the process is a
	// member of a second cluster there, of daemons only.
	daemonsApart bool
	// readModelMembership keeps the projection instances' leases.
	readModelMembership membership.Store
	// tagged is set when the projection reads by tag (Cassandra): each
	// account's events carry the tag of its instance's slice range.
	tagged bool
	close  func() error
	// readModel makes the balance read model; nil where the stack keeps
	// none (Cassandra and the Kafka journal without readmodel=).
	readModel func(ctx context.Context, reg *serialization.Registry) (*readModel, error)
}

// open opens the store stack of url (package stores: postgres://,
// cassandra://, sqlite: or kafka://…?eventual=…[&readmodel=…]), creating
// what is missing.
func open(ctx context.Context, url string) (backend, error) {
	st, err := stores.Open(ctx, url, stores.WithMigrate(true))
	if err != nil {
		return backend{}, err
	}
	b := backend{journal: st.Journal, snapshots: st.Snapshots, membership: st.Membership, readModelMembership: st.ReadModelMembership, close: st.Close}
	b.kafka, _ = st.Journal.(*kafka.Journal)
	b.daemonsApart = st.ReadModelMembership != nil && st.ReadModelKind != st.Kind
	if st.ReadModelMembership != nil {
		// Instance i of the projection reads the i-th range of slices, by
		// slices where the store answers them, else by the tag the
		// accounts of that range carry (balanceTag).
		var source func(i int) projection.Source
		ranges, _ := annals.SliceRanges(balanceInstances)
		switch q := st.Queries.(type) {
		case query.EventsBySlicesQuery:
			source = func(i int) projection.Source { return projection.BySlices(q, bank.EntityType, ranges[i]) }
		case query.EventsByTagQuery:
			b.tagged = true
			source = func(i int) projection.Source { return projection.ByTag(q, balanceTag(ranges[i].Min)) }
		}
		if source != nil {
			b.readModel = func(ctx context.Context, reg *serialization.Registry) (*readModel, error) {
				return newReadModel(ctx, st, source, reg)
			}
		}
	}
	if b.membership == nil && b.kafka == nil {
		st.Close()
		return backend{}, fmt.Errorf("-store %q: the store keeps no cluster membership", url)
	}
	return b, nil
}

// run serves until ctx ends, then hands off and stops.
func run(ctx context.Context, args []string, out io.Writer) error {
	flags := flag.NewFlagSet("cluster", flag.ContinueOnError)
	storeURL := flags.String("store", "", "the store's URL (postgres://, cassandra://, sqlite: or kafka://…?eventual=postgres://…)")
	listen := flags.String("listen", "127.0.0.1:8081", "address to serve HTTP on")
	name := flags.String("name", "", "member name, unique among the live members (default: the -advertise address)")
	advertise := flags.String("advertise", "", "address the other members forward requests to (default: -listen)")
	clusterName := flags.String("cluster", "bank", "cluster name in the store (the consumer group on Kafka)")
	leaseTime := flags.Duration("lease", cluster.DefaultLeaseTime, "lease time (the group's session timeout on Kafka, at least 6 s): a failed member's accounts move after it")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *storeURL == "" {
		return errors.New("-store is required")
	}
	if *advertise == "" {
		*advertise = *listen
	}
	if *name == "" {
		*name = *advertise
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("member", *name)

	st, err := open(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.close()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		return err
	}
	behavior := bank.Behavior()
	if st.tagged {
		behavior.TagsFor = func(pid string, _ bank.Event) []string { return []string{balanceTag(annals.Slice(pid))} }
	}
	host, err := entity.NewHost(behavior, entity.HostConfig{
		Journal: st.journal, Snapshots: st.snapshots, Registry: reg, Logger: logger,
		Assigned: true, IdleTimeout: 5 * time.Minute,
	})
	if err != nil {
		return err
	}
	var rm *readModel
	var daemons []cluster.Daemon
	if st.readModel != nil {
		if rm, err = st.readModel(ctx, reg); err != nil {
			return err
		}
		daemons = append(daemons, rm.daemon)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	member, err := join(ctx, st, host, daemons, *clusterName, *name, *advertise, *leaseTime, logger)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: routes(member, host, rm), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	units, all := member.Units()
	fmt.Fprintf(out, "member %s serving on %s, holding %d of %d %s\n", *name, ln.Addr(), len(units), all, member.UnitKind())

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	// Hand the accounts off while still answering (requests for them are
	// forwarded to their new owners), then stop serving, then stop.
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*(*leaseTime))
	defer cancel()
	errLeave := member.Leave(stopCtx)
	errServe := srv.Shutdown(stopCtx)
	errHost := host.Shutdown(stopCtx)
	if err := errors.Join(errLeave, errServe, errHost); err != nil {
		return err
	}
	fmt.Fprintf(out, "member %s left\n", *name)
	return nil
}

// member is the process's place among the others: a cluster.Member on
// leases, or a kafkacluster.Member in the Kafka journal's consumer group.
type member interface {
	Name() string
	// Held names everything the member holds (entity units and daemon
	// instances).
	Held() []string
	// Units returns the entity units (slice ranges or partitions) the
	// member holds, and how many there are in all.
	Units() (held []string, all int)
	// UnitKind names the units: "ranges" or "partitions".
	UnitKind() string
	Handler(next http.Handler, cfg cluster.HandlerConfig) (http.Handler, error)
	Leave(ctx context.Context) error
}

// join makes the process a member: of the consumer group on the Kafka
// journal, of the store's cluster otherwise; and, when the projection's
// instances keep their leases in a read-model database of their own, of a
// cluster of daemons only there.
func join(ctx context.Context, st backend, host *entity.Host[bank.Command, bank.Event, bank.Account], daemons []cluster.Daemon, clusterName, name, address string, leaseTime time.Duration, logger *slog.Logger) (member, error) {
	withAccounts := daemons
	if st.daemonsApart {
		withAccounts = nil
	}
	var accounts member
	if st.kafka != nil {
		m, err := kafkacluster.Join(ctx, kafkacluster.Config{
			Journal: st.kafka, Group: clusterName, Name: name, Address: address,
			SessionTimeout: leaseTime, Shards: []kafkacluster.Shard{host}, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		accounts = kafkaMember{m}
	} else {
		m, err := cluster.Join(ctx, cluster.Config{
			Store: st.membership, Cluster: clusterName, Name: name, Address: address,
			LeaseTime: leaseTime, Shards: []cluster.Shard{host}, Daemons: withAccounts, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		accounts = leaseMember{m}
	}
	if !st.daemonsApart || len(daemons) == 0 {
		return accounts, nil
	}
	d, err := cluster.Join(ctx, cluster.Config{
		Store: st.readModelMembership, Cluster: clusterName, Name: name, Address: address,
		LeaseTime: leaseTime, DaemonsOnly: true, Daemons: daemons, Logger: logger,
	})
	if err != nil {
		return nil, errors.Join(err, accounts.Leave(ctx))
	}
	return withDaemons{member: accounts, daemons: d}, nil
}

type leaseMember struct{ *cluster.Member }

func (m leaseMember) Units() ([]string, int) {
	var ranges []string
	for _, l := range m.Held() {
		if strings.HasPrefix(l, "slices/") {
			ranges = append(ranges, l)
		}
	}
	return ranges, len(m.Ranges())
}

func (leaseMember) UnitKind() string { return "ranges" }

type kafkaMember struct{ *kafkacluster.Member }

func (m kafkaMember) Units() ([]string, int) { return m.Held(), m.Partitions() }

func (kafkaMember) UnitKind() string { return "partitions" }

// withDaemons is a member sharing the accounts (through the store's
// leases or the Kafka journal's consumer group) and a member of the
// daemons' cluster in the read model's database, sharing the projection's
// instances.
type withDaemons struct {
	member
	daemons *cluster.Member
}

func (m withDaemons) Held() []string { return append(m.member.Held(), m.daemons.Held()...) }

// Leave hands the accounts off, then the projection's instances.
func (m withDaemons) Leave(ctx context.Context) error {
	return errors.Join(m.member.Leave(ctx), m.daemons.Leave(ctx))
}

// routes is the service's HTTP API.
func routes(member member, host *entity.Host[bank.Command, bank.Event, bank.Account], rm *readModel) http.Handler {
	mux := http.NewServeMux()
	account := func(h func(w http.ResponseWriter, r *http.Request, id string) (int64, error)) http.Handler {
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Served-By", member.Name())
			balance, err := h(w, r, r.PathValue("id"))
			if err != nil {
				http.Error(w, err.Error(), status(err))
				return
			}
			fmt.Fprintln(w, balance)
		})
		// The middleware runs the request where the account lives.
		routed, err := member.Handler(inner, cluster.HandlerConfig{Key: cluster.PathKey(bank.EntityType, "id")})
		if err != nil {
			panic(err) // HandlerConfig is fixed above
		}
		return routed
	}
	amount := func(r *http.Request) (int64, error) {
		n, err := strconv.ParseInt(r.FormValue("amount"), 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%w: amount %q is not a positive number of cents", errBadRequest, r.FormValue("amount"))
		}
		return n, nil
	}
	mux.Handle("POST /accounts/{id}/deposit", account(func(w http.ResponseWriter, r *http.Request, id string) (int64, error) {
		n, err := amount(r)
		if err != nil {
			return 0, err
		}
		return entity.Ask(r.Context(), host, id, func(rt entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: n, Reply: rt} })
	}))
	mux.Handle("POST /accounts/{id}/withdraw", account(func(w http.ResponseWriter, r *http.Request, id string) (int64, error) {
		n, err := amount(r)
		if err != nil {
			return 0, err
		}
		return entity.Ask(r.Context(), host, id, func(rt entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: n, Reply: rt} })
	}))
	mux.Handle("GET /accounts/{id}", account(func(w http.ResponseWriter, r *http.Request, id string) (int64, error) {
		return entity.Ask(r.Context(), host, id, func(rt entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: rt} })
	}))
	mux.HandleFunc("GET /balances", func(w http.ResponseWriter, r *http.Request) {
		if rm == nil {
			http.Error(w, "no read model on this store", http.StatusNotFound)
			return
		}
		b, err := rm.read(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b)
	})
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		units, all := member.Units()
		_ = json.NewEncoder(w).Encode(struct {
			Member string   `json:"member"`
			Held   []string `json:"held"`
			Units  []string `json:"units"`
			All    int      `json:"all_units"`
			Live   int      `json:"live_entities"`
		}{member.Name(), member.Held(), units, all, host.Live()})
	})
	return mux
}

var errBadRequest = errors.New("bad request")

// status maps a command's error to an HTTP status. An account that moved
// under the request answers 421, which the cluster middleware takes to
// run the request again where the account is now.
func status(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, bank.ErrInsufficientFunds):
		return http.StatusConflict
	case errors.Is(err, entity.ErrNotOwned), errors.Is(err, engine.ErrFenced):
		// Not handled, or not stored because the account's lease ended:
		// the middleware sends it to the account's owner.
		return http.StatusMisdirectedRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
