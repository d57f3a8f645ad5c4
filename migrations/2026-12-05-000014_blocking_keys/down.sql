ALTER TABLE backfill DROP COLUMN blocking_keys;
