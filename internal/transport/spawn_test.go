package transport

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

func TestChildEnvHoldsOnlyWhatTheManifestGrants(t *testing.T) {
	t.Setenv("API_TOKEN", "from-the-pod")
	t.Setenv("LOG_LEVEL", "debug")
	t.Setenv("SONIQ_DATABASE_URL", "postgres://user:secret@db/x")
	h := &config.Handler{Name: "py", Transport: config.TransportStdio, Env: map[string]string{"LOG_LEVEL": "info"}, EnvFrom: []string{"API_TOKEN", "LOG_LEVEL", "UNSET_VAR"}}
	assert.Equal(t, []string{
		"API_TOKEN=from-the-pod", // env_from passes it through
		"LOG_LEVEL=info",         // env wins over env_from
		"SONIQ_PROTOCOL_VERSIONS=1",
		"SONIQ_TRANSPORT=stdio",
		"SONIQ_HANDLER=py",
		"SONIQ_MAX_FRAME_BYTES=1024",
		"SONIQ_FEATURES=enqueue", // what this sidecar speaks beyond v1
	}, childEnv(h, 1024))
}
