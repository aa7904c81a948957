// Package otelannals reports what Annals does as OpenTelemetry metrics and
// spans, built on the hooks of the journal front (engine.Config.Hooks), the
// entity host (entity.HostConfig.Hooks) and projections
// (projection.Config.Hooks). It is a package of its own so that a program
// that does not use OpenTelemetry does not link it.
//
//	tel, err := otelannals.New(otel.GetMeterProvider(), otel.GetTracerProvider())
//	host, err := entity.NewHost(behavior, entity.HostConfig{
//		Journal: store.Journal(), Registry: reg,
//		Front: engine.Config{Hooks: []any{tel}}, Hooks: []any{tel},
//	})
//	p, err := projection.ExactlyOnce(id, src, store.Projections(), handler, projection.Config{Hooks: []any{tel}})
//
// Metrics (instrument names; units in brackets):
//
//	annals.journal.writes                    atomic writes sent to the store
//	annals.journal.events                    events in them
//	annals.journal.rejections                atomic writes the store refused
//	annals.journal.call.duration     [s]     one store call, attribute outcome (ok, circuit_open, timeout, error)
//	annals.journal.call.events               events per store call
//	annals.journal.queue                     atomic writes waiting when a call was sent
//	annals.journal.breaker.state             0 closed, 1 half-open, 2 open
//	annals.entity.recoveries                 attribute outcome (ok, error)
//	annals.entity.recovery.duration  [s]
//	annals.entity.recovery.events            events replayed per recovery
//	annals.entity.live                       entities recovered and not yet passivated or stopped
//	annals.entity.passivations
//	annals.entity.stops
//	annals.entity.restarts                   restarts scheduled
//	annals.entity.snapshots                  attribute outcome (ok, error)
//	annals.entity.overflows                  attribute what (mailbox, stash)
//	annals.projection.lag            [s]     age of the last event an offset save covers, per projection
//	annals.projection.offsets.saved
//	annals.projection.handler.errors         attribute decision (retry, skip, fail)
//	annals.projection.paused                 1 while paused
//
// Spans:
//
//	annals.command        one per command, from Tell, Send or Ask to its answer; a child of
//	                      the span in the sender's context; attribute annals.persistence_id
//	annals.persist        one per atomic write of a command's events, a child of the command's
//	annals.journal.write  one per journal store call, with its writes, events and outcome,
//	                      started and ended at the call's times; a child of the first persist
//	                      it carried, linked to the others (the front batches several
//	                      commands' writes into one call)
//
// Durations are in seconds, in histograms with explicit bucket boundaries
// (the SDK's default boundaries, 0 to 10000, suit milliseconds and would
// put every call in the first bucket): DurationBuckets, 100 µs to 10 s,
// for store calls and recoveries; LagBuckets, the same up to an hour, for
// projection lag, which is minutes while a projection catches up. A view
// of the meter provider can still replace them.
//
// A span ends with an error status when its command, write or call
// failed; the error is recorded on it.
package otelannals

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
)

// Name is the instrumentation scope's name.
const Name = "github.com/annals-go/annals/otelannals"

// DurationBuckets returns the bucket boundaries, in seconds, of the
// duration histograms of store calls and recoveries: 100 µs to 10 s, about
// three per decade (1, 2.5, 5), so a percentile read from the buckets is
// within a factor of 2.5 from a store call on a local disk to a timeout.
// Each call returns a new slice.
func DurationBuckets() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// LagBuckets returns the bucket boundaries, in seconds, of the projection
// lag histogram: DurationBuckets, then 30 s to an hour. Each call returns
// a new slice.
func LagBuckets() []float64 {
	return append(DurationBuckets(), 30, 60, 120, 300, 600, 1800, 3600)
}

// Telemetry implements the hooks of the engine, entity, projection and
// cluster packages; give the same value to each. It is safe for concurrent use.
type Telemetry struct {
	tracer trace.Tracer

	// counted on the hot path with atomics, reported when a reader
	// collects (observable instruments): an atomic add costs a few
	// nanoseconds, a synchronous instrument's a few hundred
	writes, events, rejections, live          atomic.Int64
	callDuration                              metric.Float64Histogram
	callEvents, queue                         metric.Int64Histogram
	breaker                                   metric.Int64Gauge
	recoveries, passivations, stops, restarts metric.Int64Counter
	snapshots, overflows                      metric.Int64Counter
	recoveryDuration                          metric.Float64Histogram
	recoveryEvents                            metric.Int64Histogram
	lag                                       metric.Float64Histogram
	offsetsSaved, handlerErrors               metric.Int64Counter
	paused, running                           metric.Int64Gauge
	projectionRestarts                        metric.Int64Counter
	heartbeat, handOff                        metric.Float64Histogram
	leasesAcquired, leasesLost                metric.Int64Counter
	members                                   metric.Int64Gauge

	// attribute options made once: measurement options with attributes
	// cost an allocation each when made per call
	outcomes    map[string]metric.MeasurementOption // by outcome()
	okOrError   [2]metric.MeasurementOption         // ok, error
	overflowOpt [2]metric.MeasurementOption         // by entity.Overflow

	registration metric.Registration // of the observable instruments' callback
	byProjection sync.Map            // projection.ID → its metric.MeasurementOption

	mu      sync.Mutex
	liveIDs map[string]int // instances counted in live, per id (a new one may recover before the old one's stop is reported)
}

// New makes the instruments on meters and the tracer on tracers. With
// tracers nil the telemetry makes no spans at all, and costs what its
// metrics cost: cheaper than a noop tracer provider, whose spans still
// carry contexts.
func New(meters metric.MeterProvider, tracers trace.TracerProvider) (*Telemetry, error) {
	if meters == nil {
		return nil, errors.New("otelannals: New needs a meter provider")
	}
	m := meters.Meter(Name)
	t := &Telemetry{liveIDs: map[string]int{}, outcomes: map[string]metric.MeasurementOption{}}
	if tracers != nil {
		t.tracer = tracers.Tracer(Name)
	}
	for _, o := range []string{"ok", "circuit_open", "timeout", "error"} {
		t.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", o)))
	}
	t.okOrError = [2]metric.MeasurementOption{t.outcomes["ok"], t.outcomes["error"]}
	for _, o := range []entity.Overflow{entity.OverflowMailbox, entity.OverflowStash} {
		t.overflowOpt[o] = metric.WithAttributeSet(attribute.NewSet(attribute.String("what", o.String())))
	}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	histogram := func(name, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, desc string) metric.Int64Gauge {
		g, err := m.Int64Gauge(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	writes, err := m.Int64ObservableCounter("annals.journal.writes", metric.WithDescription("atomic writes sent to the store"))
	errs = append(errs, err)
	events, err := m.Int64ObservableCounter("annals.journal.events", metric.WithDescription("events sent to the store"))
	errs = append(errs, err)
	rejections, err := m.Int64ObservableCounter("annals.journal.rejections", metric.WithDescription("atomic writes the store refused"))
	errs = append(errs, err)
	t.callDuration = seconds("annals.journal.call.duration", "duration of one store call", DurationBuckets())
	t.callEvents = histogram("annals.journal.call.events", "events per store call")
	t.queue = histogram("annals.journal.queue", "atomic writes waiting when a call was sent")
	t.breaker = gauge("annals.journal.breaker.state", "the circuit breaker: 0 closed, 1 half-open, 2 open")
	t.recoveries = counter("annals.entity.recoveries", "entity recoveries")
	t.recoveryDuration = seconds("annals.entity.recovery.duration", "duration of one recovery", DurationBuckets())
	t.recoveryEvents = histogram("annals.entity.recovery.events", "events replayed per recovery")
	live, err := m.Int64ObservableUpDownCounter("annals.entity.live", metric.WithDescription("entities recovered and not yet passivated or stopped"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelannals: %w", err)
	}
	t.registration, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(writes, t.writes.Load())
		o.ObserveInt64(events, t.events.Load())
		o.ObserveInt64(rejections, t.rejections.Load())
		o.ObserveInt64(live, t.live.Load())
		return nil
	}, writes, events, rejections, live)
	errs = append(errs, err)
	t.passivations = counter("annals.entity.passivations", "entities passivated")
	t.stops = counter("annals.entity.stops", "entities stopped")
	t.restarts = counter("annals.entity.restarts", "entity restarts scheduled")
	t.snapshots = counter("annals.entity.snapshots", "snapshots taken")
	t.overflows = counter("annals.entity.overflows", "commands refused for a full mailbox or stash")
	t.lag = seconds("annals.projection.lag", "age of the last event an offset save covers", LagBuckets())
	t.offsetsSaved = counter("annals.projection.offsets.saved", "offsets saved")
	t.handlerErrors = counter("annals.projection.handler.errors", "projection handler errors")
	t.paused = gauge("annals.projection.paused", "1 while the projection is paused")
	t.running = gauge("annals.projection.running", "1 while the projection's Run runs, 0 once it returned")
	t.projectionRestarts = counter("annals.projection.restarts", "projection restarts scheduled after a failed run")
	t.heartbeat = seconds("annals.cluster.heartbeat.duration", "duration of one heartbeat of the member's membership and leases", DurationBuckets())
	t.handOff = seconds("annals.cluster.handoff.duration", "duration of one graceful hand-off, until the lease was released", DurationBuckets())
	t.leasesAcquired = counter("annals.cluster.leases.acquired", "leases the member acquired and started serving")
	t.leasesLost = counter("annals.cluster.leases.lost", "leases the member stopped serving without giving them up")
	t.members = gauge("annals.cluster.members", "live members the member sees")
	if err := errors.Join(errs...); err != nil {
		if t.registration != nil {
			err = errors.Join(err, t.registration.Unregister())
		}
		return nil, fmt.Errorf("otelannals: %w", err)
	}
	return t, nil
}

// Close unregisters the telemetry's observable instruments from the meter
// provider (the counts of writes, events, rejections and live entities),
// which otherwise keeps the telemetry for the life of the provider. Hooks
// called after Close still count; nothing reports them. Close is
// idempotent.
func (t *Telemetry) Close() error {
	t.mu.Lock()
	r := t.registration
	t.registration = nil
	t.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Unregister()
}

var (
	_ entity.HookCommandStart         = (*Telemetry)(nil)
	_ entity.HookCommandEnd           = (*Telemetry)(nil)
	_ entity.HookPersistStart         = (*Telemetry)(nil)
	_ entity.HookPersistEnd           = (*Telemetry)(nil)
	_ engine.HookWriteCall            = (*Telemetry)(nil)
	_ engine.HookBreakerStateChange   = (*Telemetry)(nil)
	_ entity.HookRecovered            = (*Telemetry)(nil)
	_ entity.HookPassivated           = (*Telemetry)(nil)
	_ entity.HookStopped              = (*Telemetry)(nil)
	_ entity.HookRestartScheduled     = (*Telemetry)(nil)
	_ entity.HookSnapshot             = (*Telemetry)(nil)
	_ entity.HookOverflow             = (*Telemetry)(nil)
	_ projection.HookOffsetSaved      = (*Telemetry)(nil)
	_ projection.HookHandlerError     = (*Telemetry)(nil)
	_ projection.HookPaused           = (*Telemetry)(nil)
	_ projection.HookResumed          = (*Telemetry)(nil)
	_ projection.HookStarted          = (*Telemetry)(nil)
	_ projection.HookStopped          = (*Telemetry)(nil)
	_ projection.HookRestartScheduled = (*Telemetry)(nil)
	_ cluster.HookHeartbeat           = (*Telemetry)(nil)
	_ cluster.HookLeaseAcquired       = (*Telemetry)(nil)
	_ cluster.HookLeaseReleased       = (*Telemetry)(nil)
	_ cluster.HookLeaseLost           = (*Telemetry)(nil)
	_ cluster.HookMembersChanged      = (*Telemetry)(nil)
)

// The hooks are called without a context; the measurements carry none.
var bg = context.Background()

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, engine.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, engine.ErrCallTimeout):
		return "timeout"
	}
	return "error"
}

// OnWriteCall implements engine.HookWriteCall.
func (t *Telemetry) OnWriteCall(c engine.WriteCall) {
	out := t.outcomes[outcome(c.Err)]
	t.writes.Add(int64(c.Writes))
	t.events.Add(int64(c.Events))
	if c.Rejected > 0 {
		t.rejections.Add(int64(c.Rejected))
	}
	t.callDuration.Record(bg, c.Duration.Seconds(), out)
	t.callEvents.Record(bg, int64(c.Events))
	t.queue.Record(bg, int64(c.Queued))
	if t.tracer == nil {
		return
	}
	end := c.Start.Add(c.Duration)
	parent := bg
	var links []trace.Link
	for i, ctx := range c.Contexts {
		if i == 0 {
			parent = ctx
			continue
		}
		if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	_, span := t.tracer.Start(parent, "annals.journal.write", trace.WithTimestamp(c.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...))
	if span.IsRecording() { // attributes cost allocations: only for spans kept
		span.SetAttributes(attribute.Int("annals.writes", c.Writes), attribute.Int("annals.events", c.Events),
			attribute.Int("annals.rejected", c.Rejected), attribute.String("annals.outcome", outcome(c.Err)))
	}
	endSpan(span, c.Err, trace.WithTimestamp(end))
}

// endSpan ends span, with an error status when err is not nil.
func endSpan(span trace.Span, err error, opts ...trace.SpanEndOption) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(opts...)
}

// spanKey keys the spans the telemetry started in a context, so its end
// hooks end their own span even when a later hook started another.
type spanKey int

const (
	commandSpan spanKey = iota
	persistSpan
)

// ownSpan returns the span of kind the telemetry put in ctx, if any.
func ownSpan(ctx context.Context, kind spanKey) (trace.Span, bool) {
	s, ok := ctx.Value(kind).(trace.Span)
	return s, ok
}

// OnCommandStart implements entity.HookCommandStart: it starts the
// command's span.
func (t *Telemetry) OnCommandStart(ctx context.Context, pid string) context.Context {
	if t.tracer == nil {
		return ctx
	}
	ctx, span := t.tracer.Start(ctx, "annals.command")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("annals.persistence_id", pid))
	}
	return context.WithValue(ctx, commandSpan, span)
}

// OnCommandEnd implements entity.HookCommandEnd: it ends the command's
// span.
func (t *Telemetry) OnCommandEnd(ctx context.Context, _ string, err error) {
	if t.tracer == nil {
		return
	}
	if span, ok := ownSpan(ctx, commandSpan); ok {
		endSpan(span, err)
	}
}

// OnPersistStart implements entity.HookPersistStart: it starts the
// persist's span.
func (t *Telemetry) OnPersistStart(ctx context.Context, p entity.Persist) context.Context {
	if t.tracer == nil {
		return ctx
	}
	ctx, span := t.tracer.Start(ctx, "annals.persist")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("annals.persistence_id", p.PersistenceID),
			attribute.Int64("annals.from_sequence_nr", p.FromSequenceNr), attribute.Int64("annals.to_sequence_nr", p.ToSequenceNr))
	}
	return context.WithValue(ctx, persistSpan, span)
}

// OnPersistEnd implements entity.HookPersistEnd: it ends the persist's
// span.
func (t *Telemetry) OnPersistEnd(ctx context.Context, _ entity.Persist, err error) {
	if t.tracer == nil {
		return
	}
	if span, ok := ownSpan(ctx, persistSpan); ok {
		endSpan(span, err)
	}
}

// OnBreakerStateChange implements engine.HookBreakerStateChange.
func (t *Telemetry) OnBreakerStateChange(_, to engine.BreakerState) {
	t.breaker.Record(bg, int64(to))
}

// OnRecovered implements entity.HookRecovered.
func (t *Telemetry) OnRecovered(r entity.Recovered) {
	t.recoveries.Add(bg, 1, t.okOr(r.Err))
	t.recoveryDuration.Record(bg, r.Duration.Seconds())
	t.recoveryEvents.Record(bg, r.Events)
	if r.Err == nil {
		t.mu.Lock()
		t.liveIDs[r.PersistenceID]++
		t.mu.Unlock()
		t.live.Add(1)
	}
}

// okOr is the outcome attribute of err: ok or error.
func (t *Telemetry) okOr(err error) metric.MeasurementOption {
	if err == nil {
		return t.okOrError[0]
	}
	return t.okOrError[1]
}

// gone counts an entity out of the live ones.
func (t *Telemetry) gone(pid string) {
	t.mu.Lock()
	n := t.liveIDs[pid]
	if n > 1 {
		t.liveIDs[pid] = n - 1
	} else {
		delete(t.liveIDs, pid)
	}
	t.mu.Unlock()
	if n > 0 {
		t.live.Add(-1)
	}
}

// OnPassivated implements entity.HookPassivated.
func (t *Telemetry) OnPassivated(pid string) {
	t.passivations.Add(bg, 1)
	t.gone(pid)
}

// OnStopped implements entity.HookStopped.
func (t *Telemetry) OnStopped(pid string, _ error) {
	t.stops.Add(bg, 1)
	t.gone(pid)
}

// OnRestartScheduled implements entity.HookRestartScheduled.
func (t *Telemetry) OnRestartScheduled(string, error, time.Duration) { t.restarts.Add(bg, 1) }

// OnSnapshot implements entity.HookSnapshot.
func (t *Telemetry) OnSnapshot(_ string, _ int64, err error) {
	t.snapshots.Add(bg, 1, t.okOr(err))
}

// OnOverflow implements entity.HookOverflow.
func (t *Telemetry) OnOverflow(_ string, what entity.Overflow) {
	if int(what) < len(t.overflowOpt) {
		t.overflows.Add(bg, 1, t.overflowOpt[what])
	}
}

// projectionAttrs returns the attribute option of a projection's
// measurements, made once per projection (an option made per call costs
// an allocation, and offsets are saved per envelope).
func (t *Telemetry) projectionAttrs(id projection.ID) metric.MeasurementOption {
	if o, ok := t.byProjection.Load(id); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attribute.String("projection", id.Name), attribute.String("key", id.Key)))
	actual, _ := t.byProjection.LoadOrStore(id, o)
	return actual.(metric.MeasurementOption)
}

// OnOffsetSaved implements projection.HookOffsetSaved.
func (t *Telemetry) OnOffsetSaved(id projection.ID, _ query.Offset, lag time.Duration) {
	attrs := t.projectionAttrs(id)
	t.offsetsSaved.Add(bg, 1, attrs)
	t.lag.Record(bg, lag.Seconds(), attrs)
}

// OnHandlerError implements projection.HookHandlerError.
func (t *Telemetry) OnHandlerError(id projection.ID, _ string, _ error, d projection.Decision) {
	t.handlerErrors.Add(bg, 1, metric.WithAttributes(attribute.String("projection", id.Name), attribute.String("key", id.Key), attribute.String("decision", d.String())))
}

// OnProjectionPaused implements projection.HookPaused.
func (t *Telemetry) OnProjectionPaused(id projection.ID) {
	t.paused.Record(bg, 1, t.projectionAttrs(id))
}

// OnProjectionResumed implements projection.HookResumed.
func (t *Telemetry) OnProjectionResumed(id projection.ID) {
	t.paused.Record(bg, 0, t.projectionAttrs(id))
}

// OnProjectionStarted implements projection.HookStarted.
func (t *Telemetry) OnProjectionStarted(id projection.ID) {
	t.running.Record(bg, 1, t.projectionAttrs(id))
}

// OnProjectionStopped implements projection.HookStopped.
func (t *Telemetry) OnProjectionStopped(id projection.ID, _ error) {
	t.running.Record(bg, 0, t.projectionAttrs(id))
}

// OnProjectionRestartScheduled implements projection.HookRestartScheduled.
func (t *Telemetry) OnProjectionRestartScheduled(id projection.ID, _ error, _ time.Duration) {
	t.projectionRestarts.Add(bg, 1, t.projectionAttrs(id))
}

// OnHeartbeat implements cluster.HookHeartbeat: the duration, by outcome.
func (t *Telemetry) OnHeartbeat(took time.Duration, _ int, err error) {
	t.heartbeat.Record(bg, took.Seconds(), t.okOr(err))
}

// OnLeaseAcquired implements cluster.HookLeaseAcquired.
func (t *Telemetry) OnLeaseAcquired(membership.Lease) { t.leasesAcquired.Add(bg, 1) }

// OnLeaseReleased implements cluster.HookLeaseReleased: the hand-off's
// duration, by outcome.
func (t *Telemetry) OnLeaseReleased(_ string, handOff time.Duration, err error) {
	t.handOff.Record(bg, handOff.Seconds(), t.okOr(err))
}

// OnLeaseLost implements cluster.HookLeaseLost.
func (t *Telemetry) OnLeaseLost(string, error) { t.leasesLost.Add(bg, 1) }

// OnMembersChanged implements cluster.HookMembersChanged.
func (t *Telemetry) OnMembersChanged(live []membership.Member) {
	t.members.Record(bg, int64(len(live)))
}
