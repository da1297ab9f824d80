package httpapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

func named(keys ...string) []NamedKey {
	out := make([]NamedKey, len(keys))
	for i, k := range keys {
		out[i] = NamedKey{Key: k, From: "k" + string(rune('1'+i))}
	}
	return out
}

// Each key is a tenant of its own, named by its position, never by its text; the operator key is the
// operator; anything else is refused.
func TestKeysIdentify(t *testing.T) {
	k, err := NewKeys(named("alpha-key", "beta-key", "alpha-key-longer"), "root-key")
	require.NoError(t, err)
	assert.True(t, k.Required())
	assert.Equal(t, 3, k.Tenants())
	for _, c := range []struct {
		key  string
		want Identity
		ok   bool
	}{
		{"alpha-key", Identity{Tenant: "tenant-1"}, true},
		{"beta-key", Identity{Tenant: "tenant-2"}, true},
		{"alpha-key-longer", Identity{Tenant: "tenant-3"}, true},
		{"root-key", Identity{Tenant: OperatorTenant, Operator: true}, true},
		{"alpha-ke", Identity{}, false},
		{"alpha-key ", Identity{}, false},
		{"ALPHA-KEY", Identity{}, false},
		{"", Identity{}, false},
	} {
		id, ok := k.Identify(c.key)
		assert.Equal(t, c.ok, ok, "%q", c.key)
		assert.Equal(t, c.want, id, "%q", c.key)
		assert.NotContains(t, string(id.Tenant), "key", "a tenant id never shows its key")
	}
	op, _ := k.Identify("root-key")
	assert.Equal(t, ports.EventScope{All: true, Tenant: OperatorTenant}, op.EventScope())
	b, _ := k.Identify("beta-key")
	assert.Equal(t, ports.EventScope{Tenant: "tenant-2"}, b.EventScope())
}

// Without keys everyone is the one tenant (""), and sees that tenant's events: all of them.
func TestKeysNone(t *testing.T) {
	for _, k := range []*Keys{nil, mustKeys(t, nil, "")} {
		assert.False(t, k.Required())
		id, ok := k.Identify("anything")
		assert.True(t, ok)
		assert.Equal(t, Identity{}, id)
		assert.Equal(t, ports.EventScope{}, id.EventScope())
	}
	// The operator key alone turns authentication on: only it is accepted.
	k := mustKeys(t, nil, "root")
	assert.True(t, k.Required())
	_, ok := k.Identify("")
	assert.False(t, ok)
	id, ok := k.Identify("root")
	assert.True(t, ok)
	assert.True(t, id.Operator)
}

func mustKeys(t *testing.T, tenants []NamedKey, admin string) *Keys {
	t.Helper()
	k, err := NewKeys(tenants, admin)
	require.NoError(t, err)
	return k
}

// Every problem is reported at once, naming where each key was given and never the key.
func TestKeysRefused(t *testing.T) {
	_, err := NewKeys([]NamedKey{{"same-secret", "--api-key 1"}, {"other", "--api-key 2"}, {"same-secret", "keys.txt:4"},
		{"", "keys.txt:5"}, {"has space", "keys.txt:6"}, {"tab\tkey", "keys.txt:7"}}, "other")
	require.Error(t, err)
	for _, want := range []string{
		"API key (keys.txt:4) repeats the key of --api-key 1",
		"API key (keys.txt:5): empty",
		"API key (keys.txt:6): holds a space or a control character",
		"API key (keys.txt:7): holds a space",
		"the admin key repeats the API key of --api-key 2",
	} {
		assert.ErrorContains(t, err, want)
	}
	assert.NotContains(t, err.Error(), "same-secret", "an error never shows a key")
	_, err = NewKeys(nil, "bad key")
	assert.ErrorContains(t, err, "admin key: holds a space")
}
