package remote

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readAll(t testing.TB, s string) ([]event, error) {
	t.Helper()
	r := newSSEReader(strings.NewReader(s))
	var out []event
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []event
	}{
		{"data only", "data: {\"a\":1}\n\n", []event{{Data: []byte(`{"a":1}`)}}},
		{"named", "event: ping\ndata: {}\n\n", []event{{Name: "ping", Data: []byte(`{}`)}}},
		{"multi-line data", "data: a\ndata: b\n\n", []event{{Data: []byte("a\nb")}}},
		{"no space after colon", "data:x\n\n", []event{{Data: []byte("x")}}},
		{"comment and blank lines", ": keep-alive\n\n\ndata: y\n\n", []event{{Data: []byte("y")}}},
		{"CRLF", "event: e\r\ndata: z\r\n\r\n", []event{{Name: "e", Data: []byte("z")}}},
		{"CR", "data: z\r\r", []event{{Data: []byte("z")}}},
		{"name without data is not dispatched", "event: e\n\ndata: q\n\n", []event{{Data: []byte("q")}}},
		{"unterminated event dropped", "data: a\n\ndata: b", []event{{Data: []byte("a")}}},
		{"unknown fields ignored", "id: 3\nretry: 10\ndata: d\n\n", []event{{Data: []byte("d")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSSEReaderBoundsAnEvent(t *testing.T) {
	_, err := readAll(t, "data: "+strings.Repeat("x", maxEventBytes+1)+"\n\n")
	assert.ErrorIs(t, err, errEventTooLarge)
}

// FuzzSSEReader: any input ends in EOF or a bounded-size error, never a panic, and the events read from the
// stream are the same whatever line ends it uses.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: {\"a\":1}\n\n", "event: x\r\ndata: y\r\n\r\n", ": c\n\ndata:\n\n", "data: a\ndata: b\n\n", "\r\r\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		evs, err := readAll(t, s)
		if err != nil {
			require.ErrorIs(t, err, errEventTooLarge)
			return
		}
		if strings.ContainsRune(s, '\r') {
			return
		}
		crlf, err := readAll(t, strings.ReplaceAll(s, "\n", "\r\n"))
		require.NoError(t, err)
		assert.Equal(t, evs, crlf)
	})
}
