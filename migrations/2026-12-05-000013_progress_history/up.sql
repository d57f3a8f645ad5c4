-- The progress history of each run (OBS-5): while a process holds a claim
-- on a `running` backfill or one of its partitions, it records the claim's
-- counters here at a fixed interval, off the batch path. Rates, the
-- sparkline and the run chart are derived from these samples on the
-- server, so every client shows the same numbers.
--
-- `part` is NULL for a claim on the backfill's own row. `generation` is the
-- claim's: consecutive samples of one generation may be joined into a
-- rate, and a change of generation (a pause and resume, a takeover, a new
-- claim after a crash) breaks the line.
--
-- Bounded: when a series (one backfill and part) holds more than 720
-- samples, every second sample of its older half is deleted. Recent
-- samples keep their full resolution and older ones thin out, so the
-- history of a long run stays whole at a coarser grain.
CREATE TABLE backfill_progress (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    backfill_id text NOT NULL,
    part        integer,
    generation  bigint NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    rows_done   bigint NOT NULL
);

-- A series is `(backfill_id, coalesce(part, -1))`: one index range each.
CREATE INDEX backfill_progress_series
    ON backfill_progress (backfill_id, (coalesce(part, -1)), at);

-- Record a sample of each listed claim that `p_worker` still holds (same
-- generation, `running`), then thin the series that outgrew the bound.
-- Returns how many samples were written. Reads the claim rows without
-- locking them: a sample is a reading, never a write of the claim.
CREATE FUNCTION backfill_progress_sample(
    p_worker text, p_ids text[], p_parts integer[], p_generations bigint[]
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    written integer;
BEGIN
    WITH h AS (
        SELECT * FROM unnest(p_ids, p_parts, p_generations) AS h(id, part, generation)
    ), s AS (
        INSERT INTO backfill_progress (backfill_id, part, generation, rows_done)
        SELECT b.id, NULL, b.generation, b.rows_done
        FROM h JOIN backfill b ON b.id = h.id AND b.generation = h.generation
        WHERE h.part IS NULL AND b.owner = p_worker AND b.state = 'running'
        UNION ALL
        SELECT p.backfill_id, p.part, p.generation, p.rows_done
        FROM h JOIN backfill_partition p
            ON p.backfill_id = h.id AND p.part = h.part AND p.generation = h.generation
        JOIN backfill b ON b.id = p.backfill_id
        WHERE p.owner = p_worker AND b.state = 'running'
        RETURNING backfill_id, part
    ), over AS (
        SELECT s.backfill_id, s.part FROM s
        WHERE EXISTS (
            SELECT 1 FROM backfill_progress o
            WHERE o.backfill_id = s.backfill_id
              AND coalesce(o.part, -1) = coalesce(s.part, -1)
            ORDER BY coalesce(o.part, -1) DESC, o.at DESC OFFSET 720 LIMIT 1)
    ), thinned AS (
        DELETE FROM backfill_progress d
        USING (
            SELECT o.seq, row_number() OVER (PARTITION BY o.backfill_id, o.part ORDER BY o.at) AS n
            FROM backfill_progress o JOIN over
                ON o.backfill_id = over.backfill_id
               AND coalesce(o.part, -1) = coalesce(over.part, -1)
        ) t
        WHERE d.seq = t.seq AND t.n <= 360 AND t.n % 2 = 0
    )
    SELECT count(*) INTO written FROM s;
    RETURN written;
END
$$;
