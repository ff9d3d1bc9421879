-- Soniq 0.1.0 migration 0001_core, restated for the sidecar. Every statement
-- is idempotent so this runs harmlessly before or after `soniq setup`, and
-- its effect must equal the release's: same column order, types, defaults,
-- constraint and index names.

CREATE TABLE IF NOT EXISTS soniq_jobs (
  id UUID PRIMARY KEY,
  job_name TEXT NOT NULL,
  args JSONB NOT NULL,
  args_hash TEXT,
  status TEXT NOT NULL DEFAULT 'queued'
    CHECK (status IN ('queued', 'processing', 'done', 'cancelled')),
  attempts INT DEFAULT 0,
  max_attempts INT DEFAULT 3,
  queue TEXT DEFAULT 'default',
  priority INT DEFAULT 100,
  unique_job BOOLEAN DEFAULT FALSE,
  dedup_key TEXT,
  scheduled_at TIMESTAMP WITH TIME ZONE,
  expires_at TIMESTAMP WITH TIME ZONE,
  last_error TEXT,
  result JSONB,
  producer_id TEXT,
  created_at TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
  updated_at TIMESTAMP WITH TIME ZONE DEFAULT NOW()
);

CREATE INDEX IF NOT EXISTS idx_soniq_jobs_status_priority
  ON soniq_jobs (status, priority) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS idx_soniq_jobs_queue_status
  ON soniq_jobs (queue, status);
CREATE INDEX IF NOT EXISTS idx_soniq_jobs_queue_status_priority
  ON soniq_jobs (queue, status, priority, scheduled_at) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS idx_soniq_jobs_scheduled_at
  ON soniq_jobs (scheduled_at) WHERE scheduled_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_soniq_jobs_expires_at
  ON soniq_jobs (expires_at) WHERE expires_at IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS idx_soniq_jobs_unique_queued
  ON soniq_jobs (job_name, args_hash) WHERE status = 'queued' AND unique_job = TRUE;
CREATE INDEX IF NOT EXISTS idx_soniq_jobs_args_hash
  ON soniq_jobs (args_hash) WHERE unique_job = TRUE;
CREATE UNIQUE INDEX IF NOT EXISTS idx_soniq_jobs_dedup_key
  ON soniq_jobs (dedup_key) WHERE status = 'queued' AND dedup_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS soniq_workers (
  id UUID PRIMARY KEY,
  hostname TEXT NOT NULL,
  pid INTEGER NOT NULL,
  queues TEXT[] DEFAULT '{}',
  concurrency INTEGER NOT NULL DEFAULT 1,
  status TEXT NOT NULL DEFAULT 'active'
    CHECK (status IN ('active', 'stopping', 'stopped')),
  last_heartbeat TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
  started_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
  version TEXT,
  metadata JSONB DEFAULT '{}'
);

CREATE INDEX IF NOT EXISTS idx_soniq_workers_last_heartbeat
  ON soniq_workers (last_heartbeat);
CREATE INDEX IF NOT EXISTS idx_soniq_workers_status
  ON soniq_workers (status);
CREATE UNIQUE INDEX IF NOT EXISTS idx_soniq_workers_host_pid
  ON soniq_workers (hostname, pid);

-- The release adds worker_id after creating the table; doing the same keeps
-- the column's position (and so SELECT * order) identical in both orders.
ALTER TABLE soniq_jobs
  ADD COLUMN IF NOT EXISTS worker_id UUID;

DO $$
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_constraint WHERE conname = 'soniq_jobs_worker_id_fkey'
  ) THEN
    ALTER TABLE soniq_jobs
      ADD CONSTRAINT soniq_jobs_worker_id_fkey
      FOREIGN KEY (worker_id) REFERENCES soniq_workers(id) ON DELETE SET NULL;
  END IF;
END
$$;

CREATE INDEX IF NOT EXISTS idx_soniq_jobs_worker_id
  ON soniq_jobs (worker_id) WHERE worker_id IS NOT NULL;

-- worker_id is TEXT here (not UUID) in the release; kept as is.
CREATE TABLE IF NOT EXISTS soniq_task_registry (
  task_name TEXT NOT NULL,
  worker_id TEXT NOT NULL,
  last_seen_at TIMESTAMP WITH TIME ZONE NOT NULL,
  args_model_repr TEXT,
  PRIMARY KEY (task_name, worker_id)
);

CREATE INDEX IF NOT EXISTS idx_soniq_task_registry_task_name
  ON soniq_task_registry (task_name);
