package projection

import (
	"context"
	"fmt"
	"time"

	"github.com/annals-go/annals/query"
)

// runOnce loads the state, waits while paused, then handles envelopes until
// a control change (nil), the source's end (ended), ctx's end, or a
// failure. progressed reports envelopes handled.
func (p *Projection) runOnce(ctx context.Context) (ended, progressed bool, err error) {
	changed := p.control.Wait()
	p.applyResets(ctx)
	st, err := p.store.Load(ctx, p.id)
	if err != nil {
		return false, false, fmt.Errorf("projection %s: load offset: %w", p.id, err)
	}
	p.notePaused(st.Paused)
	if st.Paused {
		t := time.NewTimer(p.cfg.PausedRecheck)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-changed:
		case <-t.C:
		}
		return false, false, nil
	}
	r := p.start(ctx, changed, st.Offset)
	defer r.stop()
	ended, err = r.loop()
	return ended, r.progressed, err
}

// notePaused calls the pause or resume hooks when the stored paused flag
// changed since the last run looked.
func (p *Projection) notePaused(paused bool) {
	if paused == p.paused {
		return
	}
	p.paused = paused
	if paused {
		for _, x := range p.hooks.paused {
			x.OnProjectionPaused(p.id)
		}
		return
	}
	for _, x := range p.hooks.resumed {
		x.OnProjectionResumed(p.id)
	}
}

// run is one run of a projection, from a stored offset: a pump goroutine
// reads the source into envs, and the run's goroutine hands them to the
// sink (loop, drain) until it stops; finish saves what was handled, stop
// ends the pump.
type run struct {
	p       *Projection
	ctx     context.Context // Run's: its end stops the run, and finish then only saves
	pumpCtx context.Context // ctx, cancelled by stop: the source's and the handlers'
	cancel  context.CancelFunc
	changed <-chan struct{} // a pause, resume or reset happened in this process
	stream  *query.Stream[query.Envelope]
	envs    chan query.Envelope // the pump's output; closed when the source ends
	pumped  chan struct{}       // closed when the pump has returned
	sink    sink
	// last is the highest sequence number handled per id (duplicates and
	// gaps are found with it); streamOffset the offset of the last
	// envelope taken from the source.
	last         map[string]int64
	streamOffset query.Offset
	timer        *time.Timer  // runs while the sink has envelopes pending
	recheck      *time.Ticker // reads the paused flag other processes may set
	progressed   bool         // envelopes were handled
}

// start begins a run after offset: the pump reads the source from there.
func (p *Projection) start(ctx context.Context, changed <-chan struct{}, offset query.Offset) *run {
	r := &run{p: p, ctx: ctx, changed: changed, sink: p.newSink(), last: map[string]int64{}, streamOffset: offset,
		envs:   make(chan query.Envelope, 1024), // a buffer: hand-offs between goroutines in bulk
		pumped: make(chan struct{})}
	for id, seq := range offset.Seen {
		r.last[id] = seq
	}
	r.pumpCtx, r.cancel = context.WithCancel(ctx)
	r.stream = p.src.Events(r.pumpCtx, offset)
	go r.pump()
	r.timer = time.NewTimer(r.sink.interval())
	r.timer.Stop()
	r.recheck = time.NewTicker(p.cfg.PausedRecheck)
	return r
}

// pump reads the source into envs until it ends or the run stops.
func (r *run) pump() {
	defer close(r.pumped)
	defer close(r.envs)
	for env := range r.stream.All() {
		select {
		case r.envs <- env:
		case <-r.pumpCtx.Done():
			return
		}
	}
}

// stop ends the pump and waits for it: it must not touch the source after
// Run returned.
func (r *run) stop() {
	r.cancel()
	<-r.pumped
	r.timer.Stop()
	r.recheck.Stop()
}

// loop hands envelopes to the sink, and ticks it, until the run ends:
// ended when the source ended, err on a failure.
func (r *run) loop() (ended bool, err error) {
	for {
		select {
		case env, ok := <-r.envs:
			if done, ended, err := r.drain(env, ok); done {
				return ended, err
			}
		case <-r.timer.C:
			if err := r.sink.tick(r.ctx); err != nil {
				return false, err
			}
		case <-r.changed:
			return false, r.finish()
		case <-r.recheck.C:
			if st, err := r.p.store.Load(r.ctx, r.p.id); err == nil && st.Paused {
				return false, r.finish()
			}
		case <-r.ctx.Done():
			return false, r.finish()
		}
	}
}

// drain takes env and what is buffered behind it with plain receives
// (cheaper than a select per envelope), checking for a stop before each
// envelope: loop's select may pick envs when changed is ready too. done
// reports the end of the run, with loop's results.
func (r *run) drain(env query.Envelope, ok bool) (done, ended bool, err error) {
	for n := len(r.envs); ; n-- {
		if !ok {
			if r.ctx.Err() != nil {
				return true, false, r.finish()
			}
			if err := r.stream.Err(); err != nil {
				return true, false, fmt.Errorf("projection %s: source: %w", r.p.id, err)
			}
			return true, true, r.finish()
		}
		if r.stopNow() {
			return true, false, r.finish()
		}
		was := r.sink.pending()
		if err := r.p.accept(r.pumpCtx, r.sink, r.last, &r.streamOffset, env); err != nil {
			return true, false, err
		}
		r.progressed = true
		if !was && r.sink.pending() {
			r.timer.Reset(r.sink.interval())
		}
		if n <= 0 {
			return false, false, nil
		}
		env, ok = <-r.envs
	}
}

// stopNow reports a pause, resume, reset or shutdown that must stop
// handling before the next envelope.
func (r *run) stopNow() bool {
	select {
	case <-r.changed:
		return true
	default:
		return r.ctx.Err() != nil
	}
}

// finish ends the run: it saves what was handled (without calling a
// handler, when Run's context ended).
func (r *run) finish() error {
	if r.ctx.Err() != nil {
		return r.sink.shutdown(context.WithoutCancel(r.ctx))
	}
	return r.sink.tick(r.ctx)
}
