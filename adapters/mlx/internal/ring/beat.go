package ring

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Heartbeats: a channel beside MLX's ring that never waits for a round to end. MLX's receive cannot time
// out, and a rank's messages on the ring come only when a round reaches it, so the ring alone learns of a
// lost rank only when a round's timeout passes. Rank 0 therefore listens on a TCP port of its own address
// (any free port; the port and a random token reach the workers with one all_gather when the group is
// joined) and every worker dials it and says hello (its rank and the token): a star, rank 0 at its centre.
// Each side then sends a beat every tenth of the bound (BeatPeriod) from goroutines of its own, never from
// the MLX thread, so a rank busy with a long round keeps beating and a slow rank is not a lost one.
//
// A side declares its peer lost when it has heard nothing from it for Bound less one period, checked every
// period (a frozen or unplugged machine: noticed after at most Bound of silence, never before nine tenths
// of it), or when the connection breaks (the kernel closes a dead process's sockets, so a crash is noticed at once).
// OnLost then gets an error wrapping ErrRankLost that names the rank: the pipeline fails its MLX runtime
// with it, which ends a round blocked in MLX's receive at once and fails every later call. Rank 0 tells
// the other workers which rank was lost (so they give up too, naming it) and closes; a worker that loses
// rank 0 gives up. A normal stop sends an end frame first, so closing is not mistaken for a loss.

// Frame kinds after the hello: a beat, a lost rank (rank 0 to the workers, the rank as argument), an end.
const (
	frameBeat byte = 'B'
	frameLost byte = 'L'
	frameEnd  byte = 'E'
)

const (
	helloLen = 16 // magic, rank, token
	frameLen = 5  // kind, argument
)

var helloMagic = [4]byte{'H', 'G', 'B', '1'}

// AppendHello is a worker's hello: the magic, its rank and the group's token, big-endian.
func AppendHello(b []byte, rank int, token uint64) []byte {
	b = append(b, helloMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(rank))
	return binary.BigEndian.AppendUint64(b, token)
}

// ParseHello reads a hello: the worker's rank and the token it holds.
func ParseHello(b []byte) (rank int, token uint64, err error) {
	if len(b) != helloLen {
		return 0, 0, fmt.Errorf("heartbeat hello: %d bytes, want %d", len(b), helloLen)
	}
	if [4]byte(b[:4]) != helloMagic {
		return 0, 0, fmt.Errorf("heartbeat hello: magic %q, want %q", b[:4], helloMagic[:])
	}
	r := binary.BigEndian.Uint32(b[4:8])
	if r > 1<<20 {
		return 0, 0, fmt.Errorf("heartbeat hello: rank %d is out of range", r)
	}
	return int(r), binary.BigEndian.Uint64(b[8:]), nil
}

// frame is one message after the hello.
type frame struct {
	kind byte
	arg  uint32
}

func (f frame) bytes() []byte {
	return binary.BigEndian.AppendUint32([]byte{f.kind}, f.arg)
}

// parseFrame reads a frame; an unknown kind is an error (the peer speaks another protocol).
func parseFrame(b []byte) (frame, error) {
	if len(b) != frameLen {
		return frame{}, fmt.Errorf("heartbeat frame: %d bytes, want %d", len(b), frameLen)
	}
	f := frame{kind: b[0], arg: binary.BigEndian.Uint32(b[1:])}
	switch f.kind {
	case frameBeat, frameEnd:
		if f.arg != 0 {
			return frame{}, fmt.Errorf("heartbeat frame %q: argument %d, want 0", f.kind, f.arg)
		}
	case frameLost:
	default:
		return frame{}, fmt.Errorf("heartbeat frame: unknown kind %#x", f.kind)
	}
	return f, nil
}

// BeatConfig configures one rank's heartbeats.
type BeatConfig struct {
	// Bound is how long a silent peer takes at most to be lost (> 0); beats and checks run every
	// BeatPeriod(Bound).
	Bound time.Duration
	// OnLost is called once, from a heartbeat goroutine, with the first loss (wrapping ErrRankLost).
	OnLost func(error)
	// Now and Tick drive the checks (tests give a manual clock and tick channel): nil uses time.Now and a
	// ticker at BeatPeriod(Bound). Each tick sends a beat to every peer and checks every peer's silence at the time
	// it carries; Now stamps each frame received.
	Now  func() time.Time
	Tick <-chan time.Time
}

// Beats is one rank's heartbeats: rank 0's links to every worker, or a worker's link to rank 0. Close ends
// them without a loss; Err reports the loss, if any.
type Beats struct {
	self  int
	cfg   BeatConfig
	links []*link

	once   sync.Once
	done   chan struct{} // closed by a loss or Close
	err    error         // the loss (set before done closes)
	ticker *time.Ticker
}

// link is the connection to one peer.
type link struct {
	rank  int
	conn  net.Conn
	last  atomic.Int64 // Now of the latest frame from the peer (unix ns)
	ended atomic.Bool  // the peer sent its end frame
	beat  chan struct{}
	wmu   sync.Mutex
}

func (l *link) write(f frame, d time.Duration) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	// A real deadline even under a manual clock: a peer that stops reading must not block the writer.
	_ = l.conn.SetWriteDeadline(time.Now().Add(d))
	_, err := l.conn.Write(f.bytes())
	return err
}

// AcceptBeats is rank 0's side: it takes the hellos of workers 1..size−1 on ln (closing connections with a
// wrong token, rank or duplicate) until every worker is linked or ctx ends, then starts beating. ln is not
// closed.
func AcceptBeats(ctx context.Context, ln net.Listener, size int, token uint64, cfg BeatConfig) (*Beats, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	links := make([]*link, size)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var bad []error
	for n := 1; n < size; {
		c, err := ln.Accept()
		if err != nil {
			for _, l := range links {
				if l != nil {
					_ = l.conn.Close()
				}
			}
			var missing []int
			for r := 1; r < size; r++ {
				if links[r] == nil {
					missing = append(missing, r)
				}
			}
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("%w: no heartbeat link from ranks %v: %w", ErrRankLost, missing, errors.Join(append(bad, err)...))
		}
		r, err := readHello(c, cfg.Bound, token, size)
		if err == nil && links[r] != nil {
			err = fmt.Errorf("heartbeat hello: rank %d is linked already", r)
		}
		if err != nil {
			_ = c.Close()
			bad = append(bad, fmt.Errorf("from %s: %w", c.RemoteAddr(), err))
			continue
		}
		links[r] = &link{rank: r, conn: c}
		n++
	}
	return start(0, links[1:], cfg), nil
}

// readHello reads and checks a hello within d.
func readHello(c net.Conn, d time.Duration, token uint64, size int) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, helloLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return 0, fmt.Errorf("heartbeat hello: %w", err)
	}
	r, tok, err := ParseHello(b)
	switch {
	case err != nil:
		return 0, err
	case tok != token:
		return 0, errors.New("heartbeat hello: wrong token (a process of another pipeline?)")
	case r < 1 || r >= size:
		return 0, fmt.Errorf("heartbeat hello: rank %d is not a worker of %d ranks", r, size)
	}
	return r, nil
}

// DialBeats is worker rank's side: it says hello to rank 0 on c (already connected) and starts beating.
func DialBeats(c net.Conn, rank int, token uint64, cfg BeatConfig) (*Beats, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(cfg.Bound))
	if _, err := c.Write(AppendHello(nil, rank, token)); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: rank %d: heartbeat hello to rank 0: %w", ErrRankLost, rank, err)
	}
	return start(rank, []*link{{rank: 0, conn: c}}, cfg), nil
}

// BeatPeriod is how often beats go out and silences are checked: a tenth of the bound (at least 1ms).
func BeatPeriod(bound time.Duration) time.Duration { return max(bound/10, time.Millisecond) }

func (c BeatConfig) check() error {
	if c.Bound <= 0 || c.OnLost == nil {
		return fmt.Errorf("heartbeats need a positive bound and OnLost (bound %v)", c.Bound)
	}
	return nil
}

func start(self int, links []*link, cfg BeatConfig) *Beats {
	b := &Beats{self: self, cfg: cfg, links: links, done: make(chan struct{})}
	if b.cfg.Now == nil {
		b.cfg.Now = time.Now
	}
	if b.cfg.Tick == nil {
		b.ticker = time.NewTicker(BeatPeriod(cfg.Bound))
		b.cfg.Tick = b.ticker.C
	}
	now := b.cfg.Now().UnixNano()
	for _, l := range links {
		l.last.Store(now)
		l.beat = make(chan struct{}, 1)
		go b.read(l)
		go b.send(l)
	}
	go b.loop()
	return b
}

// loop asks for a beat to every peer and checks every peer's silence at each tick.
func (b *Beats) loop() {
	for {
		var now time.Time
		select {
		case <-b.done:
			return
		case now = <-b.cfg.Tick: // the tick's own time: the check does not race a clock moving on
		}
		for _, l := range b.links {
			if l.ended.Load() {
				continue
			}
			select {
			case l.beat <- struct{}{}:
			default: // the previous beat is still being written
			}
			// Checked once a period: silent for more than Bound less a period now would pass Bound before
			// the next check.
			if quiet := now.Sub(time.Unix(0, l.last.Load())); quiet > b.cfg.Bound-BeatPeriod(b.cfg.Bound) {
				b.lose(l.rank, fmt.Errorf("%w: %sno heartbeat from rank %d within %v", ErrRankLost, b.prefix(), l.rank, b.cfg.Bound))
			}
		}
	}
}

// send writes l's beats. A failed write ends it without a verdict: the reader sees a broken connection
// only after the frames before it (an end frame then a close is no loss), and a peer that stopped reading
// falls silent too.
func (b *Beats) send(l *link) {
	for {
		select {
		case <-b.done:
			return
		case <-l.beat:
		}
		if err := l.write(frame{kind: frameBeat}, b.cfg.Bound); err != nil {
			return
		}
	}
}

// read takes l's frames until the connection ends.
func (b *Beats) read(l *link) {
	buf := make([]byte, frameLen)
	for {
		_, err := io.ReadFull(l.conn, buf)
		if err != nil {
			b.broken(l, err)
			return
		}
		f, err := parseFrame(buf)
		if err != nil {
			b.broken(l, err)
			return
		}
		l.last.Store(b.cfg.Now().UnixNano())
		switch f.kind {
		case frameEnd:
			l.ended.Store(true)
			return
		case frameLost:
			if b.self != 0 {
				b.lose(int(f.arg), fmt.Errorf("%w: %srank 0 lost rank %d", ErrRankLost, b.prefix(), f.arg))
				return
			}
		}
	}
}

// broken reports l's connection failing, unless the peer ended or these beats stopped.
func (b *Beats) broken(l *link, err error) {
	if l.ended.Load() {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	b.lose(l.rank, fmt.Errorf("%w: %sheartbeat connection to rank %d broke: %v", ErrRankLost, b.prefix(), l.rank, err))
}

func (b *Beats) prefix() string {
	if b.self == 0 {
		return ""
	}
	return fmt.Sprintf("rank %d: ", b.self)
}

// lose ends the beats with err (the first loss wins): OnLost, then rank 0 tells the other workers which
// rank was lost, and every connection closes.
func (b *Beats) lose(rank int, err error) {
	b.finish(err, func() {
		b.cfg.OnLost(err)
		for _, l := range b.links {
			if b.self == 0 && l.rank != rank && !l.ended.Load() {
				_ = l.write(frame{kind: frameLost, arg: uint32(rank)}, time.Second)
			}
		}
	})
}

// Close ends the beats without a loss: every peer is sent an end frame, then the connections close.
// Idempotent, and a no-op after a loss.
func (b *Beats) Close() {
	b.finish(nil, func() {
		for _, l := range b.links {
			_ = l.write(frame{kind: frameEnd}, time.Second)
		}
	})
}

// finish ends the beats once: Err reports err from then on, f runs (the connections still open), then they
// close.
func (b *Beats) finish(err error, f func()) {
	b.once.Do(func() {
		b.err = err
		close(b.done)
		f()
		if b.ticker != nil {
			b.ticker.Stop()
		}
		for _, l := range b.links {
			_ = l.conn.Close()
		}
	})
}

// Err is the loss that ended the beats, or nil (running, or closed by Close).
func (b *Beats) Err() error {
	select {
	case <-b.done:
		return b.err
	default:
		return nil
	}
}

// Done is closed when the beats end, by a loss or Close.
func (b *Beats) Done() <-chan struct{} { return b.done }
