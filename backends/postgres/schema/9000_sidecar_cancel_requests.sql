-- The sidecar's own table, not Soniq's: cancel requests for running jobs
-- (`soniq-sidecar cancel`). One row per job, keyed by the job's id, with no
-- foreign key: a key on soniq_jobs would add triggers to Soniq's table. The
-- worker that holds the job answers: acknowledged (its row was written
-- cancelled in the same transaction) or refused (a sync job; handler and
-- detail say why). Settled rows are deleted by the maintenance pass after
-- an hour.

CREATE TABLE IF NOT EXISTS soniq_sidecar_cancel_requests (
  job_id UUID PRIMARY KEY,
  worker_id UUID,
  status TEXT NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'acknowledged', 'refused')),
  handler TEXT,
  detail TEXT,
  requested_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
  resolved_at TIMESTAMP WITH TIME ZONE
);

-- The holders' poll reads only pending rows.
CREATE INDEX IF NOT EXISTS soniq_sidecar_cancel_requests_pending
  ON soniq_sidecar_cancel_requests (job_id) WHERE status = 'pending';
