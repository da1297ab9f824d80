package mlxc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable is returned by every MLX entry point when libmlxc cannot be used (absent, wrong version,
// missing symbols). It wraps errors.ErrUnsupported so callers can fall back to another backend.
var ErrUnavailable = fmt.Errorf("mlx backend unavailable: %w", errors.ErrUnsupported)

// EnvLib names the environment variable that overrides the library path.
const EnvLib = "HIGGS_MLX_LIB"

var (
	openOnce sync.Once
	openErr  error
	rt       *Runtime
)

// candidates lists the library paths tried in order: $HIGGS_MLX_LIB, then the platform's usual places.
func candidates() []string {
	var c []string
	if p := os.Getenv(EnvLib); p != "" {
		return append(c, p)
	}
	switch runtime.GOOS {
	case "darwin":
		for _, d := range []string{"/opt/homebrew/lib", "/usr/local/lib"} {
			c = append(c, filepath.Join(d, "libmlxc.dylib"))
		}
		c = append(c, "libmlxc.dylib")
	default:
		// The dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache, /usr/lib, …).
		c = append(c, "libmlxc.so")
	}
	return c
}

// Open loads libmlxc once per process, installs the error handler, checks the MLX version and starts the
// MLX thread. Later calls return the same runtime or the same error.
func Open() (*Runtime, error) {
	openOnce.Do(func() { rt, openErr = open() })
	return rt, openErr
}

func open() (*Runtime, error) {
	var lib uintptr
	var tried []string
	found := false
	for _, p := range candidates() {
		if filepath.IsAbs(p) {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
				continue
			}
			found = true
			// libmlxc needs libmlx; a build installed outside the loader path usually has it beside libmlxc
			// without an rpath, so load it from there first (failure here is reported by the next Dlopen).
			for _, dep := range []string{"libmlx.so", "libmlx.dylib"} {
				if dp := filepath.Join(filepath.Dir(p), dep); fileExists(dp) {
					_, _ = purego.Dlopen(dp, purego.RTLD_NOW|purego.RTLD_GLOBAL)
				}
			}
		}
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib = h
			break
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
	}
	if lib == 0 {
		what := "libmlxc not found"
		if found {
			what = "libmlxc found but could not be loaded"
		}
		return nil, fmt.Errorf("%w: %s: set %s to the path of libmlxc (mlx-c %s, MLX %s); tried %s",
			ErrUnavailable, what, EnvLib, HeaderVersion, MLXVersion, strings.Join(tried, "; "))
	}
	for _, s := range table {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("%w: libmlxc lacks %s (built from mlx-c %s headers): %v", ErrUnavailable, s.name, HeaderVersion, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	r := &Runtime{work: make(chan func()), broken: make(chan struct{})}
	ready := make(chan error, 1)
	go r.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return r, nil
}

// Runtime owns the one OS thread that talks to MLX (streams and the error slot are per thread).
type Runtime struct {
	work   chan func()
	stream Stream
	// lastErr is the message of the latest MLX error on the MLX thread (only that thread touches it).
	lastErr string
	gpu     bool
	// later holds handles whose Go owners became unreachable (runtime.AddCleanup); the MLX thread frees
	// them before its next job, since cleanups run on other goroutines.
	laterMu sync.Mutex
	later   []Array
	// broken is closed by Fail (a distributed peer stopped answering while the MLX thread waits on it):
	// every Do from then on returns brokenErr at once instead of queueing behind the stuck thread.
	broken     chan struct{}
	brokenOnce sync.Once
	brokenErr  error
	// cpu is the CPU stream distributed ops run on (MLX has no GPU send/recv); made on first use.
	cpu Stream
}

// FreeLater queues handles to be freed on the MLX thread. Safe from any goroutine (for cleanups).
func (r *Runtime) FreeLater(hs ...Array) {
	r.laterMu.Lock()
	r.later = append(r.later, hs...)
	r.laterMu.Unlock()
}

func (r *Runtime) drainLater() {
	r.laterMu.Lock()
	hs := r.later
	r.later = nil
	r.laterMu.Unlock()
	for _, h := range hs {
		if h != 0 {
			ArrayFree(h)
		}
	}
}

// handler is the C error handler: it records the message instead of exiting the process. It runs on the
// thread that made the failing call, which is always the runtime's thread.
var handler = func(msg *byte, _ unsafe.Pointer) {
	if rt := current; rt != nil {
		rt.lastErr = GoString(msg)
	}
}

// current is the runtime whose thread is executing MLX calls (set once before the first call).
var current *Runtime

func (r *Runtime) loop(ready chan<- error) {
	runtime.LockOSThread()
	// The thread is never unlocked: MLX's per-thread state (default stream) lives on it until exit.
	current = r
	// Before any other MLX call: the default handler calls exit().
	SetErrorHandler(purego.NewCallback(handler), nil, 0)
	var v String = StringNew()
	if rc := Version(&v); rc != 0 {
		ready <- fmt.Errorf("%w: mlx_version failed: %s", ErrUnavailable, r.takeErr())
		return
	}
	ver := GoString(StringData(v))
	StringFree(v)
	if ver != MLXVersion && !strings.HasPrefix(ver, MLXVersion+"+") && !strings.HasPrefix(ver, MLXVersion+".") {
		ready <- fmt.Errorf("%w: libmlxc reports MLX %q, this build needs MLX %s (mlx-c %s): rebuild mlx-c %s or point %s at a matching library",
			ErrUnavailable, ver, MLXVersion, HeaderVersion, HeaderVersion, EnvLib)
		return
	}
	// Metal on macOS when the library has it; the CPU backend otherwise (and always on Linux builds).
	if runtime.GOOS == "darwin" {
		dev := DeviceNewType(GPU, 0)
		if SetDefaultDevice(dev) == 0 {
			r.stream, r.gpu = DefaultGpuStreamNew(), r.lastErr == ""
		}
		DeviceFree(dev)
		r.lastErr = ""
	}
	if !r.gpu {
		dev := DeviceNewType(CPU, 0)
		rc := SetDefaultDevice(dev)
		DeviceFree(dev)
		if rc != 0 {
			ready <- fmt.Errorf("%w: set default device: %s", ErrUnavailable, r.takeErr())
			return
		}
		r.stream = DefaultCpuStreamNew()
	}
	r.lastErr = ""
	ready <- nil
	for f := range r.work {
		r.drainLater()
		f()
	}
}

// takeErr returns and clears the recorded MLX error message.
func (r *Runtime) takeErr() string {
	m := r.lastErr
	r.lastErr = ""
	if m == "" {
		m = "unknown MLX error"
	}
	return m
}

// GPU reports whether ops run on the GPU (Metal) rather than MLX's CPU backend.
func (r *Runtime) GPU() bool { return r.gpu }

// Stream is the stream every op runs on.
func (r *Runtime) Stream() Stream { return r.stream }

// Do runs f on the MLX thread and waits. f reports failures through Check; an MLX error recorded during f
// that f did not report is returned too.
func (r *Runtime) Do(f func() error) error {
	done := make(chan error, 1)
	job := func() {
		r.lastErr = ""
		err := f()
		if err == nil && r.lastErr != "" {
			err = &Error{Msg: r.takeErr()}
		}
		r.lastErr = ""
		done <- err
	}
	select {
	case r.work <- job:
	case <-r.broken:
		return r.brokenErr
	}
	select {
	case err := <-done:
		return err
	case <-r.broken:
		return r.brokenErr
	}
}

// Error is an error reported by MLX.
type Error struct{ Msg string }

func (e *Error) Error() string { return "mlx: " + e.Msg }

// Check turns an mlx-c return code into an error carrying MLX's message. Call it only on the MLX thread.
func (r *Runtime) Check(rc int32) error {
	if rc == 0 {
		return nil
	}
	return &Error{Msg: r.takeErr()}
}

// Pending returns the recorded MLX error (for calls that return a handle, not a code) and clears it.
func (r *Runtime) Pending() error {
	if r.lastErr == "" {
		return nil
	}
	return &Error{Msg: r.takeErr()}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
