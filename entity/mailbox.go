package entity

import "sync"

// mailboxMin is the number of slots a mailbox allocates on its first
// command and keeps when it empties; a larger buffer, grown by a burst, is
// released when the mailbox empties.
const mailboxMin = 4

// signal is a bit set of the host's requests to an instance.
type signal uint8

const (
	signalPassivate signal = 1 << iota // passivate when the mailbox is empty
	signalShutdown                     // fail waiting commands and stop
)

// mailbox holds the commands waiting for one entity, in arrival order, and
// the host's requests to it. It is safe for one sender (the host, under its
// mutex) and one receiver (the instance goroutine).
//
// Rules:
//   - put never holds more than the capacity it is given; the buffer grows
//     on demand, doubling up to it, so an entity pays for the commands that
//     wait for it, not for the capacity.
//   - wake holds a token whenever a command was put into an empty mailbox
//     or a signal was raised since the receiver last took one. A receiver
//     that found no command and no signal waits on wake; after a token it
//     looks again (a token may be stale: then it finds nothing, and waits
//     again).
type mailbox[C any] struct {
	mu      sync.Mutex
	buf     []envelope[C] // a ring: n commands from head
	head, n int
	signals signal // raised and not yet taken
	wake    chan struct{}
}

func newMailbox[C any]() mailbox[C] {
	return mailbox[C]{wake: make(chan struct{}, 1)}
}

// put appends env unless capacity commands already wait; it reports
// whether env was added.
func (m *mailbox[C]) put(env envelope[C], capacity int) bool {
	m.mu.Lock()
	if m.n >= capacity {
		m.mu.Unlock()
		return false
	}
	if m.n == len(m.buf) {
		m.grow(capacity)
	}
	m.buf[(m.head+m.n)%len(m.buf)] = env
	m.n++
	first := m.n == 1
	m.mu.Unlock()
	if first {
		m.poke()
	}
	return true
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

// len returns the number of waiting commands.
func (m *mailbox[C]) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// signal raises s; a raised signal stays until the receiver takes it.
func (m *mailbox[C]) signal(s signal) {
	m.mu.Lock()
	m.signals |= s
	m.mu.Unlock()
	m.poke()
}

// takeSignals returns the raised signals and lowers them.
func (m *mailbox[C]) takeSignals() signal {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.signals
	m.signals = 0
	return s
}

// poke leaves a token on wake, unless one is there.
func (m *mailbox[C]) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}
