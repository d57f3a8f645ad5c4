DROP TABLE backfill_rollout;
