-- The reason an operator gave for an action (the `Backfill-Reason`
-- header: at most 2000 characters, which decode and escape to at most
-- about 5400 bytes), stored with the action's audit row.
ALTER TABLE backfill_audit
    ADD COLUMN reason text CHECK (reason IS NULL OR octet_length(reason) <= 8192);
