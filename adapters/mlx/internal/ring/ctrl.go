package ring

import (
	"time"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// Control messages: rank 0 sends one before every session operation; each worker passes it on to the next
// (the last keeps it) and then performs it. Header: op, session id, three arguments, flags, the payload's
// length and how many freed snapshot ids follow it.
const (
	OpNew int32 = iota + 1
	OpClose
	OpForward
	OpTrim
	OpSnapshot
	OpRestore
	OpReplay
	OpPing
	OpStop
	OpExport
	OpImport
	OpBatch
	OpTree     // a ForwardTree: Payload holds the parents, A the nodes, B the rows
	OpKeepPath // a KeepPath: Payload holds the path
)

// A forward's options, as control flags.
const (
	FlagTaps int32 = 1 << iota
	FlagTape
	FlagLogits
)

const ctrlLen = 8

// Ctrl is one control message. Freed lists the snapshot and prefix ids rank 0 dropped since its previous
// message (filled in by SendCtrl on rank 0).
type Ctrl struct {
	Op, Sess, A, B, C, Flags int32
	Payload, Freed           []int32
}

// SendCtrl sends c to the next rank; rank 0 adds the ids dropped since its previous message.
func (p *Peer) SendCtrl(c Ctrl) error {
	if p.Rank == 0 {
		p.mu.Lock()
		c.Freed, p.freed = p.freed, nil
		p.mu.Unlock()
		p.LastSent.Store(time.Now().UnixNano())
		p.Waiting.Store(1)
	}
	w := p.wire("mlx distributed control")
	defer w.release()
	w.send(w.upload(c.Op, c.Sess, c.A, c.B, c.C, c.Flags, int32(len(c.Payload)), int32(len(c.Freed))), p.Rank+1)
	if body := append(append([]int32(nil), c.Payload...), c.Freed...); len(body) > 0 {
		w.send(w.upload(body...), p.Rank+1)
	}
	return w.err
}

// RecvCtrl receives the next control message from the previous rank.
func (p *Peer) RecvCtrl() (Ctrl, error) {
	w := p.wire("mlx distributed control")
	defer w.release()
	hv := w.read(w.recv(p.Rank-1, ctrlLen))
	if w.err != nil {
		return Ctrl{}, w.err
	}
	c := Ctrl{Op: hv[0], Sess: hv[1], A: hv[2], B: hv[3], C: hv[4], Flags: hv[5]}
	if n := int(hv[6] + hv[7]); n > 0 {
		body := w.read(w.recv(p.Rank-1, n))
		if w.err != nil {
			return Ctrl{}, w.err
		}
		c.Payload, c.Freed = body[:hv[6]], body[hv[6]:]
	}
	return c, nil
}

// Reply is the last rank's answer to a ping.
func (p *Peer) Reply() error {
	w := p.wire("mlx distributed ping")
	defer w.release()
	w.send(w.upload(int32(p.Rank)), 0)
	return w.err
}

// AwaitReply receives the last rank's answer to a ping (rank 0).
func (p *Peer) AwaitReply() error {
	w := p.wire("mlx distributed ping")
	defer w.release()
	w.read(w.recv(p.Size-1, 1))
	return w.err
}

// AllGather is every rank's vals, in rank order (all_gather over the group; every rank calls it).
func (p *Peer) AllGather(vals []int32) ([]int32, error) {
	w := p.wire("mlx distributed stats")
	defer w.release()
	x := w.upload(vals...)
	var r Array
	if w.err == nil {
		r = w.done("distributed_all_gather", mlxc.DistributedAllGather(&r, x, p.Group, p.RT.CPUStream()), r)
	}
	w.eval(r)
	all := w.read(r)
	return all, w.err
}
