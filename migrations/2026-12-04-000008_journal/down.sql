ALTER TABLE backfill DROP COLUMN IF EXISTS undo_of;
DROP TABLE IF EXISTS backfill_journal;
