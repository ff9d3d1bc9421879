-- The sidecar's own log of the claims of rate-limited scopes (docs/limits.md):
-- one row per claim, written by the claim under its scope and key's lock
-- and read by the next claimer to count the claims in the window; rows older
-- than the window are deleted by the claims as they go, and those of keys no
-- claim takes any more by the maintenance leader's pass. Not one of Soniq's
-- tables; Soniq never reads it.
CREATE TABLE IF NOT EXISTS soniq_sidecar_limit_claims (
  scope TEXT NOT NULL,
  key TEXT,
  claimed_at TIMESTAMP WITH TIME ZONE NOT NULL
);
CREATE INDEX IF NOT EXISTS soniq_sidecar_limit_claims_window
  ON soniq_sidecar_limit_claims (scope, key, claimed_at);

-- The operators' overrides of the manifests' caps (`soniq-sidecar limit
-- set|clear|list`), read by every running sidecar each poll interval. A row
-- is a scope's own override (has_key false, key ''), one key value's
-- (has_key true), or the key null's (has_key and null_key true, key '').
-- A table made before null_key existed is upgraded by the next file.
CREATE TABLE IF NOT EXISTS soniq_sidecar_limit_overrides (
  scope TEXT NOT NULL,
  has_key BOOLEAN NOT NULL,
  null_key BOOLEAN NOT NULL DEFAULT false,
  key TEXT NOT NULL DEFAULT '',
  concurrency INTEGER,
  rate_n INTEGER,
  rate_seconds INTEGER,
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, has_key, null_key, key)
);
