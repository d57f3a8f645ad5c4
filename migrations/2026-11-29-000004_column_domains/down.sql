DROP TRIGGER backfill_guard ON backfill;

ALTER TABLE backfill
    ALTER COLUMN id TYPE text,
    ALTER COLUMN state TYPE text,
    ALTER COLUMN source_rows TYPE bigint,
    ALTER COLUMN generation TYPE bigint,
    ALTER COLUMN owner TYPE text,
    ALTER COLUMN attempts TYPE integer,
    ALTER COLUMN last_error_kind TYPE text,
    ALTER COLUMN last_error TYPE text,
    ALTER COLUMN validation_outcome TYPE text,
    ALTER COLUMN validation_detail TYPE text,
    ALTER COLUMN description TYPE text,
    ALTER COLUMN build_info TYPE text,
    ADD CONSTRAINT backfill_id_check CHECK (id ~ '^[a-z0-9._-]{1,128}$'),
    ADD CONSTRAINT backfill_state_check CHECK (state IN ('pending', 'running', 'paused',
        'blocked', 'failed', 'validating', 'completed')),
    ADD CONSTRAINT backfill_source_rows_check CHECK (source_rows IS NULL OR source_rows >= 0),
    ADD CONSTRAINT backfill_generation_check CHECK (generation >= 0),
    ADD CONSTRAINT backfill_owner_check CHECK (owner IS NULL OR length(owner) <= 128),
    ADD CONSTRAINT backfill_attempts_check CHECK (attempts >= 0),
    ADD CONSTRAINT backfill_last_error_kind_check CHECK (last_error_kind IS NULL OR
        last_error_kind IN ('retryable', 'blocked', 'fatal', 'validation')),
    ADD CONSTRAINT backfill_last_error_check CHECK (last_error IS NULL OR octet_length(last_error) <= 512),
    ADD CONSTRAINT backfill_validation_outcome_check CHECK (validation_outcome IS NULL OR
        validation_outcome IN ('success', 'failure')),
    ADD CONSTRAINT backfill_validation_detail_check CHECK (validation_detail IS NULL OR
        octet_length(validation_detail) <= 512),
    ADD CONSTRAINT backfill_description_check CHECK (description IS NULL OR octet_length(description) <= 512),
    ADD CONSTRAINT backfill_build_info_check CHECK (build_info IS NULL OR octet_length(build_info) <= 256);

CREATE TRIGGER backfill_guard BEFORE UPDATE ON backfill
    FOR EACH ROW
    WHEN (OLD.state = 'completed'
          OR NEW.state IS DISTINCT FROM OLD.state
          OR (OLD.bound IS NOT NULL AND NEW.bound IS DISTINCT FROM OLD.bound)
          OR NEW.empty_source IS DISTINCT FROM OLD.empty_source
          OR (OLD.checkpoint IS NOT NULL
              AND (NEW.checkpoint IS NULL OR NEW.checkpoint < OLD.checkpoint))
          OR NEW.generation < OLD.generation)
    EXECUTE FUNCTION backfill_guard();

DROP DOMAIN backfill_id_text, backfill_state_name, backfill_count, backfill_small_count,
    backfill_owner_name, backfill_error_kind, backfill_outcome, backfill_diagnostic,
    backfill_build_info;
