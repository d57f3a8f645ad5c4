-- The batch fence as a function that RAISES when it does not match, so the
-- engine can send it together with COMMIT in one round trip: if the fence
-- fails, the statement errors, PostgreSQL skips the COMMIT in the same
-- message and the whole transaction (mutation included) rolls back (EX-6,
-- CLM-2). The WHERE clause is the same fence as ever: state, owner,
-- generation, unexpired lease by clock_timestamp(), the expected checkpoint,
-- strictly forward and at most the bound.
CREATE FUNCTION backfill_checkpoint_advance(
    p_id text, p_owner text, p_generation bigint, p_expected bytea,
    p_checkpoint bytea, p_checkpoint_json jsonb, p_rows bigint
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    UPDATE backfill SET checkpoint = p_checkpoint, checkpoint_json = p_checkpoint_json,
        rows_done = rows_done + p_rows, batches_done = batches_done + 1, attempts = 0,
        state = CASE WHEN p_checkpoint = bound THEN 'validating' ELSE state END,
        owner = CASE WHEN p_checkpoint = bound THEN NULL ELSE owner END,
        lease_expires_at = CASE WHEN p_checkpoint = bound THEN NULL ELSE lease_expires_at END,
        updated_at = now()
    WHERE id = p_id AND state = 'running' AND owner = p_owner AND generation = p_generation
      AND lease_expires_at > clock_timestamp()
      AND checkpoint IS NOT DISTINCT FROM p_expected
      AND p_checkpoint > coalesce(checkpoint, ''::bytea) AND p_checkpoint <= bound
    RETURNING state INTO v_state;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'backfill stale fence' USING ERRCODE = 'BF001';
    END IF;
    RETURN v_state;
END
$$;
