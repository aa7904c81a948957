package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/annals-go/annals"
)

// HeaderForwardedBy marks a request a member forwarded to the owner of its
// entity, with the forwarding member's name. A request that carries it is
// never forwarded again (one hop).
const HeaderForwardedBy = "Annals-Forwarded-By"

// DefaultMaxBody is HandlerConfig.MaxBody's default: 1 MiB.
const DefaultMaxBody = 1 << 20

// HandlerConfig configures Member.Handler. Key is required.
type HandlerConfig struct {
	// Key returns the persistence id a request is for, or false for a
	// request that is for no entity (it is served here).
	Key func(r *http.Request) (persistenceID string, ok bool)
	// MoveWait bounds how long a request waits for its entity to get an
	// owner while its range moves (default the Router's MoveWait: for a
	// Member, LeaseTime plus three heartbeats). When it passes the request
	// is answered 503 Service Unavailable with Retry-After.
	MoveWait time.Duration
	// MaxBody bounds the body of a request (default DefaultMaxBody): the
	// body is kept so that the request can be sent again while its range
	// moves. A larger body is answered 413.
	MaxBody int64
	// Transport forwards requests to other members (default: a clone of
	// http.DefaultTransport keeping 64 idle connections per member).
	Transport http.RoundTripper
}

// PathKey returns a HandlerConfig.Key that takes the entity id from the
// path wildcard wildcard (http.Request.PathValue) of routes of
// http.ServeMux: the persistence id of entityType and that id.
func PathKey(entityType, wildcard string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		id := r.PathValue(wildcard)
		if id == "" {
			return "", false
		}
		return annals.PersistenceID(entityType, id), true
	}
}

// errMisdirected is an attempt answered 421 by the member it reached.
var errMisdirected = errors.New("cluster: the member reached does not own the entity")

// attempt carries the outcome of one forwarded attempt out of the proxy.
type attempt struct {
	err      error // the request was not handled: try again
	answered bool  // the proxy answered the client itself
}

type attemptKey struct{}

type targetKey struct{}

// Router tells where an entity runs: the ownership a Handler follows. A
// *Member is one; so is a member of a Kafka journal's consumer group
// (package store/kafka/kafkacluster).
type Router interface {
	// Name is this member's name, sent in HeaderForwardedBy.
	Name() string
	// OwnerOf returns the owner of persistenceID as the router last knew
	// it, or false while it has none (its unit is moving).
	OwnerOf(persistenceID string) (Owner, bool)
	// Changed returns a channel closed when the router next learns the
	// ownership again, or, once the router has stopped learning it (its
	// member left), soon after a Refresh, so that those waiting try its
	// last view again: a request waiting for a move waits on it.
	Changed() <-chan struct{}
	// Refresh asks the router to learn the ownership again soon (a router
	// that has stopped learning it wakes those waiting on Changed soon
	// instead): a request found the owner it named gone or not owning.
	Refresh()
	// MoveWait is how long a failed owner's units take to get a new
	// owner: HandlerConfig.MoveWait's default.
	MoveWait() time.Duration
}

var _ Router = (*Member)(nil)

// Refresh asks the member to read the cluster again soon (at most four
// times a heartbeat), as a Router. Once Leave has stopped the member's
// loop, no look follows a Refresh (Leave reads the cluster on its own
// while it lingers, and not after it returns): the member wakes those
// waiting on Changed a quarter heartbeat later instead, so that they try
// its latest view again. A request for a range whose new owner does not
// serve it yet (421) is thus sent there again, as on a member still in
// the cluster, rather than waiting out its MoveWait.
func (m *Member) Refresh() {
	if m.ctx.Err() == nil {
		m.lookSoon()
		return
	}
	m.wakeSoon.After(m.cfg.Heartbeat/4, m.wakeWaiting)
}

// MoveWait is LeaseTime plus three heartbeats: a failed member's ranges
// are taken within LeaseTime and a heartbeat, and a waiting request has
// the member look at the cluster again soon after.
func (m *Member) MoveWait() time.Duration { return m.cfg.LeaseTime + 3*m.cfg.Heartbeat }

// Handler returns the middleware NewHandler makes with m as its Router.
func (m *Member) Handler(next http.Handler, cfg HandlerConfig) (http.Handler, error) {
	return NewHandler(m, next, cfg)
}

// NewHandler returns middleware that runs each request on the member that
// owns its entity, as router tells: served by next here when this member
// owns it, or forwarded once to the owner's address (which serves it with
// its own handler and next). While the entity has no owner (its unit is
// moving, or its member failed and no other has taken it yet) the request
// waits, at most cfg.MoveWait, and is then answered 503 with Retry-After;
// when the owner's address refused the connection all along (a live
// member whose address does not answer) it is answered 502 naming the
// member and its address.
//
// A handler that finds the entity moved under it (its host answered a
// *entity.NotOwnedError) answers 421 Misdirected Request: the command was
// not handled, so the middleware runs the request again where the entity
// is now. A forwarded request whose entity the receiving member does not
// own is answered 421 to the forwarding member, which tries again. Only
// the status 421 is taken this way; every other answer is the request's.
// A request is sent again only when it was not handled: answered 421, or
// refused by the owner's address (a connection that could not be made).
// When the owner fails after the request reached it (the connection
// breaks before an answer), the command may have been handled, and the
// request is answered 502 Bad Gateway, outcome unknown, never sent twice.
func NewHandler(router Router, next http.Handler, cfg HandlerConfig) (http.Handler, error) {
	switch {
	case router == nil:
		return nil, errors.New("cluster: NewHandler's router is nil")
	case cfg.Key == nil:
		return nil, errors.New("cluster: HandlerConfig.Key is nil")
	case cfg.MoveWait < 0 || cfg.MaxBody < 0:
		return nil, errors.New("cluster: HandlerConfig has a negative setting")
	}
	if cfg.MoveWait == 0 {
		cfg.MoveWait = router.MoveWait()
	}
	if cfg.Transport == nil {
		// Go's default keeps two idle connections per host: under load
		// most forwards would open a connection of their own.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		cfg.Transport = t
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	name := router.Name()
	// A waiting request gives up after MoveWait: a client told to retry
	// comes back after an eighth of it (a heartbeat with the defaults).
	retryAfter := strconv.Itoa(max(1, int(cfg.MoveWait/8/time.Second)))
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(targetKey{}).(*url.URL))
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwardedBy, name)
		},
		Transport:  cfg.Transport,
		BufferPool: newBufferPool(),
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusMisdirectedRequest {
				return errMisdirected
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			att := r.Context().Value(attemptKey{}).(*attempt)
			var op *net.OpError
			if errors.Is(err, errMisdirected) || (errors.As(err, &op) && op.Op == "dial") {
				att.err = err // not handled there: run it where the entity is now
				return
			}
			// The owner may have handled the command before its answer was
			// lost: sending it again could apply it twice.
			att.answered = true
			http.Error(w, fmt.Sprintf("cluster: the owning member failed while handling the request, outcome unknown: %v", err), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pid, ok := cfg.Key(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		forwarded := r.Header.Get(HeaderForwardedBy) != ""
		body, err := readBody(r, cfg.MaxBody)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), cfg.MoveWait)
		defer cancel()
		var unreachable error // the last owner that refused the connection
		for {
			changed := router.Changed()
			owner, ok := router.OwnerOf(pid)
			switch {
			case ok && owner.Local:
				iw := &interceptWriter{w: w, header: http.Header{}, pass421: forwarded}
				next.ServeHTTP(iw, withBody(r, r.Context(), body))
				if !iw.misdirected {
					return
				}
			case forwarded:
				http.Error(w, fmt.Sprintf("cluster: member %s does not own %s", name, pid), http.StatusMisdirectedRequest)
				return
			case ok:
				target, err := memberURL(owner.Address)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				att := &attempt{}
				actx := context.WithValue(context.WithValue(r.Context(), attemptKey{}, att), targetKey{}, target)
				proxy.ServeHTTP(w, withBody(r, actx, body))
				if att.err == nil || att.answered {
					return
				}
				if !errors.Is(att.err, errMisdirected) {
					unreachable = fmt.Errorf("member %s at %s does not answer: %w", owner.Member, owner.Address, att.err)
				}
				if r.Context().Err() != nil {
					return // the client went away
				}
			}
			router.Refresh() // the owner may have changed since the last look
			select {
			case <-changed:
			case <-ctx.Done():
				if r.Context().Err() != nil {
					return
				}
				if unreachable != nil {
					http.Error(w, fmt.Sprintf("cluster: the owner of %s: %v", pid, unreachable), http.StatusBadGateway)
					return
				}
				w.Header().Set("Retry-After", retryAfter)
				http.Error(w, fmt.Sprintf("cluster: no member serves %s yet (its range is moving); try again", pid), http.StatusServiceUnavailable)
				return
			}
		}
	}), nil
}

// readBody reads r's body whole, refusing one over limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the request body: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("cluster: request body over %d bytes", limit)
	}
	return b, nil
}

// withBody returns r with ctx and a fresh reader of body.
func withBody(r *http.Request, ctx context.Context, body []byte) *http.Request {
	r2 := r.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r2
}

// memberURL returns the base URL of a member's address.
func memberURL(address string) (*url.URL, error) {
	if address == "" {
		return nil, errors.New("cluster: the owning member has no address")
	}
	if !strings.Contains(address, "://") {
		address = "http://" + address
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("cluster: the owning member's address %q: %w", address, err)
	}
	return u, nil
}

// interceptWriter passes a response through, except a 421 it is to take:
// that one is swallowed and reported, so the request can run elsewhere.
type interceptWriter struct {
	w           http.ResponseWriter
	header      http.Header
	pass421     bool
	wrote       bool
	misdirected bool
}

func (iw *interceptWriter) Header() http.Header { return iw.header }

func (iw *interceptWriter) WriteHeader(code int) {
	if iw.wrote {
		return
	}
	iw.wrote = true
	if code == http.StatusMisdirectedRequest && !iw.pass421 {
		iw.misdirected = true
		return
	}
	for k, v := range iw.header {
		iw.w.Header()[k] = v
	}
	iw.w.WriteHeader(code)
}

func (iw *interceptWriter) Write(b []byte) (int, error) {
	if !iw.wrote {
		iw.WriteHeader(http.StatusOK)
	}
	if iw.misdirected {
		return len(b), nil
	}
	return iw.w.Write(b)
}

// Unwrap gives http.ResponseController the writer beneath.
func (iw *interceptWriter) Unwrap() http.ResponseWriter { return iw.w }

// bufferPool lends the proxy its copy buffers instead of a new 32 KiB
// buffer per forwarded response; each handler has its own.
type bufferPool struct{ pool *sync.Pool }

func newBufferPool() bufferPool {
	return bufferPool{pool: &sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (p bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p bufferPool) Put(b []byte) { p.pool.Put(&b) }
