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

// A command substitution's command is a command of its own; the substitution expands to nothing.
func TestCommandSubstitution(t *testing.T) {
	md := "```sh\neval \"$(bin/higgsd shellenv --addr http://h:1)\"\n```\n"
	path := filepath.Join(t.TempDir(), "a.md")
	require.NoError(t, os.WriteFile(path, []byte(md), 0o644))
	cmds, _, err := Commands(path, nil)
	require.NoError(t, err)
	require.Len(t, cmds, 2)
	assert.Equal(t, []string{"eval", ""}, cmds[0].Args)
	assert.Equal(t, []string{"bin/higgsd", "shellenv", "--addr", "http://h:1"}, cmds[1].Args)
}

func TestIndentedFence(t *testing.T) {
	md := "1. Build:\n\n   ```sh\n   go build -o bin/x ./cmd/x\n     --indented-more\n   ```\n\n2. Run.\n"
	path := filepath.Join(t.TempDir(), "a.md")
	require.NoError(t, os.WriteFile(path, []byte(md), 0o644))
	blocks, err := Blocks(path)
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	assert.Equal(t, "sh", blocks[0].Lang)
	assert.Equal(t, 4, blocks[0].Line)
	assert.Equal(t, "go build -o bin/x ./cmd/x\n  --indented-more\n", blocks[0].Text, "the fence's indentation removed")
}

func TestTableCommands(t *testing.T) {
	md := "| date | command | result |\n| --- | --- | --- |\n" +
		"| d1 | `tool bench --x 'a b'` and `tool gen` | `other` |\n" +
		"| d2 | `go test -bench 'A\\|B'` | `tool x --re 'p\\|q'` |\n\n" +
		"```sh\n| `tool not --a table` |\n```\n\n`tool prose`\n"
	path := filepath.Join(t.TempDir(), "a.md")
	require.NoError(t, os.WriteFile(path, []byte(md), 0o644))
	cmds, err := TableCommands(path, "tool", nil)
	require.NoError(t, err)
	require.Len(t, cmds, 3)
	assert.Equal(t, []string{"tool", "bench", "--x", "a b"}, cmds[0].Args)
	assert.Equal(t, 3, cmds[0].Line)
	assert.Equal(t, []string{"tool", "gen"}, cmds[1].Args)
	assert.Equal(t, []string{"tool", "x", "--re", "p|q"}, cmds[2].Args, `\| is |`)
	assert.Equal(t, 4, cmds[2].Line)
}
