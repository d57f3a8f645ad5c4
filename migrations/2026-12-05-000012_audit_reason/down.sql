ALTER TABLE backfill_audit DROP COLUMN reason;
