package serve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCgroupLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "max\n", want: 0},
		{in: "8589934592\n", want: 8 << 30},
		{in: "9223372036854771712\n", want: 9223372036854771712},
		{in: "", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "8G", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseCgroupLimit(tc.in)
		if tc.wantErr {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func FuzzParseCgroupLimit(f *testing.F) {
	for _, s := range []string{"max", "max\n", "1073741824\n", "-5", "", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseCgroupLimit(s)
		if err == nil {
			assert.GreaterOrEqual(t, n, int64(0))
		}
	})
}

// TestMemoryBudgetHonoursCgroupLimit: a container's limit below the RAM is what the default budget halves;
// "max" (none), an unreadable file and a v1 "unlimited" count leave the RAM.
func TestMemoryBudgetHonoursCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	const ram = 64 << 30
	limited := write("limited", "4294967296\n")
	none := write("none", "max\n")
	v1 := write("v1", "9223372036854771712\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		files []string
		want  int64
	}{
		{files: []string{limited}, want: 4 << 30},
		{files: []string{missing, limited}, want: 4 << 30},
		{files: []string{none, limited}, want: ram},
		{files: []string{missing, v1}, want: ram},
		{files: []string{missing}, want: ram},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, limitedMemory(ram, cgroupMemoryLimit(tc.files)), "%v", tc.files)
	}
	assert.Equal(t, int64(4<<30), limitedMemory(0, 4<<30), "unknown RAM: the limit")
	assert.Equal(t, int64(0), limitedMemory(0, 0))
}
