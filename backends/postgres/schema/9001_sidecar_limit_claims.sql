-- The sidecar's own log of the claims of rate-limited scopes (docs/limits.md):
-- one row per claim, written by the claim under its scope and key's lock
-- and read by the next claimer to count the claims in the window; rows older
-- than the window are deleted by the claims as they go. Not one of Soniq's
-- tables; Soniq never reads it.
CREATE TABLE IF NOT EXISTS soniq_sidecar_limit_claims (
  scope TEXT NOT NULL,
  key TEXT,
  claimed_at TIMESTAMP WITH TIME ZONE NOT NULL
);
CREATE INDEX IF NOT EXISTS soniq_sidecar_limit_claims_window
  ON soniq_sidecar_limit_claims (scope, key, claimed_at);
