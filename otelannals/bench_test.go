package otelannals_test

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/otelannals"
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
