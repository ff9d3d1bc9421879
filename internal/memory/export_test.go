package memory

import (
	"context"

	"github.com/soniq-dev/soniq-sidecar/backends/backendtest"
)

// TaskRegistry reads every task registry row, for the contract suite's
// harness (memory_test.go); it exists in test builds only.
func (b *Backend) TaskRegistry(ctx context.Context) ([]backendtest.TaskRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backendtest.TaskRow, 0, len(b.tasks))
	for k, seen := range b.tasks {
		out = append(out, backendtest.TaskRow{TaskName: k.name, WorkerID: k.workerID, LastSeenAt: seen})
	}
	return out, nil
}

// OrphanJob sets a job's worker_id to nil, for the contract suite's harness.
func (b *Backend) OrphanJob(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.jobs[id]; ok {
		j.WorkerID = nil
	}
	return nil
}
