ALTER TABLE backfill_audit
    DROP COLUMN IF EXISTS last_at,
    DROP COLUMN IF EXISTS source,
    DROP COLUMN IF EXISTS request_count;
