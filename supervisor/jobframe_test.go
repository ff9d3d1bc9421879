package supervisor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/protocol"
)

func TestNewJobFrame(t *testing.T) {
	ptr := func(s string) *string { return &s }
	at := func(v time.Time) *time.Time { return &v }
	ms := func(n int64) *int64 { return &n }
	created := time.Date(2026, 1, 2, 3, 4, 5, 678_901_234, time.UTC)
	base := backends.Job{ID: "j1", Name: "n", Args: json.RawMessage(`{"a":1}`), Attempts: 2, MaxAttempts: 5,
		Queue: "q", CreatedAt: created, WorkerID: ptr("row-worker")}
	tests := []struct {
		name           string
		edit           func(j *backends.Job)
		self           string
		wantWorker     *string
		wantScheduled  *int64
		wantCreated    *int64
		wantCreatedStr string // the frame's created_at as the handler reads it
	}{
		{name: "the row's worker, no scheduled_at, created_at to the millisecond (rounded down)",
			edit: func(*backends.Job) {}, self: "self", wantWorker: ptr("row-worker"),
			wantCreated: ms(created.UnixMilli()), wantCreatedStr: "2026-01-02T03:04:05.678Z"},
		{name: "scheduled_at sent",
			edit: func(j *backends.Job) { j.ScheduledAt = at(time.UnixMilli(1767225600000).UTC()) },
			self: "self", wantWorker: ptr("row-worker"), wantScheduled: ms(1767225600000), wantCreated: ms(created.UnixMilli())},
		{name: "no worker in the row: this sidecar's",
			edit: func(j *backends.Job) { j.WorkerID = nil }, self: "self", wantWorker: ptr("self"), wantCreated: ms(created.UnixMilli())},
		{name: "NULL created_at is absent",
			edit: func(j *backends.Job) { j.CreatedAt = time.Time{} }, self: "self", wantWorker: ptr("row-worker")},
		{name: "before 1970: negative, rounded down",
			edit: func(j *backends.Job) { j.CreatedAt = time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC) },
			self: "self", wantWorker: ptr("row-worker"), wantCreated: ms(-1)},
		{name: "year 9999 is sent, year 10000 (a hand-written row) is null",
			edit: func(j *backends.Job) {
				j.ScheduledAt = at(time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC))
				j.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			},
			self: "self", wantWorker: ptr("row-worker"), wantScheduled: ms(253402300799999)},
		{name: "year 0 is null",
			edit: func(j *backends.Job) { j.CreatedAt = time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC) },
			self: "self", wantWorker: ptr("row-worker")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			tc.edit(&j)
			f := newJobFrame(&j, tc.self)
			assert.Equal(t, "j1", f.ID)
			assert.Equal(t, 2, f.Attempt)
			assert.Equal(t, 5, f.MaxAttempts)
			assert.Equal(t, tc.wantWorker, f.WorkerID)
			assert.Equal(t, tc.wantScheduled, f.ScheduledAt)
			assert.Equal(t, tc.wantCreated, f.CreatedAt)
			// Whatever is sent must decode again.
			b, err := protocol.Marshal(f)
			require.NoError(t, err)
			m, err := protocol.Decode(b)
			require.NoError(t, err, "%s", b)
			assert.Equal(t, f, m)
			if tc.wantCreatedStr != "" {
				assert.Equal(t, tc.wantCreatedStr, time.UnixMilli(*f.CreatedAt).UTC().Format("2006-01-02T15:04:05.000Z"))
			}
		})
	}
}
