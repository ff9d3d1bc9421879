package postgres

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// parseUUID reads every id isUUID accepts as pgx's own text decoding does,
// in either case.
func TestParseUUIDAgreesWithPgx(t *testing.T) {
	ids := []string{"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"0123abcd-4567-89ef-ABCD-0123456789aB"}
	for range 200 {
		ids = append(ids, backends.NewID())
	}
	for _, id := range ids {
		for _, s := range []string{id, strings.ToUpper(id)} {
			require.True(t, isUUID(s), s)
			var want pgtype.UUID
			require.NoError(t, want.Scan(s), s)
			assert.Equal(t, want, parseUUID(s), s)
		}
	}
}

func BenchmarkParseUUID(b *testing.B) {
	id := backends.NewID()
	var sink pgtype.UUID
	for b.Loop() {
		sink = parseUUID(id)
	}
	_ = sink
}
