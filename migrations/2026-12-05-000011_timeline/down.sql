DROP TRIGGER backfill_partition_timeline ON backfill_partition;
DROP FUNCTION backfill_partition_timeline();
DROP TRIGGER backfill_timeline ON backfill;
DROP FUNCTION backfill_timeline();
DROP FUNCTION backfill_event_throttle(jsonb);
DROP FUNCTION backfill_event_record(text, text, integer, text, text, text, bigint, text);
DROP TABLE backfill_event;
