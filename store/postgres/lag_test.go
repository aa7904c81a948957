package postgres_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// BenchmarkLiveLagAcrossProcesses measures the live lag across two
// processes: a child process (this test binary, re-executed as
// TestLiveLagWriter) persists b.N events one at a time through the journal
// front at a steady rate (one every `every`, over 8 ids), and prints the
// time each Persist returned; this process follows them with a live
// EventsBySlices over all slices through a store of its own (woken by
// NOTIFY) and notes when each event reached it.
//
// p50-ms and p99-ms are handler time minus the child's acknowledgement time
// (clamped at 0: the reader may see an event before its writer's Persist
// returns, counted as before-ack); start-p50-ms and start-p99-ms are
// handler time minus the time the child started the write (carried in the
// payload). Both processes read the same host clock.
//
// In TimestampOrder the live query reads up to BehindCurrentTime (100 ms
// by default) behind the database clock, so its lag is above 100 ms by
// design. The sparse case writes every 250 ms: there, in TimestampOrder,
// an event is only read at the next wake after it is 100 ms old, that is
// the next write's NOTIFY or the poll interval (1 s).
func BenchmarkLiveLagAcrossProcesses(b *testing.B) {
	for _, o := range benchOrderings {
		for _, every := range []time.Duration{5 * time.Millisecond, 250 * time.Millisecond} {
			b.Run(fmt.Sprintf("%s/every=%v", o.name, every), func(b *testing.B) {
				liveLag(b, o.ordering, every)
			})
		}
	}
}

const lagIDs = 8

func liveLag(b *testing.B, ordering postgres.Ordering, every time.Duration) {
	dsn, _ := pgtest.Schema(b)
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute+time.Duration(b.N)*every)
	defer cancel()
	s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true), postgres.WithOrdering(ordering))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	type event struct {
		pid string
		seq int64
	}
	type seen struct{ handled, started time.Time }
	var mu sync.Mutex
	handled := make(map[event]seen, b.N)
	all := make(chan struct{})
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	stream := s.Queries().EventsBySlices(readCtx, "Lag", 0, 1023, query.NoOffset())
	var reading sync.WaitGroup
	reading.Go(func() {
		for env := range stream.All() {
			now := time.Now()
			started := time.Unix(0, int64(binary.BigEndian.Uint64(env.Payload)))
			mu.Lock()
			handled[event{env.PersistenceID, env.SequenceNr}] = seen{now, started}
			n := len(handled)
			mu.Unlock()
			if n == b.N {
				close(all)
			}
		}
	})

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLiveLagWriter$")
	cmd.Env = append(os.Environ(), "ANNALS_PG_LAG_WRITER="+dsn, "ANNALS_PG_LAG_ORDERING="+ordering.String(),
		"ANNALS_PG_LAG_EVENTS="+strconv.Itoa(b.N), "ANNALS_PG_LAG_EVERY="+every.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	acked := make(map[event]time.Time, b.N)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var e event
		var at int64
		if _, err := fmt.Sscanf(lines.Text(), "ack %s %d %d", &e.pid, &e.seq, &at); err == nil {
			acked[e] = time.Unix(0, at)
		}
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("writer: %v", err)
	}
	if len(acked) != b.N {
		b.Fatalf("the writer acknowledged %d of %d events", len(acked), b.N)
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("the live query delivered %d of %d events", len(handled), b.N)
	}
	b.StopTimer()
	stopReading()
	reading.Wait()

	var fromAck, fromStart []time.Duration
	beforeAck := 0
	mu.Lock()
	for e, at := range acked {
		h, ok := handled[e]
		if !ok {
			b.Fatalf("%s#%d acknowledged, never delivered", e.pid, e.seq)
		}
		lag := h.handled.Sub(at)
		if lag < 0 {
			beforeAck++
			lag = 0
		}
		fromAck = append(fromAck, lag)
		fromStart = append(fromStart, h.handled.Sub(h.started))
	}
	mu.Unlock()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	pct := func(ds []time.Duration, p int) time.Duration {
		slices.Sort(ds)
		return ds[(len(ds)-1)*p/100]
	}
	b.ReportMetric(ms(pct(fromAck, 50)), "p50-ms")
	b.ReportMetric(ms(pct(fromAck, 99)), "p99-ms")
	b.ReportMetric(ms(pct(fromStart, 50)), "start-p50-ms")
	b.ReportMetric(ms(pct(fromStart, 99)), "start-p99-ms")
	b.ReportMetric(float64(beforeAck)/float64(b.N), "before-ack")
}

// TestLiveLagWriter is the writer process of
// BenchmarkLiveLagAcrossProcesses; without its environment it does nothing.
func TestLiveLagWriter(t *testing.T) {
	dsn := os.Getenv("ANNALS_PG_LAG_WRITER")
	if dsn == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("ANNALS_PG_LAG_EVENTS"))
	every, _ := time.ParseDuration(os.Getenv("ANNALS_PG_LAG_EVERY"))
	ordering := postgres.CommitOrder
	if os.Getenv("ANNALS_PG_LAG_ORDERING") == postgres.TimestampOrder.String() {
		ordering = postgres.TimestampOrder
	}
	ctx := context.Background()
	s, err := postgres.Open(ctx, dsn, postgres.WithOrdering(ordering))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := bufio.NewWriter(os.Stdout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		pid, seq := fmt.Sprintf("Lag|%d", i%lagIDs), int64(i/lagIDs+1)
		payload := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
		if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: payload, SerializerID: 4, Manifest: "m"}}}); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "ack %s %d %d\n", pid, seq, time.Now().UnixNano())
	}
	_ = out.Flush() // the times are in the lines: when they arrive does not matter
}
