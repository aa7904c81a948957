package entity

import "sync"

// mailboxMin is the number of slots a mailbox allocates on its first
// command and keeps when it empties; a larger buffer, grown by a burst, is
// released when the mailbox empties.
const mailboxMin = 4

// signal is a bit set of requests to an instance.
type signal uint8

const (
	signalPassivate signal = 1 << iota // passivate when no command waits
	signalIdle                         // the idle timeout may have passed
	signalShutdown                     // fail waiting commands and stop
)

// mailbox holds the commands waiting for one entity, in arrival order, the
// signals raised for it, and whether a goroutine works for it. It is safe
// for one sender (the host, under its mutex), signals from anywhere, and
// the instance's goroutine.
//
// Rules:
//   - put never holds more than the capacity it is given; the buffer grows
//     on demand, doubling up to it, so an entity pays for the commands that
//     wait for it, not for the capacity.
//   - An entity has a goroutine only while it has work: active is set while
//     one runs for it (or is about to, or the entity has left the host for
//     good). A put or signal that finds it clear sets it and tells the
//     caller to start one; release clears it only when no command waits
//     and no signal is raised. So at most one goroutine works for an
//     entity, and none misses a command or signal.
//   - A goroutine that waits for something else (a backoff, a recovery
//     slot) and must also hear of signals waits on waiter(): it gets a
//     token after each put or signal. A token may be stale: the goroutine
//     looks, finds nothing, and waits again.
type mailbox[C any] struct {
	mu      sync.Mutex
	buf     []envelope[C] // a ring: n commands from head
	head, n int
	signals signal // raised and not yet taken
	active  bool
	wake    chan struct{} // made by the first waiter; 1-buffered
	wg      *sync.WaitGroup
}

// put appends env unless capacity commands already wait; it reports
// whether env was added, and whether the caller must start a goroutine for
// the entity (the wait group counts it already).
func (m *mailbox[C]) put(env envelope[C], capacity int) (added, start bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n >= capacity {
		return false, false
	}
	if m.n == len(m.buf) {
		m.grow(capacity)
	}
	m.buf[(m.head+m.n)%len(m.buf)] = env
	m.n++
	return true, m.wakeLocked()
}

// grow doubles the buffer (at least mailboxMin slots, at most capacity),
// keeping the commands in order. m.mu is held.
func (m *mailbox[C]) grow(capacity int) {
	buf := make([]envelope[C], min(max(2*len(m.buf), mailboxMin), capacity))
	k := copy(buf, m.buf[m.head:])
	copy(buf[k:], m.buf[:m.head])
	m.buf, m.head = buf, 0
}

// take removes and returns the oldest command, if any.
func (m *mailbox[C]) take() (envelope[C], bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == 0 {
		return envelope[C]{}, false
	}
	env := m.buf[m.head]
	m.buf[m.head] = envelope[C]{} // the command and its reply channel are garbage once handled
	m.head = (m.head + 1) % len(m.buf)
	m.n--
	if m.n == 0 {
		m.head = 0
		if len(m.buf) > mailboxMin {
			m.buf = nil // a burst's buffer is not kept by an idle entity
		}
	}
	return env, true
}

// takeCallers removes and returns the waiting commands that have a caller
// waiting for their outcome (Ask, Send), oldest first; the others (Tell)
// stay, in order.
func (m *mailbox[C]) takeCallers() []envelope[C] {
	m.mu.Lock()
	defer m.mu.Unlock()
	var taken []envelope[C]
	kept := 0
	for i := range m.n {
		j := (m.head + i) % len(m.buf)
		env := m.buf[j]
		m.buf[j] = envelope[C]{}
		if env.done != nil {
			taken = append(taken, env)
			continue
		}
		m.buf[(m.head+kept)%len(m.buf)] = env
		kept++
	}
	m.n = kept
	return taken
}

// len returns the number of waiting commands.
func (m *mailbox[C]) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// signal raises s; a raised signal stays until taken. It reports whether
// the caller must start a goroutine for the entity (the wait group counts
// it already).
func (m *mailbox[C]) signal(s signal) (start bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.signals |= s
	return m.wakeLocked()
}

// takeSignals returns the raised signals and lowers them.
func (m *mailbox[C]) takeSignals() signal {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.signals
	m.signals = 0
	return s
}

// release ends the current goroutine's work for the entity if no command
// waits and no signal is raised; it reports whether it did. After true,
// the goroutine must not touch the entity: the next put or signal starts
// another.
func (m *mailbox[C]) release() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n > 0 || m.signals != 0 {
		return false
	}
	m.active = false
	return true
}

// waiter returns the channel that gets a token after each put or signal.
func (m *mailbox[C]) waiter() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wake == nil {
		m.wake = make(chan struct{}, 1)
	}
	return m.wake
}

// wakeLocked reports whether a goroutine must be started for the entity,
// marking it active and counting it in the wait group, or else leaves a
// token for a waiting goroutine. m.mu is held. The count is taken under
// m.mu so that it precedes any later signal, such as a shutdown's, and
// the host's wait for its goroutines.
func (m *mailbox[C]) wakeLocked() bool {
	if !m.active {
		m.active = true
		m.wg.Add(1)
		return true
	}
	if m.wake != nil {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return false
}
