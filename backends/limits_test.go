package backends

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLimitKey(t *testing.T) {
	for _, tc := range []struct {
		args string
		path []string
		key  string
		ok   bool
	}{
		{`{"tenant":"acme"}`, []string{"tenant"}, "acme", true},
		{`{"tenant":42}`, []string{"tenant"}, "42", true},
		{`{"tenant":true}`, []string{"tenant"}, "true", true},
		{`{"a":{"b":"x"}}`, []string{"a", "b"}, "x", true},
		{`{"tenant":"a\u00e9"}`, []string{"tenant"}, "aé", true},
		{`{}`, []string{"tenant"}, "", false},
		{`{"tenant":null}`, []string{"tenant"}, "", false},
		{`{"tenant":{"id":1}}`, []string{"tenant"}, "", false},
		{`{"tenant":[1]}`, []string{"tenant"}, "", false},
		{`{"a":[{"b":1}]}`, []string{"a", "b"}, "", false},
		{`[1]`, []string{"tenant"}, "", false},
	} {
		key, ok := LimitKey(json.RawMessage(tc.args), tc.path)
		assert.Equal(t, tc.ok, ok, tc.args)
		assert.Equal(t, tc.key, key, tc.args)
	}
}

func TestLimitLockIDSeparatesScopesKeysAndNull(t *testing.T) {
	ids := map[int64]string{}
	for _, c := range []struct {
		scope, key string
		null       bool
	}{{"a", "x", false}, {"a", "y", false}, {"b", "x", false}, {"a", "", false}, {"a", "", true}, {"ax", "", true}} {
		id := LimitLockID(c.scope, c.key, c.null)
		_, dup := ids[id]
		assert.False(t, dup, "%+v", c)
		ids[id] = c.scope
	}
	assert.Equal(t, LimitLockID("s", "k", false), LimitLockID("s", "k", false), "stable")
}

func TestClaimLimitCaps(t *testing.T) {
	l := ClaimLimit{Concurrency: 5, RateN: 10, RatePer: 1e9, Keys: []KeyCaps{{Key: "a", Concurrency: -1}, {Null: true, RateN: 2, RatePer: 2e9}}}
	c, r, _ := l.Caps("a", false)
	assert.Equal(t, [2]int{-1, 10}, [2]int{c, r}, "a paused, the scope's rate")
	c, r, per := l.Caps("", true)
	assert.Equal(t, [2]int{5, 2}, [2]int{c, r})
	assert.EqualValues(t, 2e9, per)
	c, r, _ = l.Caps("b", false)
	assert.Equal(t, [2]int{5, 10}, [2]int{c, r})
}
