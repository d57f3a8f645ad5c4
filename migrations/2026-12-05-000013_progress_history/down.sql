DROP FUNCTION backfill_progress_sample(text, text[], integer[], bigint[]);
DROP TABLE backfill_progress;
