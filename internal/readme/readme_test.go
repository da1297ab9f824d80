package readme

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommands(t *testing.T) {
	md := "# x\n\n    go run ./cmd/higgsd\n\ntext\n\n```sh\nbin/a --x 1   # a comment\ncurl -d '{\n  \"k\": \"v w\"\n}' http://h/p\n```\n\n```json\n{\"a\":1}\n```\n\n```toml\nx = 1\n```\n"
	path := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(path, []byte(md), 0o644))
	cmds, blocks, err := Commands(path, map[string]string{"HOME": "/home/u"})
	require.NoError(t, err)
	require.Len(t, blocks, 4)
	assert.Equal(t, "indented", blocks[0].Lang)
	assert.Equal(t, "json", blocks[2].Lang)
	assert.Equal(t, "{\"a\":1}\n", blocks[2].Text)
	require.Len(t, cmds, 3)
	assert.Equal(t, []string{"go", "run", "./cmd/higgsd"}, cmds[0].Args)
	assert.Equal(t, 3, cmds[0].Line)
	assert.Equal(t, []string{"bin/a", "--x", "1"}, cmds[1].Args, "comments dropped")
	assert.Equal(t, 8, cmds[1].Line)
	assert.Equal(t, []string{"curl", "-d", "{\n  \"k\": \"v w\"\n}", "http://h/p"}, cmds[2].Args, "quotes removed, newlines kept")
	assert.Equal(t, 1, cmds[2].Block)
}
