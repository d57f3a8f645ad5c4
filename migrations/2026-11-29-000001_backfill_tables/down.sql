DROP TABLE IF EXISTS backfill_request;
DROP TABLE IF EXISTS backfill_audit;
DROP TABLE IF EXISTS backfill;
DROP FUNCTION IF EXISTS backfill_no_delete();
DROP FUNCTION IF EXISTS backfill_guard();
