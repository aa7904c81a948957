package otelannals_test

import (
	"log/slog"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/otelannals"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// BenchmarkPersistWithTelemetry: a lone writer's persist through the
// journal front on the memory store, without hooks and with the
// telemetry adapter on the OpenTelemetry SDK (metrics collected by a
// reader nobody reads, spans sampled and dropped): the adapter's cost on
// the hottest path it sees.
func BenchmarkPersistWithTelemetry(b *testing.B) {
	tel, err := otelannals.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		hooks []any
	}{{"none", nil}, {"otel", []any{tel}}} {
		b.Run(c.name, func(b *testing.B) {
			f, err := engine.NewFront(memory.New().Journal(), engine.Config{Hooks: c.hooks})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			seq := int64(0)
			for b.Loop() {
				seq++
				w := journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: seq, Payload: []byte("x")}}}
				if err := f.Persist(b.Context(), w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAskWithTelemetry: one Ask after another to one entity on the
// memory store (recovered once), without hooks, with the adapter's
// metrics only (no tracer provider), on a noop tracer provider, and with
// spans sampled and dropped: the cost per command of the metrics and of
// the command, persist and store-call spans.
func BenchmarkAskWithTelemetry(b *testing.B) {
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		b.Fatal(err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	noopTraces, err := otelannals.New(meters, noop.NewTracerProvider())
	if err != nil {
		b.Fatal(err)
	}
	metricsOnly, err := otelannals.New(meters, nil)
	if err != nil {
		b.Fatal(err)
	}
	traced, err := otelannals.New(meters, sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		hooks []any
	}{{"none", nil}, {"otel-metrics", []any{metricsOnly}}, {"otel-noop-tracer", []any{noopTraces}}, {"otel-spans", []any{traced}}} {
		b.Run(c.name, func(b *testing.B) {
			s := memory.New()
			defer s.Close()
			h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: s.Journal(), Registry: reg,
				Front: engine.Config{Hooks: c.hooks}, Hooks: c.hooks, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Shutdown(b.Context())
			for b.Loop() {
				if _, err := entity.Ask(b.Context(), h, "a", func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 1, Reply: r} }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
