package supervisor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/internal/config"
	"github.com/soniq-dev/soniq-sidecar/internal/memory"
)

// A library caller's partial Settings: a reserve of no rows (or fewer)
// takes the default cap, a negative claim_ahead means none, and values
// given are kept.
func TestNewDefaultsTheClaimAheadSettings(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*config.Settings)
		wantFor time.Duration
		wantMax int
	}{
		{name: "left out", edit: func(s *config.Settings) { s.ClaimAhead, s.ClaimAheadMax = 0, 0 },
			wantFor: 0, wantMax: 500},
		{name: "out of range", edit: func(s *config.Settings) { s.ClaimAhead, s.ClaimAheadMax = -time.Second, -3 },
			wantFor: 0, wantMax: 500},
		{name: "given", edit: func(s *config.Settings) { s.ClaimAhead, s.ClaimAheadMax = 30*time.Millisecond, 7 },
			wantFor: 30 * time.Millisecond, wantMax: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			settings := config.DefaultSettings()
			tt.edit(&settings)
			sup, err := New(Config{Manifest: examplesManifest(t), Settings: settings, Backend: memory.New()})
			require.NoError(t, err)
			assert.Equal(t, tt.wantFor, sup.cfg.Settings.ClaimAhead)
			assert.Equal(t, tt.wantMax, sup.cfg.Settings.ClaimAheadMax)
		})
	}
}
