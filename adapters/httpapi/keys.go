package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"

	"github.com/higgs-go/higgs/ports"
)

// OperatorTenant is the tenant of the requests the operator key (Keys' admin key) sends.
const OperatorTenant ports.Tenant = "operator"

// Identity is who a request authenticated as.
type Identity struct {
	// Tenant is the client's tenant ("" on a server without keys: everyone is that one tenant).
	Tenant ports.Tenant
	// Operator is set for the operator key: it may watch every tenant's generations.
	Operator bool
}

// EventScope is what the identity may watch on the event stream: every generation for the operator, its
// tenant's otherwise.
func (id Identity) EventScope() ports.EventScope {
	return ports.EventScope{All: id.Operator, Tenant: id.Tenant}
}

// Keys are the credentials a server accepts: each tenant key is a tenant of its own, and the operator key
// (optional) is the operator's. No key at all means no authentication and one tenant. Keys are kept as their
// SHA-256 digests, compared in constant time (their length does not show either); the tenant a key names is
// its position ("tenant-1", "tenant-2"…), nothing derived from the key's text. A *Keys is read-only: safe for
// concurrent use. A nil *Keys accepts everyone as the one tenant.
type Keys struct {
	tenants []keyDigest
	ids     []ports.Tenant
	admin   *keyDigest
}

type keyDigest [sha256.Size]byte

// NamedKey is a key and where it was given (for error messages: "--api-key 2", "keys.txt:7").
type NamedKey struct {
	Key, From string
}

// NewKeys checks and holds the tenant keys, in order, and the operator key ("": none). Every problem is
// reported at once, naming where the key was given but never the key: an empty key, a key with a space or a
// control character (no client could send it as given), the same key twice (two tenants cannot share one),
// the operator key also given as a tenant's.
func NewKeys(tenantKeys []NamedKey, adminKey string) (*Keys, error) {
	var errs []error
	k := &Keys{}
	seen := map[keyDigest]string{}
	for _, nk := range tenantKeys {
		if err := checkKey(nk.Key); err != nil {
			errs = append(errs, fmt.Errorf("API key (%s): %w", nk.From, err))
			continue
		}
		d := keyDigest(sha256.Sum256([]byte(nk.Key)))
		if first, dup := seen[d]; dup {
			errs = append(errs, fmt.Errorf("API key (%s) repeats the key of %s: each key is a tenant of its own", nk.From, first))
			continue
		}
		seen[d] = nk.From
		k.tenants = append(k.tenants, d)
		k.ids = append(k.ids, ports.Tenant("tenant-"+strconv.Itoa(len(k.ids)+1)))
	}
	if adminKey != "" {
		d := keyDigest(sha256.Sum256([]byte(adminKey)))
		if err := checkKey(adminKey); err != nil {
			errs = append(errs, fmt.Errorf("admin key: %w", err))
		} else if first, dup := seen[d]; dup {
			errs = append(errs, fmt.Errorf("the admin key repeats the API key of %s: the operator's key must be its own", first))
		} else {
			k.admin = &d
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

// checkKey refuses what no client could send as given in an Authorization or x-api-key header.
func checkKey(key string) error {
	if key == "" {
		return errors.New("empty")
	}
	for _, r := range key {
		if r <= ' ' || r == 0x7f {
			return errors.New("holds a space or a control character")
		}
	}
	return nil
}

// Required reports whether requests must carry a key (any key is configured).
func (k *Keys) Required() bool { return k != nil && (len(k.tenants) > 0 || k.admin != nil) }

// Tenants returns the number of tenant keys.
func (k *Keys) Tenants() int {
	if k == nil {
		return 0
	}
	return len(k.tenants)
}

// Identify returns who presented key. Without keys everyone is the one tenant; otherwise a key that is no
// configured one is refused (false). Every configured key is compared, in constant time, whichever matches.
func (k *Keys) Identify(key string) (Identity, bool) {
	if !k.Required() {
		return Identity{}, true
	}
	d := sha256.Sum256([]byte(key))
	match := -1
	for i := range k.tenants {
		if subtle.ConstantTimeCompare(d[:], k.tenants[i][:]) == 1 {
			match = i
		}
	}
	admin := k.admin != nil && subtle.ConstantTimeCompare(d[:], k.admin[:]) == 1
	switch {
	case key == "":
		return Identity{}, false
	case admin:
		return Identity{Tenant: OperatorTenant, Operator: true}, true
	case match >= 0:
		return Identity{Tenant: k.ids[match]}, true
	}
	return Identity{}, false
}

type identityKey struct{}

// WithIdentity returns ctx carrying id (the authentication middleware's result, for the handlers).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityOf returns the identity the authentication put in ctx; the zero Identity (the one tenant of a
// server without keys) when there is none.
func IdentityOf(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}
