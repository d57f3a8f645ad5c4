DROP FUNCTION backfill_journal_all_written(bigint, bigint);

-- Back to one journal row per table row: every entry is split into its
-- rows, in order, with the undo's outcome per row.
CREATE TABLE backfill_journal_rows AS
SELECT j.backfill_id, j.seq, i,
       (SELECT jsonb_object_agg(key, value -> i) FROM jsonb_each(j.row_key)) AS row_key,
       (SELECT coalesce(jsonb_object_agg(key, value -> i), '{}') FROM jsonb_each(j.before)) AS before,
       (SELECT coalesce(jsonb_object_agg(key, value -> i), '{}') FROM jsonb_each(j.after)) AS after,
       CASE WHEN j.restored IS NULL THEN NULL
            WHEN i = ANY (j.conflicts) THEN 'conflict' ELSE 'restored' END AS undo
FROM backfill_journal AS j, generate_series(0, j.row_count - 1) AS i;

DELETE FROM backfill_journal;
ALTER TABLE backfill_journal
    DROP COLUMN row_count,
    DROP COLUMN restored,
    DROP COLUMN conflicts,
    ADD COLUMN undo text CHECK (undo IS NULL OR undo IN ('restored', 'conflict'));
INSERT INTO backfill_journal (backfill_id, row_key, before, after, undo)
SELECT backfill_id, row_key, before, after, undo FROM backfill_journal_rows ORDER BY seq, i;
DROP TABLE backfill_journal_rows;
