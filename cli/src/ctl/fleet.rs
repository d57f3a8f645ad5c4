//! `backfill ctl fleet`: a fleet of databases through its listener
//! (FLT-6): the status of every database with the fleet's totals, and an
//! action or a settings change on one backfill in every database or in
//! one.
//!
//! Like the rest of the CLI it only projects what the API returns; a
//! database the fleet could not reach is shown with its reason, never as
//! zero.

use super::args::checked_id;
use super::args::{FleetAction, FleetCommand, FleetSet};
use super::client::Client;
use super::error::{one_line, CtlError};
use super::output::print_json;
use serde_json::Value;

/// Run one `ctl fleet` command.
pub(super) async fn run(
    client: &Client,
    command: &FleetCommand,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        FleetCommand::Status => status(client, json).await,
        FleetCommand::Start(a) => act(client, "start", a, json).await,
        FleetCommand::Pause(a) => act(client, "pause", a, json).await,
        FleetCommand::Resume(a) => act(client, "resume", a, json).await,
        FleetCommand::Retry(a) => act(client, "retry", a, json).await,
        FleetCommand::Set(s) => set(client, s, json).await,
        FleetCommand::Rollout {
            id,
            max_databases,
            clear,
        } => rollout(client, id, if *clear { None } else { *max_databases }, json).await,
    }
}

/// Set or lift a repair's rollout cap.
async fn rollout(
    client: &Client,
    id: &str,
    max_databases: Option<u32>,
    json: bool,
) -> Result<(), CtlError> {
    if max_databases == Some(0) {
        return Err(CtlError::Usage(
            "--max-databases must be at least 1 (or --clear)".into(),
        ));
    }
    let path = format!("/admin/fleet/rollout/{}", checked_id(id)?);
    let body = client
        .put_json(
            &path,
            &serde_json::json!({ "max_databases": max_databases }),
        )
        .await?;
    if json {
        print_json(&body);
    } else {
        match body["max_databases"].as_u64() {
            Some(n) => println!("rollout {id}: at most {n} databases at once"),
            None => println!("rollout {id}: no cap"),
        }
        let missing: Vec<&str> = body["not_audited"]
            .as_array()
            .map(|a| a.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        if !missing.is_empty() {
            println!("not audited (unavailable): {}", missing.join(", "));
        }
    }
    Ok(())
}

async fn status(client: &Client, json: bool) -> Result<(), CtlError> {
    let body = client.get("/admin/fleet").await?;
    if json {
        print_json(&body);
    } else {
        for line in status_lines(&body) {
            println!("{line}");
        }
    }
    Ok(())
}

/// A database name as the fleet accepts it, checked before sending.
fn checked_database(name: &str) -> Result<&str, CtlError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_' || b == b'-'
        });
    if ok {
        Ok(name)
    } else {
        Err(CtlError::Usage(format!(
            "--database {:?} is not a database name (1 to 63 characters of [a-z0-9._-])",
            one_line(name)
        )))
    }
}

/// One action in every database (or one): a line per database. Any
/// database that did not accept it makes the command fail, after every
/// line is printed.
async fn act(client: &Client, action: &str, a: &FleetAction, json: bool) -> Result<(), CtlError> {
    let path = in_database(
        format!("/admin/fleet/backfills/{}/{action}", checked_id(&a.id)?),
        a.database.as_deref(),
    )?;
    let body = client.act(&path).await?;
    report(&body, action, &a.id, json)
}

/// A live settings change in every database (or in one).
async fn set(client: &Client, s: &FleetSet, json: bool) -> Result<(), CtlError> {
    let change = Value::Object(s.settings.change()?);
    let path = in_database(
        format!(
            "/admin/fleet/backfills/{}/settings",
            checked_id(&s.settings.id)?
        ),
        s.database.as_deref(),
    )?;
    let body = client.idempotent("PATCH", &path, Some(&change)).await?;
    report(&body, "set", &s.settings.id, json)
}

/// `path` limited to `database`, when one is named.
fn in_database(mut path: String, database: Option<&str>) -> Result<String, CtlError> {
    if let Some(database) = database {
        path.push_str(&format!("?database={}", checked_database(database)?));
    }
    Ok(path)
}

/// Print each database's answer (or the JSON); a conflict when any
/// database did not accept the request.
fn report(body: &Value, action: &str, id: &str, json: bool) -> Result<(), CtlError> {
    if json {
        print_json(body);
    }
    let results = body["results"].as_array().cloned().unwrap_or_default();
    let (mut refused, mut unavailable) = (0, 0);
    for r in &results {
        let status = r["status"].as_u64().unwrap_or(0);
        if !(200..300).contains(&status) {
            refused += 1;
        }
        // No answer from the database (503, or none at all): sending the
        // same request again may succeed, which the server error's exit
        // code says; a database that answered and refused is a conflict.
        if status >= 500 || status == 0 {
            unavailable += 1;
        }
        if !json {
            println!("{}", result_line(action, id, r));
        }
    }
    if unavailable > 0 {
        return Err(CtlError::Server(format!(
            "{action} {id}: {unavailable} of {} databases were unavailable; run it again \
             once they are back (those that accepted it answer no change)",
            results.len()
        )));
    }
    if refused > 0 {
        return Err(CtlError::Conflict(format!(
            "{action} {id}: {refused} of {} databases did not accept it",
            results.len()
        )));
    }
    Ok(())
}

/// How one database's answer to a fleet action reads.
fn result_line(action: &str, id: &str, r: &Value) -> String {
    let database = r["database"].as_str().unwrap_or("?");
    let status = r["status"].as_u64().unwrap_or(0);
    let body = &r["body"];
    if (200..300).contains(&status) && body["outcome"].is_string() {
        let outcome = body["outcome"].as_str().unwrap_or("done");
        let prior = body["prior_state"].as_str().unwrap_or("?");
        let state = body["backfill"]["state"].as_str().unwrap_or("?");
        format!("{database}: {action} {id}: {outcome} ({prior} -> {state})")
    } else if (200..300).contains(&status) {
        // A settings change answers with the backfill itself.
        let state = body["state"].as_str().unwrap_or("?");
        format!("{database}: {action} {id}: applied ({state})")
    } else {
        format!(
            "{database}: {action} {id}: HTTP {status} {}: {}",
            body["error"].as_str().unwrap_or("error"),
            one_line(body["message"].as_str().unwrap_or(""))
        )
    }
}

/// The status table: one line per database, then the totals.
fn status_lines(body: &Value) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<20} {:<12} {:<6} {:<40} {:>9} {:>8}",
        "DATABASE", "AVAILABLE", "READY", "BACKFILLS", "ROWS/S", "ETA"
    )];
    for db in body["databases"].as_array().cloned().unwrap_or_default() {
        let name = db["name"].as_str().unwrap_or("?");
        let available = db["availability"].as_str().unwrap_or("unknown");
        let ready = match db["ready"].as_bool() {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let backfills = if available == "available" {
            counts(&db["backfills"])
        } else {
            one_line(db["reason"].as_str().unwrap_or("unavailable"))
        };
        lines.push(format!(
            "{name:<20} {available:<12} {ready:<6} {backfills:<40} {:>9} {:>8}",
            rate(&db["rows_per_second"]),
            eta(&db["eta_seconds"])
        ));
    }
    let t = &body["totals"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    lines.push(format!(
        "fleet: {} databases ({} available, {} unavailable); {} completed, {} running, {} blocked; {} rows/s; slowest ETA {}",
        n("databases"),
        n("available"),
        n("unavailable"),
        n("completed"),
        n("running"),
        n("blocked"),
        rate(&t["rows_per_second"]),
        eta(&t["eta_seconds"])
    ));
    lines
}

/// `2 running, 1 completed`: the states that have backfills, in
/// lifecycle order.
fn counts(counts: &Value) -> String {
    let parts: Vec<String> = [
        "pending",
        "running",
        "paused",
        "blocked",
        "failed",
        "validating",
        "completed",
    ]
    .iter()
    .filter_map(|state| {
        let n = counts[*state].as_u64().unwrap_or(0);
        (n > 0).then(|| format!("{n} {state}"))
    })
    .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn rate(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |r| format!("{r:.0}"))
}

fn eta(v: &Value) -> String {
    match v.as_f64() {
        Some(s) if s.is_finite() => {
            let s = s.round() as u64;
            format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
        }
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// FLT-6: a fleet action's exit code follows what each database
    /// answered: a database that did not answer (503) makes it the server
    /// error's code, which a script may send again; one that answered and
    /// refused (409) the conflict's; all accepted, success.
    #[test]
    fn flt06_a_fleet_action_exits_by_what_each_database_answered() {
        let answered = |statuses: &[u64]| {
            let results: Vec<Value> = statuses
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    json!({"database": format!("d{i}"), "status": s,
                           "body": {"error": "x", "message": "m"}})
                })
                .collect();
            report(&json!({ "results": results }), "pause", "a.v1", true).map_err(|e| e.code())
        };
        assert_eq!(answered(&[200, 200]), Ok(()));
        assert_eq!(answered(&[200, 409]), Err(3));
        assert_eq!(answered(&[200, 503]), Err(5));
        assert_eq!(
            answered(&[409, 503]),
            Err(5),
            "unavailable first: retrying may help"
        );
    }

    #[test]
    fn flt06_fleet_status_names_each_database_and_the_totals() {
        let body = json!({
            "databases": [
                {"name": "t01", "availability": "available", "ready": false,
                 "backfills": {"running": 1, "completed": 2}, "rows_per_second": 1234.4,
                 "eta_seconds": 75.0},
                {"name": "t02", "availability": "unavailable", "ready": null,
                 "reason": "the database does not answer", "backfills": {},
                 "rows_per_second": null, "eta_seconds": null}
            ],
            "totals": {"databases": 2, "available": 1, "unavailable": 1, "completed": 0,
                       "running": 1, "blocked": 0, "rows_per_second": 1234.4,
                       "eta_seconds": 75.0}
        });
        let lines = status_lines(&body);
        assert!(lines[1].starts_with("t01"), "{lines:?}");
        assert!(lines[1].contains("1 running, 2 completed"), "{lines:?}");
        assert!(
            lines[1].contains("1234") && lines[1].contains("0:01:15"),
            "{lines:?}"
        );
        assert!(lines[2].contains("unavailable") && lines[2].contains("does not answer"));
        assert_eq!(
            lines[3],
            "fleet: 2 databases (1 available, 1 unavailable); 0 completed, 1 running, 0 blocked; 1234 rows/s; slowest ETA 0:01:15"
        );
    }

    #[test]
    fn flt06_a_fleet_action_reads_per_database() {
        let ok = json!({"database": "t01", "status": 200, "body": {"outcome": "applied",
            "prior_state": "running", "backfill": {"state": "paused"}}});
        assert_eq!(
            result_line("pause", "events.fix", &ok),
            "t01: pause events.fix: applied (running -> paused)"
        );
        let down = json!({"database": "t02", "status": 503, "body": {"error": "unavailable",
            "message": "the database does not answer"}});
        assert_eq!(
            result_line("pause", "events.fix", &down),
            "t02: pause events.fix: HTTP 503 unavailable: the database does not answer"
        );
        assert!(checked_database("Bad Name").is_err());
        assert!(checked_database("t01").is_ok());
    }
}
