-- The timeline triggers as the timeline migration made them.

CREATE OR REPLACE FUNCTION backfill_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER backfill_timeline ON backfill;
CREATE TRIGGER backfill_timeline AFTER UPDATE ON backfill
    FOR EACH ROW
    WHEN (NEW.state IS DISTINCT FROM OLD.state
          OR NEW.generation IS DISTINCT FROM OLD.generation
          OR NEW.last_error_at IS DISTINCT FROM OLD.last_error_at
          OR (OLD.throttle IS NULL) <> (NEW.throttle IS NULL)
          OR NEW.validated_at IS DISTINCT FROM OLD.validated_at)
    EXECUTE FUNCTION backfill_timeline();

CREATE OR REPLACE FUNCTION backfill_partition_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER backfill_partition_timeline ON backfill_partition;
CREATE TRIGGER backfill_partition_timeline AFTER UPDATE ON backfill_partition
    FOR EACH ROW
    WHEN (NEW.generation IS DISTINCT FROM OLD.generation
          OR NEW.last_error IS DISTINCT FROM OLD.last_error
          OR (OLD.throttle IS NULL) <> (NEW.throttle IS NULL))
    EXECUTE FUNCTION backfill_partition_timeline();
