package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/backendtest"
)

// openTest opens and migrates a fresh database file in t's temp directory.
func openTest(t testing.TB) (*Backend, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soniq.db")
	return openPath(t, path), path
}

// openPath opens and migrates the database at path, closing it at cleanup.
func openPath(t testing.TB, path string) *Backend {
	t.Helper()
	b, err := Open(context.Background(), path)
	require.NoError(t, err, "open %s", path)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	require.NoError(t, b.Migrate(context.Background()), "migrate")
	return b
}

// harness wires the contract suite's raw hooks to direct SQL on b's write
// connection, bypassing every check of the Backend methods.
func harness(b *Backend) backendtest.Harness {
	return backendtest.Harness{
		Backend: b,
		SetRawStatus: func(ctx context.Context, jobID, status string) error {
			_, err := b.write.ExecContext(ctx, `UPDATE soniq_jobs SET status = ? WHERE id = ?`, status, jobID)
			return err
		},
		InsertRawStatus: func(ctx context.Context, status string) error {
			id := backends.NewID()
			ts := formatTime(now())
			_, err := b.write.ExecContext(ctx, `INSERT INTO soniq_jobs (id, job_name, args, status, created_at, updated_at)
				VALUES (?, 'raw.insert', '{}', ?, ?, ?)`, id, status, ts, ts)
			return err
		},
		BackdateHeartbeat: func(ctx context.Context, workerID string, d time.Duration) error {
			return backdate(ctx, b, "soniq_workers", "last_heartbeat", workerID, d)
		},
		BackdateExpiry: func(ctx context.Context, jobID string, d time.Duration) error {
			return backdate(ctx, b, "soniq_jobs", "expires_at", jobID, d)
		},
		BackdateCreated: func(ctx context.Context, jobID string, d time.Duration) error {
			return backdate(ctx, b, "soniq_jobs", "created_at", jobID, d)
		},
		BackdateCancelRequest: func(ctx context.Context, jobID string, d time.Duration) error {
			return b.inWriteTx(ctx, "backdating a cancel request", func(tx *sql.Tx) error {
				var requested string
				var resolved sql.NullString
				if err := tx.QueryRowContext(ctx, `SELECT requested_at, resolved_at FROM soniq_sidecar_cancel_requests WHERE job_id = ?`,
					jobID).Scan(&requested, &resolved); err != nil {
					return err
				}
				shift := func(s string) (string, error) {
					t, err := parseTime(s)
					return formatTime(t.Add(-d)), err
				}
				req, err := shift(requested)
				if err != nil {
					return err
				}
				var res any
				if resolved.Valid {
					if res, err = shift(resolved.String); err != nil {
						return err
					}
				}
				_, err = tx.ExecContext(ctx, `UPDATE soniq_sidecar_cancel_requests SET requested_at = ?, resolved_at = ? WHERE job_id = ?`,
					req, res, jobID)
				return err
			})
		},
		BackdateDeadLetter: func(ctx context.Context, jobID string, d time.Duration) error {
			return backdate(ctx, b, "soniq_dead_letter_jobs", "moved_to_dead_letter_at", jobID, d)
		},
		OrphanJob: func(ctx context.Context, jobID string) error {
			_, err := b.write.ExecContext(ctx, `UPDATE soniq_jobs SET worker_id = NULL WHERE id = ?`, jobID)
			return err
		},
		SetRawAttempts: func(ctx context.Context, jobID string, attempts int) error {
			_, err := b.write.ExecContext(ctx, `UPDATE soniq_jobs SET attempts = ? WHERE id = ?`, attempts, jobID)
			return err
		},
		TaskRegistry: func(ctx context.Context) ([]backendtest.TaskRow, error) {
			return taskRegistry(ctx, b)
		},
	}
}

// taskRegistry reads every soniq_task_registry row.
func taskRegistry(ctx context.Context, b *Backend) ([]backendtest.TaskRow, error) {
	rows, err := b.write.QueryContext(ctx, `SELECT task_name, worker_id, last_seen_at FROM soniq_task_registry`)
	if err != nil {
		return nil, fmt.Errorf("read task registry: %w", err)
	}
	defer rows.Close()
	var out []backendtest.TaskRow
	for rows.Next() {
		var r backendtest.TaskRow
		var seen string
		if err := rows.Scan(&r.TaskName, &r.WorkerID, &seen); err != nil {
			return nil, fmt.Errorf("read task registry: %w", err)
		}
		if r.LastSeenAt, err = parseTime(seen); err != nil {
			return nil, fmt.Errorf("read task registry: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read task registry: %w", err)
	}
	return out, nil
}

// backdate moves a TEXT timestamp column back by d, keeping Soniq's format.
func backdate(ctx context.Context, b *Backend, table, column, id string, d time.Duration) error {
	return b.inWriteTx(ctx, "backdating "+table+"."+column, func(tx *sql.Tx) error {
		var cur sql.NullString
		err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE id = ?`, column, table), id).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		}
		if err != nil {
			return err
		}
		if !cur.Valid {
			return fmt.Errorf("%s of %s is NULL", column, id)
		}
		t, err := parseTime(cur.String)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET %s = ? WHERE id = ?`, table, column),
			formatTime(t.Add(-d)), id)
		return err
	})
}

func TestContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		b, _ := openTest(t)
		return harness(b)
	})
}
