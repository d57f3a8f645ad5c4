-- The lifecycle guard (LC-1, LC-4, REG-5) only needs to run its PL/pgSQL
-- body when an UPDATE could break a rule; the WHEN clause is evaluated
-- without calling PL/pgSQL, so the hot path (a checkpoint moving forward in
-- the same state) pays nothing. Every condition the body rejects implies
-- one of these, so nothing the guard rejected before gets through.
DROP TRIGGER backfill_guard ON backfill;
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
