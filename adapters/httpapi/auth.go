package httpapi

import (
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
