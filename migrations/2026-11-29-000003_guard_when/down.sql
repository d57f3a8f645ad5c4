DROP TRIGGER backfill_guard ON backfill;
CREATE TRIGGER backfill_guard BEFORE UPDATE ON backfill
    FOR EACH ROW EXECUTE FUNCTION backfill_guard();
