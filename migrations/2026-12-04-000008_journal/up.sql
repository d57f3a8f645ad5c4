-- The before-image journal of journaled repairs (UNDO-1) and the link of
-- an undo to the backfill it takes back (UNDO-2).
--
-- A journaled batch writes one row here per table row it changed, in the
-- same transaction as its mutation and its fenced checkpoint advance: a
-- batch the fence rejects, or that rolls back for any reason, leaves none,
-- and a committed one always has them. `row_key` names the changed row by
-- its key columns, `before` and `after` hold the journaled columns as they
-- were and as the repair wrote them (both as `jsonb_build_object` makes
-- them, so equality of two images is equality of the values). `seq` orders
-- the journal: the undo of a backfill is itself a backfill whose key is
-- `seq`. `undo` is what that undo did with the row: restored, or left
-- alone as a conflict because the row no longer held what the repair wrote.
-- No foreign key to `backfill` and no domain on the ID: rows there are
-- never deleted, and a check per journal row would cost every journaled
-- batch a lookup or a regular expression per row.
CREATE TABLE backfill_journal (
    backfill_id text NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    row_key     jsonb NOT NULL,
    before      jsonb NOT NULL,
    after       jsonb NOT NULL,
    undo        text CHECK (undo IS NULL OR undo IN ('restored', 'conflict')),
    PRIMARY KEY (backfill_id, seq)
);

-- An undo's row names the backfill it takes back; at most one undo per
-- backfill, and an undo is never itself undone (UNDO-3).
ALTER TABLE backfill ADD COLUMN undo_of backfill_id_text UNIQUE REFERENCES backfill (id);
