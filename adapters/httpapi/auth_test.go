package httpapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBearerToken(t *testing.T) {
	for _, c := range []struct{ header, want string }{
		{"Bearer k", "k"},
		{"bearer k", "k"},
		{"BEARER  k ", "k"},
		{" Bearer k\t", "k"},
		{"Bearer a b", "a b"},
		{"Basic k", ""},
		{"Bearerk", ""},
		{"k", ""},
		{"", ""},
		{"Bearer", ""},
		{"Bearer ", ""},
	} {
		assert.Equal(t, c.want, BearerToken(c.header), "%q", c.header)
	}
}

// FuzzBearerToken checks, for any header, that the token is trimmed, found after a Bearer scheme, and that a
// header built from a token gives it back.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer k", "bearer  k ", "Basic k", "", "Bearer", "\tBearer\tk", "Bearer \u00a0k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok := BearerToken(header)
		if tok == "" {
			return
		}
		if tok != strings.TrimSpace(tok) {
			t.Fatalf("token %q of %q is not trimmed", tok, header)
		}
		h := strings.TrimSpace(header)
		if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") || !strings.HasSuffix(h, tok) {
			t.Fatalf("token %q from %q, which is not a Bearer header ending with it", tok, header)
		}
		if again := BearerToken("Bearer " + tok); again != tok {
			t.Fatalf("Bearer %q gives %q", tok, again)
		}
	})
}
