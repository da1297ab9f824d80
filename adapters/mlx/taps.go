package mlx

import (
	"errors"
	"runtime"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/ports"
)

// Taps is the tapped hidden states of one Forward: rows × (len(tapLayers)·H), resident in MLX.
type Taps struct {
	sess        *Session
	a           arr
	rows, width int
}

var _ interface {
	ports.Taps
	ports.HostTaps
} = (*Taps)(nil)

// Rows returns the number of positions.
func (t *Taps) Rows() int { return t.rows }

// Slice returns a view of the first n rows (n is clamped to [0, Rows()]); it shares the receiver's array.
func (t *Taps) Slice(n int) ports.Taps {
	n = min(max(n, 0), t.rows)
	return &Taps{sess: t.sess, a: t.a, rows: n, width: t.width}
}

// Detach returns a handle that stays valid after later Forward calls (owned by the session until Close).
func (t *Taps) Detach() ports.Taps {
	d := &Taps{sess: t.sess, rows: t.rows, width: t.width}
	if t.a == 0 {
		return d
	}
	rt := t.sess.t.rt
	_ = rt.Do(func() error {
		h, err := graph.Dup(rt, t.a)
		if err != nil {
			return err
		}
		d.a = h
		return nil
	})
	if d.a != 0 {
		// Freed when the detached copy becomes unreachable (the ports give taps no Close).
		runtime.AddCleanup(d, func(h arr) { rt.FreeLater(h) }, d.a)
	}
	return d
}

// Read copies the first Rows() rows to Go memory (row-major, width = len(tapLayers)·HiddenSize).
func (t *Taps) Read() (data []float32, rows, width int, err error) {
	if t.width == 0 || t.rows == 0 {
		return []float32{}, t.rows, t.width, nil
	}
	if t.a == 0 {
		return nil, 0, t.width, errors.New("mlx taps: released (taps are valid until the next Forward unless detached)")
	}
	err = t.sess.t.rt.Do(func() error {
		g := graph.New(t.sess.t.rt, "mlx taps read")
		defer g.Release()
		x := ops.Backend{G: g, DT: t.sess.t.dt}.F32(t.a)
		g.Eval(x)
		v := g.ReadF32(x)
		if g.Err != nil {
			return g.Err
		}
		data = v[:t.rows*t.width]
		return nil
	})
	return data, t.rows, t.width, err
}

// Host is Read (see ports.HostTaps).
func (t *Taps) Host() (data []float32, rows, width int, err error) { return t.Read() }
