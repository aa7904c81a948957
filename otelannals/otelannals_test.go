package otelannals_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/otelannals"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// failing fails every write while on.
type failing struct {
	journal.Journal
	on bool
}

var errDown = errors.New("store down")

func (f *failing) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	if f.on {
		return nil, errDown
	}
	return f.Journal.Write(ctx, ws)
}

// savedSignal signals each offset save.
type savedSignal chan struct{}

func (s savedSignal) OnOffsetSaved(projection.ID, query.Offset, time.Duration) { s <- struct{}{} }

// TestMetricsAndSpans: a host and a projection with the telemetry hooks,
// read through the SDK's in-memory reader and span recorder.
func TestMetricsAndSpans(t *testing.T) {
	ctx := t.Context()
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, err := otelannals.New(meters, tracers)
	if err != nil {
		t.Fatal(err)
	}

	s := memory.New()
	defer s.Close()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	j := &failing{Journal: s.Journal()}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: j, Snapshots: s.Snapshots(), Registry: reg,
		Front: engine.Config{Hooks: []any{tel}, MaxFailures: 1}, Hooks: []any{tel}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 5, Reply: r} }); err != nil {
			t.Fatal(err)
		}
	}
	j.on = true
	if _, err := entity.Ask(ctx, h, "a", func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 5, Reply: r} }); !errors.Is(err, errDown) {
		t.Fatalf("write while the store is down: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	saved := savedSignal(make(chan struct{}, 3))
	p, err := projection.AtLeastOnce(projection.ID{Name: "balances", Key: "all"},
		projection.BySlices(s.Queries(), bank.EntityType, annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}), s.Projections(),
		func(context.Context, query.Envelope) error { return nil },
		projection.Config{SaveAfter: 1, Hooks: []any{tel, saved}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	for range 3 {
		<-saved
	}
	cancel()
	<-done

	sums, counts, gauges := collect(t, reader)
	for name, want := range map[string]int64{
		"annals.journal.writes":           4, // the failed one was sent too
		"annals.journal.events":           4,
		"annals.entity.recoveries":        3,
		"annals.entity.live":              0, // 3 recovered, a stopped on the failure, b and c at shutdown
		"annals.entity.stops":             3,
		"annals.projection.offsets.saved": 3,
	} {
		if sums[name] != want {
			t.Errorf("%s = %d, want %d (all sums %v)", name, sums[name], want, sums)
		}
	}
	if counts["annals.journal.call.duration"] < 3 || counts["annals.projection.lag"] != 3 || counts["annals.entity.recovery.duration"] != 3 {
		t.Errorf("histogram counts %v", counts)
	}
	if gauges["annals.journal.breaker.state"] != int64(engine.BreakerOpen) {
		t.Errorf("breaker gauge %d, want open (%d)", gauges["annals.journal.breaker.state"], engine.BreakerOpen)
	}

	var writes, failed int
	for _, sp := range spans.Ended() {
		if sp.Name() == "annals.journal.write" {
			writes++
			if sp.Status().Description == errDown.Error() {
				failed++
			}
			if !sp.EndTime().After(sp.StartTime()) && sp.EndTime() != sp.StartTime() {
				t.Errorf("span %s ends before it starts", sp.Name())
			}
		}
	}
	if writes < 4 || failed != 1 {
		t.Errorf("%d write spans, %d failed; want one per store call (4), one failed", writes, failed)
	}
}

// TestCommandTrace: one command's trace is the sender's span, the command's
// span under it, the persist under that and the store call under the
// persist.
func TestCommandTrace(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, err := otelannals.New(sdkmetric.NewMeterProvider(), tracers)
	if err != nil {
		t.Fatal(err)
	}
	s := memory.New()
	defer s.Close()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: s.Journal(), Snapshots: s.Snapshots(), Registry: reg,
		Front: engine.Config{Hooks: []any{tel}}, Hooks: []any{tel}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := tracers.Tracer("test").Start(t.Context(), "request")
	if _, err := entity.Ask(ctx, h, "a", func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 5, Reply: r} }); err != nil {
		t.Fatal(err)
	}
	if _, err := entity.Ask(ctx, h, "", func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 5, Reply: r} }); err == nil {
		t.Fatal("a command for the empty id was accepted")
	}
	request.End()
	if err := h.Shutdown(t.Context()); err != nil { // the front's hooks have run once it is closed
		t.Fatal(err)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range spans.Ended() {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	if len(byName["annals.command"]) != 2 || len(byName["annals.persist"]) != 1 || len(byName["annals.journal.write"]) != 1 {
		t.Fatalf("spans %v; want 2 commands, 1 persist, 1 store call", byName)
	}
	want := request.SpanContext().TraceID()
	parentOf := func(sp sdktrace.ReadOnlySpan) string {
		for _, other := range spans.Ended() {
			if other.SpanContext().SpanID() == sp.Parent().SpanID() {
				return other.Name()
			}
		}
		return "none"
	}
	for name, list := range byName {
		for _, sp := range list {
			if sp.SpanContext().TraceID() != want {
				t.Errorf("%s is in another trace", name)
			}
		}
	}
	for _, c := range []struct{ span, parent string }{
		{"annals.command", "request"},
		{"annals.persist", "annals.command"},
		{"annals.journal.write", "annals.persist"},
	} {
		for _, sp := range byName[c.span] {
			if got := parentOf(sp); got != c.parent {
				t.Errorf("%s's parent is %s, want %s", c.span, got, c.parent)
			}
		}
	}
	var failed int
	for _, sp := range byName["annals.command"] {
		if sp.Status().Code == codes.Error {
			failed++
		}
		if a := sp.Attributes(); len(a) != 1 || a[0].Key != "annals.persistence_id" || !strings.HasPrefix(a[0].Value.AsString(), bank.EntityType+"|") {
			t.Errorf("command span attributes %v", a)
		}
	}
	if failed != 1 {
		t.Errorf("%d command spans failed, want the refused one's", failed)
	}
}

// innerSpan is a hook after the telemetry that starts a span of its own
// in each command's context (and would end it itself).
type innerSpan struct{ tp *sdktrace.TracerProvider }

func (u innerSpan) OnCommandStart(ctx context.Context, _ string) context.Context {
	ctx, _ = u.tp.Tracer("user").Start(ctx, "user.inner")
	return ctx
}

// TestOwnSpansAndClose: the telemetry ends its own command span even when
// a later hook put another span in the context (that one stays open for
// its owner); Close unregisters the observable counters.
func TestOwnSpansAndClose(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	tel, err := otelannals.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), tracers)
	if err != nil {
		t.Fatal(err)
	}
	s := memory.New()
	defer s.Close()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: s.Journal(), Registry: reg,
		Front: engine.Config{Hooks: []any{tel}}, Hooks: []any{tel, innerSpan{tracers}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Send(t.Context(), "a", bank.Deposit{Amount: 1}); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	ended := map[string]int{}
	for _, sp := range spans.Ended() {
		ended[sp.Name()]++
	}
	if ended["annals.command"] != 1 || ended["user.inner"] != 0 {
		t.Errorf("ended spans %v: want the command's (ended by the telemetry) and not the user's", ended)
	}

	count := func() int {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == "annals.journal.writes" {
					n += len(m.Data.(metricdata.Sum[int64]).DataPoints)
				}
			}
		}
		return n
	}
	if count() != 1 {
		t.Fatal("no writes counted before Close")
	}
	if err := tel.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tel.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if n := count(); n != 0 {
		t.Errorf("after Close the writes are still observed (%d points)", n)
	}
}

// collect reads reader's metrics: the sums of counters, the counts of
// histograms and the last values of gauges, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) (sums map[string]int64, counts map[string]uint64, gauges map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	sums, counts, gauges = map[string]int64{}, map[string]uint64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sums[m.Name] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					counts[m.Name] += dp.Count
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					counts[m.Name] += dp.Count
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					gauges[m.Name] = dp.Value
				}
			}
		}
	}
	return sums, counts, gauges
}
