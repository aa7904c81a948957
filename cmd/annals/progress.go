package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress reports the operations done on stderr: a bar redrawn in place
// when stderr is a terminal, otherwise one line per 10%.
type progress struct {
	w   *syncWriter
	tty bool

	total int64
	done  *atomic.Int64
	t0    time.Time
	quit  chan struct{}
	ended chan struct{}
	tenth int64 // tenths reported (line mode)
	// status, when set, adds to each report (bar: a terminal redraw).
	status func(bar bool) string
}

func newProgress(stderr io.Writer) *progress {
	return &progress{w: &syncWriter{w: stderr}, tty: isTerminal(stderr)}
}

// isTerminal reports whether w is a terminal: a character device other than
// the null device. (The standard library has no isatty; this test, unlike
// golang.org/x/term's ioctl, needs no dependency and is right for what the
// demo writes to: a terminal, a file, a pipe or /dev/null.)
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// start reports on done, out of total, until stop.
func (p *progress) start(total int64, done *atomic.Int64) {
	p.total, p.done, p.t0 = total, done, time.Now()
	p.quit, p.ended = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.ended)
		if total <= 0 {
			return
		}
		every := time.Second / 10
		if !p.tty {
			every = time.Second / 20
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.report(false)
			}
		}
	}()
}

// stop ends the reports: the bar is erased; in line mode the tenths reached
// since the last report are printed.
func (p *progress) stop() {
	close(p.quit)
	<-p.ended
	if p.total > 0 {
		p.report(true)
	}
}

func (p *progress) report(final bool) {
	n := p.done.Load()
	secs := time.Since(p.t0).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(n) / secs
	}
	if p.tty {
		if final {
			p.w.clearBar()
			return
		}
		const width = 30
		filled := int(int64(width) * n / p.total)
		eta := "?"
		if rate > 0 {
			eta = dur(time.Duration(float64(p.total-n) / rate * float64(time.Second)).Round(time.Second))
		}
		p.w.bar(fmt.Sprintf("%3d%% [%s%s] %s/%s ops  %s ops/s  eta %s%s",
			100*n/p.total, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			num(n), num(p.total), num(int64(rate)), eta, p.extra(true)))
		return
	}
	for ; p.tenth < 10*n/p.total; p.tenth++ {
		fmt.Fprintf(p.w, "progress %3d%%  %s/%s ops  %s ops/s%s\n", (p.tenth+1)*10, num(n), num(p.total), num(int64(rate)), p.extra(false))
	}
}

func (p *progress) extra(bar bool) string {
	if p.status == nil {
		return ""
	}
	return p.status(bar)
}

// syncWriter serializes writes to w, from the progress reporter and the
// entities' logger. On a terminal, a write first erases the progress bar,
// which the next report redraws.
type syncWriter struct {
	mu     sync.Mutex
	w      io.Writer
	barred bool // a bar is on the current line
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	return s.w.Write(b)
}

func (s *syncWriter) bar(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "\r\033[K%s", line)
	s.barred = true
}

func (s *syncWriter) clearBar() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
}

func (s *syncWriter) clearLocked() {
	if s.barred {
		fmt.Fprint(s.w, "\r\033[K")
		s.barred = false
	}
}

// statusLine redraws line() in place on stderr every tenth of a second
// while a long command runs, when stderr is a terminal (and does nothing
// otherwise). stop erases it.
func statusLine(stderr io.Writer, line func() string) (stop func()) {
	if !isTerminal(stderr) {
		return func() {}
	}
	w := &syncWriter{w: stderr}
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(time.Second / 10)
		defer t.Stop()
		for {
			select {
			case <-quit:
				w.clearBar()
				return
			case <-t.C:
				w.bar(line())
			}
		}
	}()
	return func() { close(quit); <-ended }
}
