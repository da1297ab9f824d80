package pipeline

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The heartbeats listen on rank 0's first hostfile address; a hostfile that names none is a clear error.
func TestParseRank0Host(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{`[["192.168.1.10:5000"],["192.168.1.11:5000"]]`, "192.168.1.10", ""},
		{`[["10.0.0.1:5000","10.0.1.1:5001"],["10.0.0.2:5000"]]`, "10.0.0.1", ""},
		{`[["[fe80::1]:5000"],["[fe80::2]:5000"]]`, "fe80::1", ""},
		{`[]`, "", "lists no address for rank 0"},
		{`[[]]`, "", "lists no address for rank 0"},
		{`[["192.168.1.10"]]`, "", `rank 0's address "192.168.1.10" is not "ip:port"`},
		{`[[":5000"]]`, "", `rank 0's address ":5000" is not "ip:port"`},
		{`{"hosts": []}`, "", "is not a JSON list"},
	}
	for _, tc := range tests {
		got, err := parseRank0Host([]byte(tc.in))
		if tc.err != "" {
			require.Error(t, err, tc.in)
			assert.Contains(t, err.Error(), tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	_, err := rank0Host("")
	assert.ErrorContains(t, err, "MLX_HOSTFILE is not set")
}

func FuzzParseRank0Host(f *testing.F) {
	f.Add([]byte(`[["192.168.1.10:5000"],["192.168.1.11:5000"]]`))
	f.Add([]byte(`[["[fe80::1]:5000"]]`))
	f.Add([]byte(`[[]]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		host, err := parseRank0Host(b)
		if err != nil {
			return
		}
		// A host that parses joins with a port into an address that splits back to it.
		h, _, err := net.SplitHostPort(net.JoinHostPort(host, "0"))
		require.NoError(t, err)
		assert.Equal(t, host, h)
		assert.NotEmpty(t, host)
	})
}
