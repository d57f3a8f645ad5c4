-- The timeline of each backfill (OBS-4): what happened to it, automatic or
-- by an operator, recorded by triggers in the transaction that makes the
-- change, so a rolled-back or fenced-out change leaves no record and a
-- committed one always has it.
--
-- `kind` is one of: `state` (the lifecycle moved from `from_state` to
-- `state`; `detail` holds the diagnostic of a block or failure, or the
-- validation's outcome), `claimed` (by `owner`, with its new `generation`;
-- `detail` names the previous owner of a takeover), `error` (a retryable
-- failure left the backfill running; `detail` is its diagnostic),
-- `throttled` and `unthrottled` (the claim's runner started or stopped
-- holding batches back; `detail` is the signal, value and threshold),
-- `validated` (an explicit validation; `detail` is its outcome). `part`
-- names the partition of a partition's claim, error or throttle. Details
-- are the bounded diagnostics the row itself holds, never row data.
--
-- Bounded: a backfill keeps its newest 500 records; older ones are
-- deleted as new ones arrive. The triggers' WHEN clauses leave the batch
-- fence's checkpoint updates out, so a batch pays only their evaluation.
CREATE TABLE backfill_event (
    backfill_id text NOT NULL,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text NOT NULL CHECK (kind IN ('state', 'claimed', 'error', 'throttled',
                    'unthrottled', 'validated')),
    part        integer,
    from_state  text,
    state       text,
    owner       text,
    generation  bigint,
    detail      text CHECK (octet_length(detail) <= 1024),
    PRIMARY KEY (backfill_id, seq)
);

-- Record one timeline entry and keep the backfill's newest 500.
CREATE FUNCTION backfill_event_record(
    p_id text, p_kind text, p_part integer, p_from text, p_state text,
    p_owner text, p_generation bigint, p_detail text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO backfill_event (backfill_id, kind, part, from_state, state, owner,
                                generation, detail)
    VALUES (p_id, p_kind, p_part, p_from, p_state, p_owner, p_generation,
            left(p_detail, 1000));
    DELETE FROM backfill_event
    WHERE backfill_id = p_id
      AND seq <= (SELECT seq FROM backfill_event WHERE backfill_id = p_id
                  ORDER BY seq DESC OFFSET 500 LIMIT 1);
END
$$;

-- A throttle condition as one line: `transaction_age 1.1 past 1`.
CREATE FUNCTION backfill_event_throttle(t jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT concat_ws(' ', t->>'signal', t->>'value', 'past', t->>'threshold')
$$;

CREATE FUNCTION backfill_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        PERFORM backfill_event_record(NEW.id, 'state', NULL, OLD.state, NEW.state,
            NULL, NEW.generation,
            CASE WHEN NEW.state IN ('blocked', 'failed') THEN
                     concat_ws(': ', NEW.last_error_kind, NEW.last_error)
                 WHEN NEW.state = 'completed' THEN
                     concat_ws(': ', 'validation ' || NEW.validation_outcome, NEW.validation_detail)
            END);
    END IF;
    IF NEW.owner IS NOT NULL AND NEW.generation IS DISTINCT FROM OLD.generation THEN
        PERFORM backfill_event_record(NEW.id, 'claimed', NULL, NULL, NEW.state,
            NEW.owner, NEW.generation,
            CASE WHEN OLD.owner IS NOT NULL THEN 'taken over from ' || OLD.owner END);
    END IF;
    IF NEW.last_error_at IS DISTINCT FROM OLD.last_error_at AND NEW.last_error_at IS NOT NULL
       AND NEW.state = 'running' AND NEW.state IS NOT DISTINCT FROM OLD.state THEN
        PERFORM backfill_event_record(NEW.id, 'error', NULL, NULL, NEW.state,
            NULL, NEW.generation, concat_ws(': ', NEW.last_error_kind, NEW.last_error));
    END IF;
    IF (OLD.throttle IS NULL) <> (NEW.throttle IS NULL) THEN
        PERFORM backfill_event_record(NEW.id,
            CASE WHEN NEW.throttle IS NULL THEN 'unthrottled' ELSE 'throttled' END,
            NULL, NULL, NEW.state, NULL, NEW.generation,
            backfill_event_throttle(coalesce(NEW.throttle, OLD.throttle)));
    END IF;
    IF NEW.validated_at IS DISTINCT FROM OLD.validated_at AND NEW.validated_at IS NOT NULL
       AND NEW.state IS NOT DISTINCT FROM OLD.state THEN
        PERFORM backfill_event_record(NEW.id, 'validated', NULL, NULL, NEW.state,
            NULL, NEW.generation,
            concat_ws(': ', NEW.validation_outcome, NEW.validation_detail));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER backfill_timeline AFTER UPDATE ON backfill
    FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state
          OR NEW.generation IS DISTINCT FROM OLD.generation
          OR NEW.last_error_at IS DISTINCT FROM OLD.last_error_at
          OR (OLD.throttle IS NULL) <> (NEW.throttle IS NULL)
          OR NEW.validated_at IS DISTINCT FROM OLD.validated_at)
    EXECUTE FUNCTION backfill_timeline();

CREATE FUNCTION backfill_partition_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner IS NOT NULL AND NEW.generation IS DISTINCT FROM OLD.generation THEN
        PERFORM backfill_event_record(NEW.backfill_id, 'claimed', NEW.part, NULL, NULL,
            NEW.owner, NEW.generation,
            CASE WHEN OLD.owner IS NOT NULL THEN 'taken over from ' || OLD.owner END);
    END IF;
    IF NEW.last_error IS DISTINCT FROM OLD.last_error AND NEW.last_error IS NOT NULL THEN
        PERFORM backfill_event_record(NEW.backfill_id, 'error', NEW.part, NULL, NULL,
            NULL, NEW.generation, NEW.last_error);
    END IF;
    IF (OLD.throttle IS NULL) <> (NEW.throttle IS NULL) THEN
        PERFORM backfill_event_record(NEW.backfill_id,
            CASE WHEN NEW.throttle IS NULL THEN 'unthrottled' ELSE 'throttled' END,
            NEW.part, NULL, NULL, NULL, NEW.generation,
            backfill_event_throttle(coalesce(NEW.throttle, OLD.throttle)));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER backfill_partition_timeline AFTER UPDATE ON backfill_partition
    FOR EACH ROW
    WHEN (NEW.generation IS DISTINCT FROM OLD.generation
          OR NEW.last_error IS DISTINCT FROM OLD.last_error
          OR (OLD.throttle IS NULL) <> (NEW.throttle IS NULL))
    EXECUTE FUNCTION backfill_partition_timeline();
