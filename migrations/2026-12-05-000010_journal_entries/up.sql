-- One journal entry per journaled batch instead of one journal row per
-- changed table row (UNDO-1): a batch of B rows writes one heap tuple, one
-- index entry and one compressed value per image instead of B of each,
-- which is most of what journaling cost a batch.
--
-- An entry's images are column-major: `row_key`, `before` and `after`
-- each map a column name to a JSON array with one element per row of the
-- entry, in the same order (`{"id": [1, 2], ...}`); element i of every
-- array belongs to row i. `row_count` is the arrays' length. The undo records
-- per entry how many of its rows it restored (`restored`) and the
-- positions, counted from 0, of the rows it left alone as conflicts
-- (`conflicts`); both are NULL until the undo has taken the entry.
ALTER TABLE backfill_journal
    ADD COLUMN row_count integer NOT NULL DEFAULT 1 CHECK (row_count > 0),
    ADD COLUMN restored integer CHECK (restored >= 0),
    ADD COLUMN conflicts integer[];

-- Each existing row becomes an entry of one row.
UPDATE backfill_journal SET
    row_key = (SELECT jsonb_object_agg(key, jsonb_build_array(value)) FROM jsonb_each(row_key)),
    before = (SELECT coalesce(jsonb_object_agg(key, jsonb_build_array(value)), '{}') FROM jsonb_each(before)),
    after = (SELECT coalesce(jsonb_object_agg(key, jsonb_build_array(value)), '{}') FROM jsonb_each(after)),
    restored = CASE undo WHEN 'restored' THEN 1 WHEN 'conflict' THEN 0 END,
    conflicts = CASE undo WHEN 'restored' THEN '{}'::integer[] WHEN 'conflict' THEN '{0}'::integer[] END;

ALTER TABLE backfill_journal
    DROP COLUMN undo,
    ALTER COLUMN row_count DROP DEFAULT;

-- An entry's images are large and repetitive: lz4 compresses them several
-- times faster than the default pglz. A server built without lz4 keeps
-- the default.
DO $$
BEGIN
    ALTER TABLE backfill_journal
        ALTER COLUMN row_key SET COMPRESSION lz4,
        ALTER COLUMN before SET COMPRESSION lz4,
        ALTER COLUMN after SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value OR syntax_error THEN
    NULL;
END
$$;

-- A journaled batch of a declared repair reads its rows' before-images
-- without locking them and updates exactly the versions it read (by
-- ctid): a row another transaction changed in between is not updated. The batch's summary passes its selected and written counts
-- through this function, which fails the statement, and so the whole
-- batch, with a serialization failure when they differ: the runtime
-- retries such a batch from its snapshot of the row's new version.
CREATE FUNCTION backfill_journal_all_written(selected bigint, written bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF selected IS DISTINCT FROM written THEN
        RAISE EXCEPTION 'a row of a journaled batch changed after the batch read it'
            USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN selected;
END
$$;
