package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets a test run higgsd's own main with arguments: the test binary, started with HIGGSD_RUN_MAIN=1,
// is higgsd.
func TestMain(m *testing.M) {
	if os.Getenv("HIGGSD_RUN_MAIN") == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// higgsd returns a command running higgsd with args.
func higgsd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HIGGSD_RUN_MAIN=1", "OPENAI_BASE_URL=https://elsewhere.example/v1")
	return cmd
}

// healthy is a server whose /health answers ok, as higgsd's does.
func healthy(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// higgsd exec runs the command with the server's variables (replacing the caller's), its stdin, and its
// exit status.
func TestExecPassesEnvStdinAndStatus(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this machine")
	}
	url := healthy(t)
	cmd := higgsd(t, "exec", "--addr", url, "--", "sh", "-c", `printf '%s %s|' "$OPENAI_BASE_URL" "$ANTHROPIC_BASE_URL"; cat; exit 7`)
	cmd.Stdin = strings.NewReader("from stdin")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, stderr.String())
	assert.Equal(t, 7, exit.ExitCode(), stderr.String())
	assert.Equal(t, url+"/v1 "+url+"|from stdin", string(out))

	// Nothing answers: the command never runs.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	cmd = higgsd(t, "exec", "--addr", gone.URL, "--", "sh", "-c", "echo ran")
	out, err = cmd.Output()
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Empty(t, out)
}

// A signal sent to higgsd exec reaches the command (it is the same process after execve) and the command's
// handling decides the exit status.
func TestExecPassesSignals(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM on Windows")
	}
	url := healthy(t)
	cmd := higgsd(t, "exec", "--addr", url, "--", "sh", "-c", `trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done`)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	line, _ = r.ReadString('\n')
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 5, exit.ExitCode())
	assert.Equal(t, "got-term\n", line)
}

// higgsd shellenv through main: the statements on stdout, nothing when the server does not answer.
func TestShellenvThroughMain(t *testing.T) {
	url := healthy(t)
	out, err := higgsd(t, "shellenv", "--addr", url).Output()
	require.NoError(t, err)
	assert.Equal(t, "export OPENAI_BASE_URL='"+url+"/v1'\nexport ANTHROPIC_BASE_URL='"+url+"'\n", string(out))
}

// higgsd doctor through main: one line per check, exit status 0 for a good setup, 1 when a check fails.
func TestDoctorThroughMain(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	out, err := higgsd(t, "doctor", "--port", "0", "--model", "models/demo/target", "--draft", "models/demo/drafter").Output()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "ok    drafter")
	out, err = higgsd(t, "doctor", "--port", "0", "--model", "models/demo/target", "--block-size", "10000000", "--draft", "models/demo/drafter").Output()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, string(out), "FAIL  block size")
}
