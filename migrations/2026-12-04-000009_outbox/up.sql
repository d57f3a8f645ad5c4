-- Notifications of state changes (NTF-1, NTF-2).
--
-- `backfill_notify_subscription` is what the notification sender last
-- said it delivers: one row per target name and event. The statements that
-- change a backfill's state queue a notification only for subscribed
-- events, so a fleet that configured no webhook queues nothing; a
-- subscription not renewed by a sender within its TTL stops counting, so a
-- fleet that stopped notifying stops queueing. Target names only: URLs and
-- secrets are configuration and never reach the database.
CREATE TABLE backfill_notify_subscription (
    target     text NOT NULL CHECK (target ~ '^[a-z0-9_-]{1,32}$'),
    event      text NOT NULL CHECK (event IN ('blocked', 'failed', 'completed',
                   'validation_failed', 'throttled', 'undo_completed')),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (target, event)
);

-- The outbox: one row per notification and target, written in the same
-- statement as the state change it reports (a data-modifying CTE), so a
-- rolled-back or fenced-out change leaves none and a committed one always
-- has it. `event_id` is the stable ID a receiver de-duplicates on; it never
-- changes across retries. `error_kind`/`detail` are the row's bounded
-- diagnostic as the change recorded it (never row data). `dedupe` makes
-- the sender's own detection of a long throttle idempotent (one row per
-- target and throttle condition). `part` names the partition of a
-- partition's throttle. No foreign key to `backfill`: rows there are never
-- deleted, and the check would lock the backfill row again.
CREATE TABLE backfill_outbox (
    event_id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    target          text NOT NULL,
    event           text NOT NULL,
    backfill_id     text NOT NULL,
    part            integer,
    generation      bigint NOT NULL,
    state           text NOT NULL,
    error_kind      text,
    detail          text CHECK (octet_length(detail) <= 1024),
    undo_of         text,
    dedupe          text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    status          text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text CHECK (octet_length(last_error) <= 1024),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (target, dedupe)
);
CREATE INDEX backfill_outbox_due ON backfill_outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX backfill_outbox_done ON backfill_outbox (updated_at) WHERE status <> 'pending';
