DROP FUNCTION IF EXISTS backfill_partition_advance(text, integer, text, bigint, bytea, bytea, jsonb, bigint, integer);
DROP TABLE IF EXISTS backfill_partition;
DROP FUNCTION IF EXISTS backfill_partition_no_delete();
DROP FUNCTION IF EXISTS backfill_partition_insert_guard();
DROP FUNCTION IF EXISTS backfill_partition_guard();
