DROP FUNCTION IF EXISTS backfill_checkpoint_advance(text, text, bigint, bytea, bytea, jsonb, bigint);
