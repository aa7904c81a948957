package entity

import "sync"

// ReplyTo is where a command's reply goes. Ask creates one and passes it to
// the function that builds the command; the command carries it, and the
// handler sends to it in ThenReply. The zero ReplyTo (a command sent with
// Tell) discards what is sent.
type ReplyTo[R any] struct{ c *replyCell[R] }

type replyCell[R any] struct {
	once  sync.Once
	value R
	err   error
	sent  chan struct{}
}

func newReplyTo[R any]() ReplyTo[R] {
	return ReplyTo[R]{c: &replyCell[R]{sent: make(chan struct{})}}
}

// Send delivers v. Only the first Send or Fail counts; later ones are
// ignored.
func (r ReplyTo[R]) Send(v R) {
	if r.c == nil {
		return
	}
	r.c.once.Do(func() { r.c.value = v; close(r.c.sent) })
}

// Fail delivers err as the reply: the Ask returns it. Only the first Send or
// Fail counts.
func (r ReplyTo[R]) Fail(err error) {
	if r.c == nil {
		return
	}
	r.c.once.Do(func() { r.c.err = err; close(r.c.sent) })
}
