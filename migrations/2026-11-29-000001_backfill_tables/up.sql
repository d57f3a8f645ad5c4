-- The backfill framework's own tables. The example application's schema lives
-- elsewhere (src/example/migrations) so that "schema auto-migration" of the
-- host can be switched independently of these tables.

-- One compact row per stable ID (REG-1). PostgreSQL is the only authority for
-- lifecycle, claim, progress and completion.
CREATE TABLE backfill (
    id                  text PRIMARY KEY
                        CHECK (id ~ '^[a-z0-9._-]{1,128}$'),
    state               text NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'running', 'paused', 'blocked',
                                         'failed', 'validating', 'completed')),
    -- Inclusive upper bound in the order-preserving key encoding (src/key.rs);
    -- bytea compares bytewise, which is the key's own order (EX-2).
    bound               bytea,
    bound_json          jsonb,
    -- true when `start` found an empty source set (EX-1): no bound, no work.
    empty_source        boolean NOT NULL DEFAULT false,
    -- Greatest key whose mutation is committed; NULL = before every key.
    checkpoint          bytea,
    checkpoint_json     jsonb,
    key_type            text,
    -- Size of the source set when the definition could count it at start;
    -- NULL = unknown, and progress is then shown as unknown (ADM-3).
    source_rows         bigint CHECK (source_rows IS NULL OR source_rows >= 0),
    -- Fencing value (CLM-1): advanced by every claim, takeover and fencing
    -- admin transition.
    generation          bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
    owner               text CHECK (owner IS NULL OR length(owner) <= 128),
    lease_expires_at    timestamptz,
    -- Consecutive failed attempts in `running` (RT-2); reset by progress.
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at     timestamptz,
    last_error_kind     text CHECK (last_error_kind IS NULL OR
                                    last_error_kind IN ('retryable', 'blocked', 'fatal', 'validation')),
    last_error          text CHECK (last_error IS NULL OR octet_length(last_error) <= 512),
    last_error_at       timestamptz,
    -- Progress counters: diagnostics, never authority.
    rows_done           bigint NOT NULL DEFAULT 0,
    batches_done        bigint NOT NULL DEFAULT 0,
    -- Latest validation (lifecycle or explicit), bounded (VAL-4, VAL-7).
    validation_outcome  text CHECK (validation_outcome IS NULL OR
                                    validation_outcome IN ('success', 'failure')),
    validation_detail   text CHECK (validation_detail IS NULL OR octet_length(validation_detail) <= 512),
    validated_at        timestamptz,
    -- Diagnostic metadata (REG-2): last write wins, never a fence.
    description         text CHECK (description IS NULL OR octet_length(description) <= 512),
    build_info          text CHECK (build_info IS NULL OR octet_length(build_info) <= 256),
    registered_at       timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    -- A claim is all-or-nothing.
    CONSTRAINT backfill_claim_shape CHECK ((owner IS NULL) = (lease_expires_at IS NULL)),
    -- Checkpoints never pass the bound (EX-3); bytea order is key order.
    CONSTRAINT backfill_checkpoint_within_bound CHECK (
        checkpoint IS NULL OR (bound IS NOT NULL AND checkpoint <= bound)),
    -- pending has no bound; every started state has a bound or an empty source.
    CONSTRAINT backfill_bound_shape CHECK (
        CASE WHEN state = 'pending' THEN bound IS NULL AND checkpoint IS NULL AND NOT empty_source
             ELSE (bound IS NOT NULL) <> empty_source END),
    -- Only claimable states can hold a claim.
    CONSTRAINT backfill_claim_state CHECK (owner IS NULL OR state IN ('running', 'validating'))
);

CREATE INDEX backfill_claimable ON backfill (next_attempt_at NULLS FIRST, id)
    WHERE state IN ('running', 'validating');

-- LC-1, LC-4, REG-5 enforced by the database itself: whatever Rust code runs
-- first, an UPDATE that breaks the lifecycle table, moves the bound, moves the
-- checkpoint backward or touches a completed row raises and rolls back.
CREATE FUNCTION backfill_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'completed' AND (NEW.state IS DISTINCT FROM OLD.state
            OR NEW.bound IS DISTINCT FROM OLD.bound
            OR NEW.checkpoint IS DISTINCT FROM OLD.checkpoint
            OR NEW.generation IS DISTINCT FROM OLD.generation
            OR NEW.owner IS NOT NULL) THEN
        RAISE EXCEPTION 'backfill %: completed is terminal and immutable', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT (
           (OLD.state = 'pending'    AND (NEW.state = 'running' OR (NEW.state = 'validating' AND NEW.empty_source)))
        OR (OLD.state = 'running'    AND NEW.state IN ('paused', 'blocked', 'failed', 'validating'))
        OR (OLD.state = 'paused'     AND NEW.state IN ('running', 'validating'))
        OR (OLD.state = 'blocked'    AND NEW.state IN ('running', 'validating'))
        OR (OLD.state = 'failed'     AND NEW.state IN ('running', 'validating'))
        OR (OLD.state = 'validating' AND NEW.state IN ('paused', 'completed', 'failed', 'blocked'))
    ) THEN
        RAISE EXCEPTION 'backfill %: transition % -> % is not in the lifecycle table',
            OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.bound IS NOT NULL AND NEW.bound IS DISTINCT FROM OLD.bound THEN
        RAISE EXCEPTION 'backfill %: the bound never changes once captured', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state <> 'pending' AND NEW.empty_source IS DISTINCT FROM OLD.empty_source THEN
        RAISE EXCEPTION 'backfill %: the source-set shape never changes once captured', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.checkpoint IS NOT NULL AND (NEW.checkpoint IS NULL OR NEW.checkpoint < OLD.checkpoint) THEN
        RAISE EXCEPTION 'backfill %: the checkpoint never moves backward', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.generation < OLD.generation THEN
        RAISE EXCEPTION 'backfill %: the generation never moves backward', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER backfill_guard BEFORE UPDATE ON backfill
    FOR EACH ROW EXECUTE FUNCTION backfill_guard();

-- Deleting a backfill is not an operation of this system (ADM-6, REG-5).
CREATE FUNCTION backfill_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'backfill %: rows are never deleted', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER backfill_no_delete BEFORE DELETE ON backfill
    FOR EACH ROW EXECUTE FUNCTION backfill_no_delete();

-- Audit of every accepted or rejected action (AUD-1). Bounded columns (AUD-2).
CREATE TABLE backfill_audit (
    seq             bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    backfill_id     text NOT NULL CHECK (octet_length(backfill_id) <= 128),
    action          text NOT NULL CHECK (octet_length(action) <= 32),
    actor           text CHECK (actor IS NULL OR octet_length(actor) <= 128),
    authority       text NOT NULL CHECK (octet_length(authority) <= 64),
    correlation     text CHECK (correlation IS NULL OR octet_length(correlation) <= 200),
    prior_state     text,
    resulting_state text,
    generation      bigint,
    outcome         text NOT NULL CHECK (octet_length(outcome) <= 64),
    detail          text CHECK (detail IS NULL OR octet_length(detail) <= 512)
);

CREATE INDEX backfill_audit_by_backfill ON backfill_audit (backfill_id, seq);

-- Idempotent admin requests (ADM-4): one logical request = one key; the first
-- committed response is replayed to every retry.
CREATE TABLE backfill_request (
    idempotency_key text PRIMARY KEY CHECK (octet_length(idempotency_key) BETWEEN 1 AND 200),
    backfill_id     text NOT NULL,
    action          text NOT NULL,
    status          integer NOT NULL,
    response        jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
