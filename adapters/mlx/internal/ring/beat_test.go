package ring

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// manualClock is the heartbeats' time in these tests: Advance moves it, tick runs one check.
type manualClock struct {
	ns   atomic.Int64
	tick chan time.Time
}

func newManualClock() *manualClock {
	c := &manualClock{tick: make(chan time.Time)}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Tick hands the heartbeat loop one tick; the loop takes it only after finishing the previous one, so a
// second Tick means the first's checks are done.
func (c *manualClock) Tick(t *testing.T) {
	t.Helper()
	select {
	case c.tick <- c.Now():
	case <-time.After(5 * time.Second):
		t.Fatal("the heartbeat loop took no tick")
	}
}

// pipeListener hands AcceptBeats in-process pipes.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn, 8), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// dial is a fake worker's connection: it sends hello and returns its end.
func (l *pipeListener) dial(t *testing.T, rank int, token uint64) net.Conn {
	a, b := net.Pipe()
	l.conns <- b
	go func() { _, _ = a.Write(AppendHello(nil, rank, token)) }() // a pipe's write waits for Accept's read
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// fakePeer reads a peer's frames in the background (a net.Pipe write waits for its reader).
type fakePeer struct {
	conn   net.Conn
	frames chan frame
}

func newFakePeer(c net.Conn) *fakePeer {
	p := &fakePeer{conn: c, frames: make(chan frame, 1024)}
	go func() {
		defer close(p.frames)
		buf := make([]byte, frameLen)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			f, err := parseFrame(buf)
			if err != nil {
				return
			}
			if f.kind != frameBeat {
				p.frames <- f
			}
		}
	}()
	return p
}

func (p *fakePeer) send(t *testing.T, f frame) {
	t.Helper()
	_, err := p.conn.Write(f.bytes())
	require.NoError(t, err)
}

// lossRecorder is OnLost.
type lossRecorder struct {
	mu   sync.Mutex
	errs []error
	at   chan struct{}
}

func newLossRecorder() *lossRecorder { return &lossRecorder{at: make(chan struct{})} }

func (r *lossRecorder) onLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
	if len(r.errs) == 1 {
		close(r.at)
	}
}

func (r *lossRecorder) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-r.at:
	case <-time.After(within):
		t.Fatalf("no loss reported within %v", within)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.errs, 1, "a loss is reported once")
	return r.errs[0]
}

func (r *lossRecorder) none(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Empty(t, r.errs)
}

// seen waits until b has read a frame from every peer at the clock's time (the reader runs beside the
// test; the manual clock would otherwise outrun it).
func seen(t *testing.T, b *Beats, clk *manualClock) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, l := range b.links {
			if l.last.Load() != clk.Now().UnixNano() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

// ended waits until b has read every peer's end frame.
func ended(t *testing.T, b *Beats) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, l := range b.links {
			if !l.ended.Load() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

const (
	testToken  = 0x5eed_f00d_cafe_0001
	testBound  = 10 * time.Second
	testPeriod = time.Second // BeatPeriod(testBound)
)

// startRank0 links rank 0 of size ranks to fake workers and returns its beats and the workers' ends.
func startRank0(t *testing.T, size int, clk *manualClock, rec *lossRecorder) (*Beats, []*fakePeer) {
	ln := newPipeListener()
	peers := make([]*fakePeer, size)
	for r := 1; r < size; r++ {
		peers[r] = newFakePeer(ln.dial(t, r, testToken))
	}
	b, err := AcceptBeats(t.Context(), ln, size, testToken, BeatConfig{Bound: testBound, OnLost: rec.onLost, Now: clk.Now, Tick: clk.tick})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, peers
}

// TestBeatsRank0 is rank 0's side: a worker that dies (mid-round or idle: the heartbeats run beside the
// rounds, so the two are one case here) is noticed at once, one that freezes within the bound and not
// before, one that keeps beating never, however long a round takes.
func TestBeatsRank0(t *testing.T) {
	require.Equal(t, testPeriod, BeatPeriod(testBound))
	t.Run("a killed worker is lost at once, named", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, peers := startRank0(t, 3, clk, rec)
		require.NoError(t, peers[2].conn.Close()) // the kernel closes a dead process's sockets
		err := rec.wait(t, 2*time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		require.ErrorIs(t, err, ports.ErrBackendLost)
		assert.Contains(t, err.Error(), "heartbeat connection to rank 2 broke")
		assert.Equal(t, err, b.Err())
		// The other worker is told which rank was lost, then its link closes.
		f, ok := <-peers[1].frames
		require.True(t, ok, "worker 1 got a frame")
		assert.Equal(t, frame{kind: frameLost, arg: 2}, f)
		_, ok = <-peers[1].frames
		assert.False(t, ok, "then the link closes")
	})
	t.Run("a frozen worker is lost within the bound, not before", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, _ := startRank0(t, 2, clk, rec)
		for range 9 { // silent for the bound less a period: still there
			clk.Advance(testPeriod)
			clk.Tick(t)
		}
		clk.Tick(t)
		rec.none(t)
		require.NoError(t, b.Err())
		clk.Advance(testPeriod) // the bound: lost
		clk.Tick(t)
		err := rec.wait(t, 2*time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		assert.Contains(t, err.Error(), "no heartbeat from rank 1 within 10s")
	})
	t.Run("a slow worker that beats is never lost", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, peers := startRank0(t, 3, clk, rec)
		for range 200 { // 20 bounds: a very long round
			clk.Advance(testPeriod)
			peers[1].send(t, frame{kind: frameBeat})
			peers[2].send(t, frame{kind: frameBeat})
			seen(t, b, clk)
			clk.Tick(t)
		}
		clk.Tick(t)
		rec.none(t)
		require.NoError(t, b.Err())
	})
	t.Run("a worker that ends is not lost", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, peers := startRank0(t, 2, clk, rec)
		peers[1].send(t, frame{kind: frameEnd})
		require.NoError(t, peers[1].conn.Close())
		ended(t, b)
		for range 30 {
			clk.Advance(testPeriod)
			clk.Tick(t)
		}
		rec.none(t)
		require.NoError(t, b.Err())
	})
	t.Run("Close ends every link without a loss", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, peers := startRank0(t, 3, clk, rec)
		b.Close()
		for r := 1; r < 3; r++ {
			f, ok := <-peers[r].frames
			require.True(t, ok)
			assert.Equal(t, frame{kind: frameEnd}, f, "rank %d", r)
			_, ok = <-peers[r].frames
			assert.False(t, ok, "then rank %d's link closes", r)
		}
		rec.none(t)
		require.NoError(t, b.Err())
		<-b.Done()
	})
}

// startWorker links a worker to a fake rank 0 and returns its beats and rank 0's end.
func startWorker(t *testing.T, rank int, clk *manualClock, rec *lossRecorder) (*Beats, *fakePeer) {
	a, c := net.Pipe()
	t.Cleanup(func() { _ = a.Close() })
	hello := make(chan []byte, 1)
	go func() {
		buf := make([]byte, helloLen)
		_, _ = io.ReadFull(a, buf)
		hello <- buf
	}()
	b, err := DialBeats(c, rank, testToken, BeatConfig{Bound: testBound, OnLost: rec.onLost, Now: clk.Now, Tick: clk.tick})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	r, tok, err := ParseHello(<-hello)
	require.NoError(t, err)
	require.Equal(t, rank, r)
	require.Equal(t, uint64(testToken), tok)
	return b, newFakePeer(a)
}

// TestBeatsWorker is a worker's side: rank 0 dying, freezing or reporting another rank lost ends it,
// naming the rank; rank 0's end does not.
func TestBeatsWorker(t *testing.T) {
	t.Run("rank 0 killed", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		_, r0 := startWorker(t, 2, clk, rec)
		require.NoError(t, r0.conn.Close())
		err := rec.wait(t, 2*time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		assert.Contains(t, err.Error(), "rank 2: heartbeat connection to rank 0 broke")
	})
	t.Run("rank 0 frozen", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		startWorker(t, 1, clk, rec)
		clk.Advance(testBound - testPeriod)
		clk.Tick(t)
		clk.Tick(t)
		rec.none(t)
		clk.Advance(time.Millisecond)
		clk.Tick(t)
		err := rec.wait(t, 2*time.Second)
		assert.Contains(t, err.Error(), "rank 1: no heartbeat from rank 0 within 10s")
	})
	t.Run("rank 0 reports another rank lost", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		_, r0 := startWorker(t, 1, clk, rec)
		r0.send(t, frame{kind: frameLost, arg: 2})
		err := rec.wait(t, 2*time.Second)
		require.ErrorIs(t, err, ErrRankLost)
		assert.Contains(t, err.Error(), "rank 1: rank 0 lost rank 2")
	})
	t.Run("rank 0 ends", func(t *testing.T) {
		clk, rec := newManualClock(), newLossRecorder()
		b, r0 := startWorker(t, 1, clk, rec)
		r0.send(t, frame{kind: frameEnd})
		require.NoError(t, r0.conn.Close())
		ended(t, b)
		for range 30 {
			clk.Advance(testPeriod)
			clk.Tick(t)
		}
		rec.none(t)
		require.NoError(t, b.Err())
	})
}

// TestBeatsLoopback: rank 0 and two workers over real TCP on 127.0.0.1 with the real clock and a short
// bound: they stay linked for several bounds while idle, a worker killed mid-round (its socket closed) is
// noticed within the bound by rank 0 and the surviving worker, each naming it.
func TestBeatsLoopback(t *testing.T) {
	const bound = time.Second // real time on a shared machine: room for a stalled goroutine
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	recs := []*lossRecorder{newLossRecorder(), newLossRecorder(), newLossRecorder()}
	beats := make([]*Beats, 3)
	var wg sync.WaitGroup
	for r := 1; r < 3; r++ {
		wg.Go(func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if !assert.NoError(t, err) {
				return
			}
			beats[r], err = DialBeats(c, r, testToken, BeatConfig{Bound: bound, OnLost: recs[r].onLost})
			assert.NoError(t, err)
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	beats[0], err = AcceptBeats(ctx, ln, 3, testToken, BeatConfig{Bound: bound, OnLost: recs[0].onLost})
	require.NoError(t, err)
	wg.Wait()
	require.NotNil(t, beats[1])
	require.NotNil(t, beats[2])
	defer beats[0].Close()
	defer beats[2].Close()
	time.Sleep(2 * bound)
	for r := range 3 {
		recs[r].none(t)
	}
	// Rank 1 dies as a process does: its socket closes, nothing more is said.
	start := time.Now()
	require.NoError(t, beats[1].links[0].conn.Close())
	err0 := recs[0].wait(t, bound)
	err2 := recs[2].wait(t, 2*bound)
	t.Logf("rank 0 noticed after %v: %v", time.Since(start), err0)
	require.ErrorIs(t, err0, ErrRankLost)
	assert.Contains(t, err0.Error(), "rank 1")
	assert.Contains(t, err2.Error(), "rank 2: rank 0 lost rank 1")
}

// TestAcceptBeats: a connection with a wrong token or rank, or a second hello of a rank, is refused without
// spoiling the others; a worker that never links fails rank 0's accept, naming it.
func TestAcceptBeats(t *testing.T) {
	rec := newLossRecorder()
	cfg := BeatConfig{Bound: testBound, OnLost: rec.onLost}
	t.Run("bad hellos are refused", func(t *testing.T) {
		ln := newPipeListener()
		bad := []net.Conn{ln.dial(t, 1, testToken+1), ln.dial(t, 3, testToken), ln.dial(t, 0, testToken)}
		good := ln.dial(t, 1, testToken)
		dup := ln.dial(t, 1, testToken)
		two := ln.dial(t, 2, testToken)
		for _, c := range append(bad, good, dup, two) {
			newFakePeer(c)
		}
		b, err := AcceptBeats(t.Context(), ln, 3, testToken, cfg)
		require.NoError(t, err)
		defer b.Close()
		assert.Len(t, b.links, 2)
	})
	t.Run("a worker that never links", func(t *testing.T) {
		ln := newPipeListener()
		newFakePeer(ln.dial(t, 2, testToken))
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := AcceptBeats(ctx, ln, 3, testToken, cfg)
		require.ErrorIs(t, err, ErrRankLost)
		assert.Contains(t, err.Error(), "no heartbeat link from ranks [1]")
		assert.True(t, errors.Is(err, context.DeadlineExceeded))
	})
	rec.none(t)
}

func FuzzParseHello(f *testing.F) {
	f.Add(AppendHello(nil, 3, testToken))
	f.Add([]byte("HGB1"))
	f.Add([]byte("XXXX\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, tok, err := ParseHello(b)
		if err != nil {
			return
		}
		// A hello that parses is the one its fields make.
		assert.Equal(t, b, AppendHello(nil, r, tok))
	})
}

func FuzzParseFrame(f *testing.F) {
	for _, fr := range []frame{{kind: frameBeat}, {kind: frameEnd}, {kind: frameLost, arg: 7}} {
		f.Add(fr.bytes())
	}
	f.Add([]byte("Z\x00\x00\x00\x00"))
	f.Add([]byte("B\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := parseFrame(b)
		if err != nil {
			return
		}
		assert.Equal(t, b, fr.bytes())
		assert.Contains(t, []byte{frameBeat, frameLost, frameEnd}, fr.kind)
	})
}
