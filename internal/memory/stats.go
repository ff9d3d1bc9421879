package memory

import (
	"context"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// Stats counts soniq_jobs by status and the dead-letter rows.
func (b *Backend) Stats(ctx context.Context) (backends.Stats, error) {
	if err := ctx.Err(); err != nil {
		return backends.Stats{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var s backends.Stats
	for _, j := range b.jobs {
		s.Count(j.Status, 1)
	}
	s.Count("dead_letter", int64(len(b.deadLetters)))
	return s, nil
}
