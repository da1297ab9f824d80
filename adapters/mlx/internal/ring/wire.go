package ring

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// Array is an MLX array handle.
type Array = mlxc.Array

// wire is the few MLX calls the protocol's small int32 messages need: upload, send, receive, evaluate and
// read back, with the first error kept and every array freed by release.
type wire struct {
	p    *Peer
	name string
	tmp  []Array
	err  error
}

func (p *Peer) wire(name string) *wire { return &wire{p: p, name: name} }

func (w *wire) release() {
	for _, a := range w.tmp {
		if a != 0 {
			mlxc.ArrayFree(a)
		}
	}
	w.tmp = nil
}

func (w *wire) done(op string, rc int32, r Array) Array {
	if r != 0 {
		w.tmp = append(w.tmp, r)
	}
	if rc != 0 && w.err == nil {
		w.err = fmt.Errorf("%s: %s: %w", w.name, op, w.p.RT.Check(rc))
	}
	if w.err != nil {
		return 0
	}
	return r
}

// upload copies v into a new 1-D int32 array.
func (w *wire) upload(v ...int32) Array {
	if w.err != nil {
		return 0
	}
	sh := []int32{int32(len(v))}
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], 1, mlxc.Int32)
	var rc int32
	if err := w.p.RT.Pending(); err != nil {
		w.err = fmt.Errorf("%s: array_new_data: %w", w.name, err)
		rc = 1
	}
	return w.done("array_new_data", rc, r)
}

// send sends x to rank dst and waits for the send to complete.
func (w *wire) send(x Array, dst int) {
	if w.err != nil {
		return
	}
	var r Array
	w.eval(w.done("distributed_send", mlxc.DistributedSend(&r, x, int32(dst), w.p.Group, w.p.RT.CPUStream()), r))
}

// recv receives n int32 values from rank src (evaluated).
func (w *wire) recv(src, n int) Array {
	if w.err != nil {
		return 0
	}
	sh := []int32{int32(n)}
	var r Array
	r = w.done("distributed_recv", mlxc.DistributedRecv(&r, &sh[0], 1, mlxc.Int32, int32(src), w.p.Group, w.p.RT.CPUStream()), r)
	w.eval(r)
	return r
}

func (w *wire) eval(a Array) {
	if w.err != nil || a == 0 {
		return
	}
	v := mlxc.VectorArrayNew()
	defer mlxc.VectorArrayFree(v)
	if rc := mlxc.VectorArrayAppendValue(v, a); rc != 0 {
		w.done("vector_append", rc, 0)
		return
	}
	if rc := mlxc.Eval(v); rc != 0 {
		// Wait for ops already scheduled before anyone frees the arrays they write.
		msg := w.p.RT.Check(rc)
		mlxc.Synchronize(w.p.RT.Stream())
		w.p.RT.Pending()
		w.err = fmt.Errorf("%s: eval: %w", w.name, msg)
	}
}

// read copies an evaluated int32 array to Go memory.
func (w *wire) read(a Array) []int32 {
	if w.err != nil {
		return nil
	}
	n := int(mlxc.ArraySize(a))
	p := mlxc.ArrayDataInt32(a)
	if p == nil && n > 0 {
		w.err = fmt.Errorf("%s: read: array is not evaluated or not int32: %v", w.name, w.p.RT.Pending())
		return nil
	}
	return mlxc.Int32s(p, n)
}
