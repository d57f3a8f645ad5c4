//! The lifecycle of docs/CONTRACT.md section 3 as Rust names it
//! (`backfill::lifecycle`) against what PostgreSQL stores and enforces.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - LC-1 state and action names round-trip and are the stored names:
//!   `lc01_*_names_*`
//! - LC-1 the transition table in Rust is the one the `backfill_guard`
//!   trigger enforces, pair by pair: `lc01_transition_table_*`
//! - LC-3, ADM-5 every action from every state applies, converges or
//!   conflicts as the table says, and only an applied resume or retry
//!   wakes supervisors: `lc03_every_action_*`

mod support;

use backfill::engine::ActionOutcome;
use backfill::{Action, State};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;
use std::str::FromStr;
use support::test_db;

/// The contract's names, written out (docs/CONTRACT.md section 3).
const STATES: [(State, &str); 7] = [
    (State::Pending, "pending"),
    (State::Running, "running"),
    (State::Paused, "paused"),
    (State::Blocked, "blocked"),
    (State::Failed, "failed"),
    (State::Validating, "validating"),
    (State::Completed, "completed"),
];

const ACTIONS: [(Action, &str); 5] = [
    (Action::Start, "start"),
    (Action::Pause, "pause"),
    (Action::Resume, "resume"),
    (Action::Retry, "retry"),
    (Action::Validate, "validate"),
];

/// Names that are no state and no action: empty, unknown, other case,
/// padded, and the actions the contract deliberately leaves out (ADM-6).
const UNKNOWN: [&str; 9] = [
    "",
    "xyzzy",
    "Running",
    "PAUSE",
    " start",
    "start ",
    "reset",
    "cancel",
    "cancelled",
];

/// LC-1: every state's stored name is its `as_str`, its `Display` and its
/// serde name, parses back to the state, and is a value of the database's
/// state domain; every action's name is its `as_str` and serde name and
/// parses back to the action. Unknown names parse to nothing (REG-4:
/// fail closed). Guards: `Display for State`, `Action::as_str` and the
/// comparison in `Action::from_str` (and `State`'s).
#[tokio::test]
async fn lc01_state_and_action_names_round_trip() {
    assert_eq!(State::ALL.to_vec(), STATES.map(|(s, _)| s).to_vec());
    let db = test_db().await;
    for (state, name) in STATES {
        assert_eq!(state.as_str(), name);
        assert_eq!(state.to_string(), name);
        assert_eq!(State::from_str(name), Ok(state));
        assert_eq!(serde_json::to_value(state).unwrap(), Value::from(name));
        assert_eq!(
            db.text(&format!("SELECT '{name}'::backfill_state_name::text AS v"))
                .await
                .as_deref(),
            Some(name),
            "the database knows the state {name}"
        );
    }
    for (action, name) in ACTIONS {
        assert_eq!(action.as_str(), name);
        assert_eq!(name.parse::<Action>(), Ok(action));
        assert_eq!(serde_json::to_value(action).unwrap(), Value::from(name));
    }
    for name in UNKNOWN {
        assert!(name.parse::<State>().is_err(), "{name:?} is no state");
        assert!(name.parse::<Action>().is_err(), "{name:?} is no action");
    }
}

/// How a test row's source set is shaped: a captured bound, or the empty
/// source set of EX-1 (no bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Bounded,
    Empty,
}

/// A row in `from`, consistent with the table's CHECKs for `source`
/// (inserts are not guarded: the trigger watches updates).
fn insert_sql(id: &str, from: State, source: Source) -> String {
    let (bound, empty) = match (from, source) {
        (State::Pending, _) => ("NULL", false),
        (_, Source::Bounded) => ("'\\x1280000000000000ff'::bytea", false),
        (_, Source::Empty) => ("NULL", true),
    };
    format!(
        "INSERT INTO backfill (id, state, bound, empty_source) \
         VALUES ('{id}', '{}', {bound}, {empty})",
        from.as_str()
    )
}

/// The transition to `to`, with the columns the table's CHECKs want for
/// `to` (a pending row has no bound; a started one a bound or an empty
/// source set).
fn update_sql(id: &str, from: State, to: State, source: Source) -> String {
    let shape = match (from, to, source) {
        (_, State::Pending, _) => ", bound = NULL, checkpoint = NULL, empty_source = false",
        (State::Pending, _, Source::Bounded) => ", bound = '\\x1280000000000000ff'::bytea",
        (State::Pending, _, Source::Empty) => ", empty_source = true",
        _ => "",
    };
    format!(
        "UPDATE backfill SET state = '{}'{shape} WHERE id = '{id}'",
        to.as_str()
    )
}

/// Try `from -> to` on a fresh row: `Ok(())` when PostgreSQL accepted it,
/// else the server's message.
async fn transition(
    conn: &mut AsyncPgConnection,
    from: State,
    to: State,
    source: Source,
) -> Result<(), String> {
    let id = format!("lc.{source:?}.{}.{}", from.as_str(), to.as_str()).to_lowercase();
    diesel::sql_query(insert_sql(&id, from, source))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("a {from} row ({source:?}): {e}"));
    match diesel::sql_query(update_sql(&id, from, to, source))
        .execute(conn)
        .await
    {
        Ok(1) => Ok(()),
        Ok(n) => panic!("{from} -> {to} updated {n} rows"),
        Err(e) => Err(e.to_string()),
    }
}

/// LC-1, EX-1: for every pair of distinct states, a transition written
/// straight to PostgreSQL (as any code could) is accepted iff the Rust
/// table `State::next_states` lists it, for rows with a captured bound;
/// a rejection is the `backfill_guard` trigger's (not some other rule's).
/// With an empty source set the database allows exactly one more:
/// `pending -> validating`, the `start` of an empty set (EX-1), which
/// `next_states` (the contract's table) does not list. No state lists
/// itself. Guards: `State::next_states` and the trigger's table.
#[tokio::test]
async fn lc01_transition_table_matches_the_database() {
    let db = test_db().await;
    let mut conn = db.connect().await;
    let mut accepted = 0;
    for source in [Source::Bounded, Source::Empty] {
        for from in State::ALL {
            assert!(!from.next_states().contains(&from), "{from} lists itself");
            for to in State::ALL.into_iter().filter(|to| *to != from) {
                let listed = from.next_states().contains(&to);
                let start_of_empty_set =
                    source == Source::Empty && (from, to) == (State::Pending, State::Validating);
                match transition(&mut conn, from, to, source).await {
                    Ok(()) => {
                        assert!(
                            listed || start_of_empty_set,
                            "{source:?}: the database accepts {from} -> {to}, \
                             next_states does not list it"
                        );
                        accepted += 1;
                    }
                    Err(message) => {
                        assert!(
                            !listed && !start_of_empty_set,
                            "{source:?}: next_states lists {from} -> {to}, \
                             the database rejects it: {message}"
                        );
                        let guard = if from == State::Completed {
                            "completed is terminal and immutable"
                        } else {
                            "is not in the lifecycle table"
                        };
                        assert!(
                            message.contains(guard),
                            "{source:?}: {from} -> {to} rejected by another rule: {message}"
                        );
                    }
                }
            }
        }
    }
    let listed: usize = State::ALL.iter().map(|s| s.next_states().len()).sum();
    assert_eq!(listed, 15, "the contract's table has 15 transitions");
    assert_eq!(accepted, 2 * listed + 1);
}

/// LC-3, ADM-5: every action from every state, through the engine's own
/// `act` on a stored row, answers what the lifecycle says: a transition
/// from the action's sources, the current row where a repeat has already
/// converged (a second `pause` of a paused backfill), and a conflict
/// otherwise, with nothing changed in either of the last two. `start` is
/// left out of the applied case: it needs a definition to capture a
/// bound, which the conformance suite drives. Supervisors are woken
/// (NOTIFY) exactly when work became claimable: by an applied `resume` or
/// `retry`, never by a pause, a repeat or a conflict. Guards:
/// `Action::sources`, `Action::converged`, their use in `act_in`, and its
/// wake-up condition.
#[tokio::test]
async fn lc03_every_action_from_every_state_applies_converges_or_conflicts() {
    let (db, engine, _hooks) = support::admin::setup(0).await;
    let mut conn = db.connect().await;
    let mut listener = db.connect().await;
    backfill::__private::store::wake_listen(&mut listener)
        .await
        .unwrap();
    let mut seen = [0usize; 3];
    for (action, _) in ACTIONS {
        for from in State::ALL {
            if action == Action::Start && from == State::Pending {
                continue;
            }
            let id = format!("lc3.{}.{}", action.as_str(), from.as_str());
            diesel::sql_query(insert_sql(&id, from, Source::Bounded))
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("a {from} row: {e}"));
            let outcome = engine
                .act(&id, action)
                .await
                .unwrap_or_else(|e| panic!("{action:?} from {from}: {e}"));
            let after = db
                .text(&format!(
                    "SELECT state::text AS v FROM backfill WHERE id = '{id}'"
                ))
                .await;
            let activated = matches!(outcome, ActionOutcome::Applied { .. })
                && matches!(action, Action::Resume | Action::Retry);
            assert_eq!(
                wakes(&mut listener).await,
                if activated { vec![id.clone()] } else { vec![] },
                "wake-ups of {action:?} from {from}"
            );
            match outcome {
                ActionOutcome::Applied { prior, row } => {
                    assert!(
                        action.sources().contains(&from),
                        "{action:?} applied from {from}"
                    );
                    assert_eq!(prior, from);
                    assert_ne!(row.state, from, "{action:?} from {from} changed nothing");
                    assert_eq!(after.as_deref(), Some(row.state.as_str()));
                    seen[0] += 1;
                }
                ActionOutcome::Converged(row) => {
                    assert!(
                        !action.sources().contains(&from) && action.converged().contains(&from),
                        "{action:?} from {from} answered converged"
                    );
                    assert_eq!((row.state, after.as_deref()), (from, Some(from.as_str())));
                    seen[1] += 1;
                }
                ActionOutcome::Conflict(row) => {
                    assert!(
                        !action.sources().contains(&from) && !action.converged().contains(&from),
                        "{action:?} from {from} answered conflict"
                    );
                    assert_eq!((row.state, after.as_deref()), (from, Some(from.as_str())));
                    seen[2] += 1;
                }
            }
        }
    }
    // The contract's table, counted: pause from running and validating,
    // resume from paused, retry from blocked and failed; start, resume
    // and retry have converged in running and validating, pause in paused.
    assert_eq!(seen, [5, 7, 22], "applied, converged, conflict");
}

/// The wake-ups `listener` received since the last call: it notifies a
/// marker to itself and reads up to it (notifications arrive in commit
/// order), so nothing is waited for that may not come.
async fn wakes(listener: &mut AsyncPgConnection) -> Vec<String> {
    use futures_util::StreamExt;
    const MARKER: &str = "-marker-";
    diesel::sql_query(format!(
        "SELECT pg_notify('{}', '{MARKER}')",
        backfill::__private::store::WAKE_CHANNEL
    ))
    .execute(listener)
    .await
    .unwrap();
    let mut stream = std::pin::pin!(listener.notifications_stream());
    let mut woken = vec![];
    loop {
        let notification = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("the marker arrives")
            .expect("the connection is open")
            .expect("a notification");
        if notification.payload == MARKER {
            return woken;
        }
        woken.push(notification.payload);
    }
}
