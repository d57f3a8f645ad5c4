DROP FUNCTION backfill_checkpoint_advance(text, text, bigint, bytea, bytea, jsonb, bigint, integer);
ALTER TABLE backfill DROP COLUMN throttle, DROP COLUMN batch_size, DROP COLUMN settings;
DROP DOMAIN backfill_throttle;
DROP DOMAIN backfill_batch_size;
DROP DOMAIN backfill_settings;
