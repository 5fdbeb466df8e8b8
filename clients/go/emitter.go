package gateway

import (
	"container/list"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Request is one request a gateway served.
type Request struct {
	Namespace string
	Model     string
	// WorkloadClass "background" is never published; empty or "foreground" is a foreground request.
	WorkloadClass string
	// Time of the request; zero means now.
	Time time.Time
	// W3C trace context of the gateway's request span, if any (CloudEvents distributed tracing).
	TraceParent, TraceState string
}

// Outcome says what became of one Emit call.
type Outcome string

const (
	Published  Outcome = "published"  // stored by JetStream (acknowledged)
	Throttled  Outcome = "throttled"  // held for the trailing event of the per-model throttle
	Buffered   Outcome = "buffered"   // NATS unreachable or slow: the newest per model is kept and sent on reconnect
	Background Outcome = "background" // a background-class request: never published
	Invalid    Outcome = "invalid"    // namespace or model is no Kubernetes name: never published, reported
	Dropped    Outcome = "dropped"    // the emitter is closed
)

// DropReason says why a request was lost.
type DropReason string

const (
	Overflow      DropReason = "overflow" // the buffer was full: alert on it
	Closed        DropReason = "closed"   // still unsent at Close
	InvalidName   DropReason = "invalid"  // not a Kubernetes name
	maxThrottled             = 10_000
	flushBatch               = 256
	flushRetry               = 250 * time.Millisecond
	flushRetryMax            = 5 * time.Second
)

// Options of an Emitter; the zero value is usable.
type Options struct {
	Credentials Credentials
	// Source is the CloudEvents source and the connection name (default flexinfer-gateway).
	Source string
	// ThrottleMs > 0: per model, the first request after a quiet period at once, then at most one event per
	// interval carrying the newest request time.
	ThrottleMs int
	// PublishTimeout bounds Emit (default 1 s): past it the request is buffered.
	PublishTimeout time.Duration
	// MaxBuffered models held while NATS is unreachable (default 10,000); beyond it the least recently requested
	// model is dropped.
	MaxBuffered int
	// OnDrop is called for every request lost (it must not block).
	OnDrop func(Request, DropReason)
	Logger *slog.Logger
}

// Stats are the emitter's counts.
type Stats struct {
	Emitted, Throttled, Background, Invalid, Buffered, Coalesced, Dropped, Flushed, FailedPublishes, Pending int
}

type stamped struct {
	Request
	id string
}

type throttle struct {
	lastSent time.Time
	pending  *stamped
	timer    *time.Timer
}

// Emitter publishes foreground requests; safe for concurrent use.
type Emitter struct {
	opts Options
	// conn is stored once js is set: whoever sees a connection also sees its JetStream context.
	conn     atomic.Pointer[nats.Conn]
	js       jetstream.JetStream
	mu       sync.Mutex
	stats    Stats
	buffer   map[string]*list.Element
	order    *list.List // least recently requested first
	models   map[string]*throttle
	closed   bool
	flushing bool
	retry    time.Duration
	log      *slog.Logger
}

// Open connects (in the background, retrying forever) and returns at once, whether or not NATS is up: requests are
// buffered until the first connection. The error is a configuration error only.
func Open(servers string, opts Options) (*Emitter, error) {
	if opts.Source == "" {
		opts.Source = "flexinfer-gateway"
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = time.Second
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = 10_000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Emitter{
		opts:   opts,
		buffer: map[string]*list.Element{},
		order:  list.New(),
		models: map[string]*throttle{},
		retry:  flushRetry,
		log:    opts.Logger,
	}
	url, natsOpts, err := ConnectionOptions(servers, opts.Credentials, opts.Source)
	if err != nil {
		return nil, err
	}
	natsOpts = append(natsOpts,
		nats.ConnectHandler(func(*nats.Conn) { e.onConnect() }),
		nats.ReconnectHandler(func(*nats.Conn) { e.onConnect() }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { e.log.Debug("nats", "err", err) }),
	)
	nc, err := nats.Connect(url, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	e.js = js
	e.conn.Store(nc)
	if nc.IsConnected() {
		e.onConnect()
	}
	return e, nil
}

// Connected says whether the connection is up now.
func (e *Emitter) Connected() bool {
	nc := e.conn.Load()
	return nc != nil && nc.IsConnected()
}

// Stats returns a copy of the counts.
func (e *Emitter) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Pending = len(e.buffer)
	return s
}

func (e *Emitter) onConnect() {
	e.mu.Lock()
	e.retry = flushRetry
	e.mu.Unlock()
	e.scheduleFlush(0)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// drop reports a lost request; the callback runs without the lock.
func (e *Emitter) drop(r Request, why DropReason) {
	e.mu.Lock()
	e.stats.Dropped++
	e.mu.Unlock()
	if e.opts.OnDrop != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					e.log.Error("OnDrop panicked", "panic", p)
				}
			}()
			e.opts.OnDrop(r, why)
		}()
	}
}

// store keeps the newest request per model (caller holds the lock); returns a request dropped for overflow.
func (e *Emitter) store(r *stamped) *stamped {
	key := r.Namespace + "." + r.Model
	if el, ok := e.buffer[key]; ok {
		e.stats.Coalesced++
		held := el.Value.(*stamped)
		if !held.Time.After(r.Time) {
			el.Value = r
		}
		e.order.MoveToBack(el)
		return nil
	}
	var dropped *stamped
	if len(e.buffer) >= e.opts.MaxBuffered {
		front := e.order.Front()
		dropped = front.Value.(*stamped)
		e.order.Remove(front)
		delete(e.buffer, dropped.Namespace+"."+dropped.Model)
	}
	e.buffer[key] = e.order.PushBack(r)
	return dropped
}

func (e *Emitter) bufferRequest(r *stamped) {
	e.mu.Lock()
	e.stats.Buffered++
	dropped := e.store(r)
	e.mu.Unlock()
	if dropped != nil {
		e.drop(dropped.Request, Overflow)
	}
}

func (e *Emitter) publish(ctx context.Context, r *stamped) error {
	if !e.Connected() {
		return nats.ErrConnectionClosed
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.PublishTimeout)
	defer cancel()
	// Nats-Msg-Id: a publish whose ack was lost and that is sent again from the buffer is stored once.
	_, err := e.js.Publish(ctx, PerModelSubject(r.Namespace, r.Model), EncodeForegroundRequest(r.Request, r.id, e.opts.Source),
		jetstream.WithMsgID(r.id))
	if err == nil {
		e.mu.Lock()
		e.stats.Emitted++
		e.mu.Unlock()
	}
	return err
}

func (e *Emitter) send(r *stamped) Outcome {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		e.drop(r.Request, Closed)
		return Dropped
	}
	if !e.Connected() {
		e.bufferRequest(r)
		return Buffered
	}
	e.mu.Lock()
	key := r.Namespace + "." + r.Model
	if el, ok := e.buffer[key]; ok && !el.Value.(*stamped).Time.After(r.Time) {
		e.order.Remove(el)
		delete(e.buffer, key)
		e.stats.Coalesced++
	}
	e.mu.Unlock()
	if err := e.publish(context.Background(), r); err != nil {
		e.mu.Lock()
		e.stats.FailedPublishes++
		retry := e.retry
		e.mu.Unlock()
		e.bufferRequest(r)
		e.scheduleFlush(retry)
		return Buffered
	}
	return Published
}

func (e *Emitter) scheduleFlush(delay time.Duration) {
	e.mu.Lock()
	if e.flushing || e.closed {
		e.mu.Unlock()
		return
	}
	e.flushing = true
	e.mu.Unlock()
	go func() {
		time.Sleep(delay)
		e.flush()
	}()
}

// flush publishes the buffer in batches while connected; on a failure it backs off and tries again.
func (e *Emitter) flush() {
	for e.Connected() {
		e.mu.Lock()
		var batch []*stamped
		for el := e.order.Front(); el != nil && len(batch) < flushBatch; el = e.order.Front() {
			r := el.Value.(*stamped)
			e.order.Remove(el)
			delete(e.buffer, r.Namespace+"."+r.Model)
			batch = append(batch, r)
		}
		e.mu.Unlock()
		if len(batch) == 0 {
			break
		}
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, r := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.publish(context.Background(), r)
			}()
		}
		wg.Wait()
		failed := 0
		var overflow []*stamped
		e.mu.Lock()
		for i, err := range errs {
			if err != nil {
				failed++
				e.stats.FailedPublishes++
				if d := e.store(batch[i]); d != nil {
					overflow = append(overflow, d)
				}
			} else {
				e.stats.Flushed++
			}
		}
		if failed > 0 {
			e.retry = min(flushRetryMax, e.retry*2)
		} else {
			e.retry = flushRetry
		}
		e.mu.Unlock()
		for _, d := range overflow {
			e.drop(d.Request, Overflow)
		}
		if failed > 0 {
			break
		}
	}
	e.mu.Lock()
	e.flushing = false
	again := len(e.buffer) > 0 && !e.closed
	retry := e.retry
	e.mu.Unlock()
	if again && e.Connected() {
		e.scheduleFlush(retry)
	}
}

func (e *Emitter) flushTrailing(key string) {
	e.mu.Lock()
	t := e.models[key]
	if t == nil || t.pending == nil {
		e.mu.Unlock()
		return
	}
	pending := t.pending
	t.pending, t.timer, t.lastSent = nil, nil, time.Now()
	e.mu.Unlock()
	e.send(pending)
}

// Emit reports one request. It returns within about PublishTimeout and never panics.
func (e *Emitter) Emit(r Request) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("emit panicked", "panic", p)
			out = Dropped
		}
	}()
	if IsBackground(r.WorkloadClass) {
		e.mu.Lock()
		e.stats.Background++
		e.mu.Unlock()
		return Background
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if InvalidTarget(r.Namespace, r.Model) != nil {
		e.mu.Lock()
		e.stats.Invalid++
		e.mu.Unlock()
		e.drop(r, InvalidName)
		return Invalid
	}
	s := &stamped{Request: r, id: newID()}
	if e.opts.ThrottleMs <= 0 {
		return e.send(s)
	}
	interval := time.Duration(e.opts.ThrottleMs) * time.Millisecond
	key := r.Namespace + "." + r.Model
	now := time.Now()
	e.mu.Lock()
	t := e.models[key]
	if t == nil {
		if len(e.models) >= maxThrottled {
			for k, old := range e.models {
				if old.timer == nil && now.Sub(old.lastSent) >= interval {
					delete(e.models, k)
				}
			}
		}
		t = &throttle{}
		e.models[key] = t
	}
	if t.timer == nil && now.Sub(t.lastSent) >= interval {
		t.lastSent = now
		e.mu.Unlock()
		return e.send(s)
	}
	e.stats.Throttled++
	t.pending = s
	if t.timer == nil {
		t.timer = time.AfterFunc(max(0, t.lastSent.Add(interval).Sub(now)), func() { e.flushTrailing(key) })
	}
	e.mu.Unlock()
	return Throttled
}

// Close publishes pending trailing events and what is buffered (waiting at most timeout for NATS), reports the rest
// as dropped (Closed) and closes the connection.
func (e *Emitter) Close(timeout time.Duration) {
	e.mu.Lock()
	var overflow []*stamped
	for key, t := range e.models {
		if t.timer != nil {
			t.timer.Stop()
		}
		if t.pending != nil {
			e.stats.Buffered++
			if d := e.store(t.pending); d != nil {
				overflow = append(overflow, d)
			}
		}
		delete(e.models, key)
	}
	e.mu.Unlock()
	for _, d := range overflow {
		e.drop(d.Request, Overflow)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && e.Connected() {
		e.mu.Lock()
		left, flushing := len(e.buffer), e.flushing
		e.mu.Unlock()
		if left == 0 && !flushing {
			break
		}
		if !flushing {
			e.scheduleFlush(0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.mu.Lock()
	e.closed = true
	var rest []*stamped
	for el := e.order.Front(); el != nil; el = el.Next() {
		rest = append(rest, el.Value.(*stamped))
	}
	e.order.Init()
	e.buffer = map[string]*list.Element{}
	e.mu.Unlock()
	for _, r := range rest {
		e.drop(r.Request, Closed)
	}
	if nc := e.conn.Load(); nc != nil {
		nc.Close()
	}
}
