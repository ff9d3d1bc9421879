-- The overrides of the key null (`limit set SCOPE --null-key`): a table made
-- before they existed gets the null_key column, and its primary key takes
-- it in, so the key null's row and the key '' row are two rows. Done once:
-- a table that has the column is left as it is.
DO $$
BEGIN
  IF NOT EXISTS (
    SELECT 1 FROM pg_attribute
    WHERE attrelid = 'soniq_sidecar_limit_overrides'::regclass AND attname = 'null_key' AND NOT attisdropped
  ) THEN
    ALTER TABLE soniq_sidecar_limit_overrides ADD COLUMN null_key BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE soniq_sidecar_limit_overrides DROP CONSTRAINT soniq_sidecar_limit_overrides_pkey;
    ALTER TABLE soniq_sidecar_limit_overrides ADD PRIMARY KEY (scope, has_key, null_key, key);
  END IF;
END
$$;
