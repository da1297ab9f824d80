package httpapi

import (
	"crypto/subtle"
	"strings"
)

// BearerToken returns the credentials of an Authorization header with the Bearer scheme, compared without
// regard to case as RFC 9110 says schemes are; "" for any other header.
func BearerToken(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// KeyMatches reports whether the key a client sent is want, in time that does not depend on where they
// differ (a timing side channel would let a client guess the key byte by byte).
func KeyMatches(got string, want []byte) bool {
	return subtle.ConstantTimeCompare([]byte(got), want) == 1
}
