package backends

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIdentitiesMatch(t *testing.T) {
	full := `{"kind":"soniq-sidecar","instance":"a","hostname":"pod"}`
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{"the same identity", full, `{"hostname":"pod","instance":"a","kind":"soniq-sidecar","heartbeat_interval":5}`, true},
		{"another instance", full, `{"kind":"soniq-sidecar","instance":"b","hostname":"pod"}`, false},
		{"another host", full, `{"kind":"soniq-sidecar","instance":"a","hostname":"node"}`, false},
		{"a partial identity never matches", `{"kind":"soniq-sidecar","instance":"a"}`, `{"kind":"soniq-sidecar","instance":"a"}`, false},
		{"no metadata (Soniq's own workers)", ``, ``, false},
		{"not JSON", `{`, full, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, IdentitiesMatch(json.RawMessage(tt.a), json.RawMessage(tt.b)))
			assert.Equal(t, tt.want, IdentitiesMatch(json.RawMessage(tt.b), json.RawMessage(tt.a)), "symmetric")
		})
	}
}
