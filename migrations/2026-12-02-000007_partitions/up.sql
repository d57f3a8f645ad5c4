-- Partitioned execution (PAR-1..PAR-4): a backfill whose definition allows
-- more than one partition and whose range split into more than one
-- sub-range has one row here per sub-range, written by `start` in the
-- transaction that captures the bound and never deleted. A backfill
-- without rows here runs on its own row as the original contract says.
--
-- Each row is a contiguous range (lower, upper] of the stored key
-- encoding (bytea order is key order, EX-2): `lower` NULL lies before
-- every key, and the first row's lower is NULL, each next row's lower is
-- the previous row's upper, the last row's upper is the bound. The
-- partition's checkpoint starts at its lower and ends at its upper; its
-- claim (owner, lease, generation) and counters are its own, so batches
-- of different partitions never wait on one row lock.
CREATE TABLE backfill_partition (
    backfill_id      backfill_id_text NOT NULL REFERENCES backfill (id),
    part             integer NOT NULL CHECK (part >= 0 AND part < 64),
    lower            bytea,
    lower_json       jsonb,
    upper            bytea NOT NULL,
    upper_json       jsonb NOT NULL,
    checkpoint       bytea,
    checkpoint_json  jsonb,
    generation       bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
    owner            backfill_owner_name,
    lease_expires_at timestamptz,
    -- Consecutive retryable failures of this partition (RT-2).
    attempts         backfill_small_count NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    last_error       backfill_diagnostic,
    rows_done        bigint NOT NULL DEFAULT 0,
    batches_done     bigint NOT NULL DEFAULT 0,
    batch_size       backfill_batch_size,
    -- The throttle condition this partition's runner last reported, as
    -- `backfill.throttle` is for a backfill without partitions (THR-2).
    throttle         backfill_throttle,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (backfill_id, part),
    CONSTRAINT backfill_partition_claim_shape
        CHECK ((owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT backfill_partition_range CHECK (lower IS NULL OR lower < upper)
);

-- The range never changes, the checkpoint never moves backward nor past
-- the upper end, the generation never moves backward (PAR-1, EX-3,
-- CLM-1). The WHEN clause keeps the PL/pgSQL body off the batch path.
CREATE FUNCTION backfill_partition_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'backfill % partition %: range, checkpoint order and generation are fixed',
        OLD.backfill_id, OLD.part USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER backfill_partition_guard BEFORE UPDATE ON backfill_partition
    FOR EACH ROW
    WHEN (NEW.backfill_id IS DISTINCT FROM OLD.backfill_id
          OR NEW.part IS DISTINCT FROM OLD.part
          OR NEW.lower IS DISTINCT FROM OLD.lower
          OR NEW.upper IS DISTINCT FROM OLD.upper
          OR (OLD.checkpoint IS NOT NULL
              AND (NEW.checkpoint IS NULL OR NEW.checkpoint < OLD.checkpoint))
          OR NEW.checkpoint > NEW.upper
          OR NEW.generation < OLD.generation)
    EXECUTE FUNCTION backfill_partition_guard();

-- Partitions are written once, by the `start` that captured the bound:
-- `backfill_start` sets `started_at = now()`, the transaction's start, so
-- a later transaction cannot add a partition to a started backfill.
CREATE FUNCTION backfill_partition_insert_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM backfill WHERE id = NEW.backfill_id
                   AND state = 'running' AND started_at = now()) THEN
        RAISE EXCEPTION 'backfill %: partitions are written only by the start that captures the bound',
            NEW.backfill_id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.checkpoint IS DISTINCT FROM NEW.lower THEN
        RAISE EXCEPTION 'backfill % partition %: a partition starts at its lower end',
            NEW.backfill_id, NEW.part USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER backfill_partition_insert_guard BEFORE INSERT ON backfill_partition
    FOR EACH ROW EXECUTE FUNCTION backfill_partition_insert_guard();

CREATE FUNCTION backfill_partition_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'backfill % partition %: partitions are never deleted',
        OLD.backfill_id, OLD.part USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER backfill_partition_no_delete BEFORE DELETE ON backfill_partition
    FOR EACH ROW EXECUTE FUNCTION backfill_partition_no_delete();

-- The batch fence of a partition (CLM-2, EX-6, PAR-2), sent with its
-- COMMIT like `backfill_checkpoint_advance` and raising the same error
-- when it matches nothing, so the COMMIT of the same message is skipped.
-- The partition's WHERE clause is the original fence (owner, partition
-- generation, lease unexpired by clock_timestamp(), expected checkpoint,
-- strictly forward and at most the partition's upper end) joined with
-- the backfill row's `state = 'running'`. Every fencing action (pause,
-- resume, retry, a recorded block or failure) advances the generation of
-- every partition in its own transaction, so a batch that read the state
-- before such an action committed waits on the partition's row lock and
-- fails the generation check once it gets it.
--
-- At the partition's upper end the backfill row is locked FOR UPDATE
-- first, in the order every admin action locks (backfill, then
-- partitions), so a pause and a last batch cannot deadlock and two
-- partitions ending at once take turns. The count of partitions not yet
-- ended is a statement of its own, so it reads a snapshot taken after
-- that lock: whichever partition ends last sees none left and moves the
-- backfill to `validating` with its checkpoint at the bound, exactly
-- once (PAR-4). Returns the backfill's state afterwards.
CREATE FUNCTION backfill_partition_advance(
    p_id text, p_part integer, p_owner text, p_generation bigint, p_expected bytea,
    p_checkpoint bytea, p_checkpoint_json jsonb, p_rows bigint, p_batch_size integer
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_upper bytea;
    v_open bigint;
BEGIN
    SELECT upper INTO v_upper FROM backfill_partition WHERE backfill_id = p_id AND part = p_part;
    IF v_upper IS NOT NULL AND p_checkpoint = v_upper THEN
        PERFORM 1 FROM backfill WHERE id = p_id FOR UPDATE;
    END IF;
    UPDATE backfill_partition p SET checkpoint = p_checkpoint, checkpoint_json = p_checkpoint_json,
        rows_done = p.rows_done + p_rows, batches_done = p.batches_done + 1, attempts = 0,
        batch_size = p_batch_size, last_error = NULL,
        owner = CASE WHEN p_checkpoint = p.upper THEN NULL ELSE p.owner END,
        lease_expires_at = CASE WHEN p_checkpoint = p.upper THEN NULL ELSE p.lease_expires_at END,
        updated_at = now()
    FROM backfill b
    WHERE p.backfill_id = p_id AND p.part = p_part AND b.id = p_id AND b.state = 'running'
      AND p.owner = p_owner AND p.generation = p_generation
      AND p.lease_expires_at > clock_timestamp()
      AND p.checkpoint IS NOT DISTINCT FROM p_expected
      AND p_checkpoint > coalesce(p.checkpoint, ''::bytea) AND p_checkpoint <= p.upper;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'backfill stale fence' USING ERRCODE = 'BF001';
    END IF;
    IF p_checkpoint <> v_upper THEN
        RETURN 'running';
    END IF;
    SELECT count(*) INTO v_open FROM backfill_partition
        WHERE backfill_id = p_id AND checkpoint IS DISTINCT FROM upper;
    IF v_open > 0 THEN
        RETURN 'running';
    END IF;
    UPDATE backfill b SET state = 'validating', checkpoint = b.bound, checkpoint_json = b.bound_json,
        rows_done = s.rows, batches_done = s.batches, attempts = 0, updated_at = now()
    FROM (SELECT coalesce(sum(rows_done), 0)::bigint AS rows,
                 coalesce(sum(batches_done), 0)::bigint AS batches
          FROM backfill_partition WHERE backfill_id = p_id) s
    WHERE b.id = p_id AND b.state = 'running';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'backfill stale fence' USING ERRCODE = 'BF001';
    END IF;
    RETURN 'validating';
END
$$;
