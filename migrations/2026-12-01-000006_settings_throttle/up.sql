-- Live per-backfill settings (THR-4), the batch size in force (THR-3) and
-- the throttle condition of the runner holding the claim (THR-2).

-- `settings`: what operators set through the audited settings action, as
-- a JSON object of the keys src/settings.rs knows; a key that is absent
-- takes the definition's or the process's default. `batch_size`: the size
-- the last batch (or the last statement timeout) left in force; NULL
-- before the first batch. `throttle`: the condition the claim's runner
-- last reported ({signal, value, threshold, since, generation}), or NULL;
-- it is a runtime condition, never a lifecycle state, and it counts only
-- while its generation is the row's and the row is claimed.
-- Domains, not table CHECKs, for the reason migration ..._column_domains
-- gives: a table CHECK is prepared again for every UPDATE, the batch
-- fence's included.
CREATE DOMAIN backfill_settings AS jsonb
    CHECK (jsonb_typeof(VALUE) = 'object' AND octet_length(VALUE::text) <= 2048);
CREATE DOMAIN backfill_batch_size AS integer CHECK (VALUE > 0);
CREATE DOMAIN backfill_throttle AS jsonb
    CHECK (jsonb_typeof(VALUE) = 'object' AND octet_length(VALUE::text) <= 1024);

ALTER TABLE backfill
    ADD COLUMN settings backfill_settings NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN batch_size backfill_batch_size,
    ADD COLUMN throttle backfill_throttle;

-- The batch fence of migration ..._fence_function, also recording the size
-- the batch ran with. Same WHERE clause, same error; the seven-argument
-- function stays for processes of the previous release during a rolling
-- upgrade.
CREATE FUNCTION backfill_checkpoint_advance(
    p_id text, p_owner text, p_generation bigint, p_expected bytea,
    p_checkpoint bytea, p_checkpoint_json jsonb, p_rows bigint, p_batch_size integer
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    UPDATE backfill SET checkpoint = p_checkpoint, checkpoint_json = p_checkpoint_json,
        rows_done = rows_done + p_rows, batches_done = batches_done + 1, attempts = 0,
        batch_size = p_batch_size,
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
