//! Rates from the progress history (OBS-5): the current rows/s of a
//! running backfill and of each partition, the sparkline of the last
//! minute, and the run chart over the whole recorded run with its
//! throttled and paused intervals. Everything here is derived from the
//! samples the claim holders record; nothing is measured by a client, so
//! the web client, `ctl` and the demo show the same numbers.
//!
//! A rate joins two samples of one series (a backfill's own row or one
//! partition) taken under the same claim generation. A time that no such
//! pair covers has no rate: a gap, a takeover or a pause and resume
//! breaks the line instead of being drawn as zero or averaged over.

use super::view::{timestamp, BackfillView};
use super::{page_limit, requested_id, Admin, AdminError, Capability, RequestMeta};
use crate::lifecycle::State;
use crate::store::{self, BackfillRow, PartitionRow, ProgressSample, TimelineRow};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The current rate is taken over the samples of this last span.
const RATE_WINDOW_SECONDS: i64 = 30;
/// The sparkline: this many buckets of [`SPARK_BUCKET_SECONDS`] each,
/// ending at the time of reading.
pub const SPARK_BUCKETS: usize = 12;
const SPARK_BUCKET_SECONDS: i64 = 5;
/// The run chart has at most this many buckets.
pub const CHART_BUCKETS: usize = 120;
/// A chart bucket is never shorter than this: finer than the default
/// sample interval would leave most buckets without a rate.
const CHART_MIN_BUCKET_MS: i64 = 2_000;

/// The run chart of one backfill (OBS-5): rows/s over the recorded run
/// in equal buckets from `from`, in total and per partition, with the
/// intervals in which it was throttled or paused.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct RunChart {
    /// The backfill the chart is of.
    pub backfill_id: String,
    /// Start of the first bucket (the oldest recorded sample); `null`
    /// when nothing was recorded yet, and then every list is empty.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub from: Option<DateTime<Utc>>,
    /// The width of each bucket, in seconds.
    pub bucket_seconds: f64,
    /// Rows per second of each bucket over all series; `null` where no
    /// sample pair of a claim covers the bucket (unknown, not zero).
    pub total: Vec<Option<f64>>,
    /// The same per partition of a partitioned backfill, by part; empty
    /// for a backfill without partitions.
    pub partitions: Vec<PartitionRates>,
    /// Throttled and paused intervals overlapping the chart, oldest first.
    pub intervals: Vec<RunInterval>,
    /// PostgreSQL's clock at read time.
    #[serde(serialize_with = "timestamp::serialize")]
    pub observed_at: DateTime<Utc>,
}

/// One partition's rows/s per chart bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct PartitionRates {
    /// The partition's number.
    pub part: i32,
    /// Rows per second in each bucket; `null` where no sample pair of the
    /// partition's claims covers the bucket (unknown, not zero).
    pub rates: Vec<Option<f64>>,
}

/// A span in which the run did not move by design: `throttled` (a
/// runner held batches back; `detail` is its signal and threshold) or
/// `paused` (by an operator).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct RunInterval {
    /// `throttled` or `paused`.
    pub kind: String,
    /// The partition whose runner was throttled, if any.
    pub part: Option<i32>,
    /// When the interval began.
    #[serde(serialize_with = "timestamp::serialize")]
    pub from: DateTime<Utc>,
    /// `null`: still going on.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub to: Option<DateTime<Utc>>,
    /// For `throttled`, the signal, value and threshold; `null` for
    /// `paused`.
    pub detail: Option<String>,
}

/// A claim that is live now: its series and generation.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Live {
    part: Option<i32>,
    generation: i64,
}

/// The claims of `row` (and its partitions `parts`) that are live at the
/// row's reading time, while it is `running`.
fn live_claims(row: &BackfillRow, parts: &[&PartitionRow]) -> Vec<Live> {
    if row.state != State::Running {
        return Vec::new();
    }
    let held = |owner: &Option<String>, until: Option<DateTime<Utc>>| {
        owner.is_some() && until.is_some_and(|u| u > row.db_now)
    };
    if parts.is_empty() {
        return held(&row.owner, row.lease_expires_at)
            .then_some(Live {
                part: None,
                generation: row.generation,
            })
            .into_iter()
            .collect();
    }
    parts
        .iter()
        .filter(|p| held(&p.owner, p.lease_expires_at))
        .map(|p| Live {
            part: Some(p.part),
            generation: p.generation,
        })
        .collect()
}

/// The rate of one live claim over its samples of the last
/// [`RATE_WINDOW_SECONDS`]: `None` with fewer than two, or when its
/// newest sample is older than the window.
fn claim_rate(series: &[&ProgressSample], live: Live, now: DateTime<Utc>) -> Option<f64> {
    let mine: Vec<&&ProgressSample> = series
        .iter()
        .filter(|s| s.generation == live.generation)
        .collect();
    let newest = mine.last()?;
    let window = Duration::seconds(RATE_WINDOW_SECONDS);
    if newest.at < now - window {
        return None;
    }
    let oldest = mine.iter().find(|s| s.at >= newest.at - window)?;
    let span = micros(newest.at - oldest.at);
    (span > 0).then(|| (newest.rows_done - oldest.rows_done).max(0) as f64 * 1e6 / span as f64)
}

/// A span in microseconds (0 if it does not fit, which no run reaches).
fn micros(d: Duration) -> i64 {
    d.num_microseconds().unwrap_or(0)
}

/// A stretch between two samples of one generation, and its rate.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    rate: f64,
}

fn segments(series: &[&ProgressSample]) -> Vec<Segment> {
    series
        .windows(2)
        .filter(|w| w[0].generation == w[1].generation && w[1].at > w[0].at)
        .map(|w| Segment {
            start: w[0].at,
            end: w[1].at,
            rate: (w[1].rows_done - w[0].rows_done).max(0) as f64 * 1e6
                / micros(w[1].at - w[0].at) as f64,
        })
        .collect()
}

/// The rate of one series in each of `n` buckets of `width` from `from`:
/// the rows its segments advance inside the bucket over the time they
/// cover there; `None` where they cover none of it.
fn bucket_rates(
    segs: &[Segment],
    from: DateTime<Utc>,
    width: Duration,
    n: usize,
) -> Vec<Option<f64>> {
    (0..n)
        .map(|k| {
            let start = from + width * k as i32;
            let end = start + width;
            let (mut covered, mut rows) = (0i64, 0f64);
            for s in segs {
                let overlap = micros(s.end.min(end) - s.start.max(start));
                if overlap > 0 {
                    covered += overlap;
                    rows += s.rate * overlap as f64 / 1e6;
                }
            }
            (covered > 0).then(|| rows * 1e6 / covered as f64)
        })
        .collect()
}

/// The series of one backfill's samples, by part (`None`: the backfill's
/// own row), each in time order.
fn series_of<'a>(
    id: &str,
    samples: &'a [ProgressSample],
) -> BTreeMap<Option<i32>, Vec<&'a ProgressSample>> {
    let mut by: BTreeMap<Option<i32>, Vec<&ProgressSample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.backfill_id == id) {
        by.entry(s.part).or_default().push(s);
    }
    for v in by.values_mut() {
        v.sort_by_key(|s| s.at);
    }
    by
}

/// Adds up per-series bucket rates: a bucket is known when any series
/// covers it.
fn sum_buckets(all: &[Vec<Option<f64>>], n: usize) -> Vec<Option<f64>> {
    (0..n)
        .map(|k| {
            all.iter()
                .filter_map(|r| r[k])
                .fold(None, |acc: Option<f64>, r| Some(acc.unwrap_or(0.0) + r))
        })
        .collect()
}

impl BackfillView {
    /// Fill in the current rates and the sparkline from `samples` (which
    /// may hold other backfills' samples too). Only a `running` backfill
    /// has a rate; the whole is unknown while any live claim has none.
    pub(crate) fn with_rates(
        mut self,
        row: &BackfillRow,
        parts: &[PartitionRow],
        samples: &[ProgressSample],
    ) -> Self {
        if row.state != State::Running {
            return self;
        }
        let parts: Vec<&PartitionRow> = parts.iter().filter(|p| p.backfill_id == row.id).collect();
        let series = series_of(&row.id, samples);
        let now = row.db_now;
        let rates: Vec<(Option<i32>, Option<f64>)> = live_claims(row, &parts)
            .into_iter()
            .map(|live| {
                let s = series.get(&live.part).map(Vec::as_slice).unwrap_or(&[]);
                (live.part, claim_rate(s, live, now))
            })
            .collect();
        if !rates.is_empty() && rates.iter().all(|(_, r)| r.is_some()) {
            self.progress.rows_per_second = Some(rates.iter().filter_map(|(_, r)| *r).sum());
        }
        for p in &mut self.partitions {
            p.rows_per_second = rates
                .iter()
                .find(|(part, _)| *part == Some(p.part))
                .and_then(|(_, r)| *r);
        }
        let width = Duration::seconds(SPARK_BUCKET_SECONDS);
        let from = now - width * SPARK_BUCKETS as i32;
        let per: Vec<Vec<Option<f64>>> = series
            .values()
            .map(|s| bucket_rates(&segments(s), from, width, SPARK_BUCKETS))
            .collect();
        self.progress.sparkline = sum_buckets(&per, SPARK_BUCKETS);
        self
    }
}

/// How far back a list or detail view reads samples: the sparkline's
/// span and the segment that crosses into it.
pub(crate) fn recent_since(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::seconds(SPARK_BUCKET_SECONDS * SPARK_BUCKETS as i64 + RATE_WINDOW_SECONDS)
}

/// The run chart of `row` from all its samples and its timeline.
fn chart(row: &BackfillRow, samples: &[ProgressSample], timeline: &[TimelineRow]) -> RunChart {
    let series = series_of(&row.id, samples);
    let first = series
        .values()
        .filter_map(|s| s.first())
        .map(|s| s.at)
        .min();
    let last = series.values().filter_map(|s| s.last()).map(|s| s.at).max();
    let mut chart = RunChart {
        backfill_id: row.id.clone(),
        from: first,
        bucket_seconds: 0.0,
        total: Vec::new(),
        partitions: Vec::new(),
        intervals: Vec::new(),
        observed_at: row.db_now,
    };
    let (Some(from), Some(last)) = (first, last) else {
        return chart;
    };
    let to = if row.state == State::Running {
        row.db_now.max(last)
    } else {
        last
    };
    let span = (to - from).num_milliseconds().max(1);
    let width_ms = (span + CHART_BUCKETS as i64 - 1) / CHART_BUCKETS as i64;
    let width_ms = width_ms.max(CHART_MIN_BUCKET_MS);
    let n = usize::try_from((span + width_ms - 1) / width_ms)
        .unwrap_or(1)
        .clamp(1, CHART_BUCKETS);
    let width = Duration::milliseconds(width_ms);
    let per: Vec<(Option<i32>, Vec<Option<f64>>)> = series
        .iter()
        .map(|(part, s)| (*part, bucket_rates(&segments(s), from, width, n)))
        .collect();
    chart.bucket_seconds = width_ms as f64 / 1000.0;
    chart.total = sum_buckets(&per.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(), n);
    chart.partitions = per
        .into_iter()
        .filter_map(|(part, rates)| Some(PartitionRates { part: part?, rates }))
        .collect();
    chart.intervals = intervals(timeline)
        .into_iter()
        .filter(|i| i.to.is_none_or(|t| t >= from))
        .collect();
    chart
}

/// The throttled and paused intervals a timeline records, oldest first.
fn intervals(timeline: &[TimelineRow]) -> Vec<RunInterval> {
    let mut events: Vec<&TimelineRow> = timeline.iter().filter(|t| t.source == "runtime").collect();
    events.sort_by_key(|t| (t.at, t.seq));
    let mut out: Vec<RunInterval> = Vec::new();
    let mut open: BTreeMap<(&str, Option<i32>), usize> = BTreeMap::new();
    for e in events {
        let (kind, opens) = match (e.kind.as_str(), e.state.as_deref(), e.from_state.as_deref()) {
            ("throttled", _, _) => ("throttled", true),
            ("unthrottled", _, _) => ("throttled", false),
            ("state", Some("paused"), _) => ("paused", true),
            ("state", _, Some("paused")) => ("paused", false),
            _ => continue,
        };
        let key = (kind, if kind == "paused" { None } else { e.part });
        if opens {
            if let Some(i) = open.get(&key) {
                // A second start without an end: the reading changed.
                out[*i].detail = e.detail.clone();
                continue;
            }
            open.insert(key, out.len());
            out.push(RunInterval {
                kind: kind.to_string(),
                part: key.1,
                from: e.at,
                to: None,
                detail: e.detail.clone(),
            });
        } else if let Some(i) = open.remove(&key) {
            out[i].to = Some(e.at);
        }
    }
    out
}

impl Admin {
    /// The recent progress samples of the `running` ones among `rows`,
    /// for their rates and sparklines (OBS-5); none read otherwise.
    pub(super) async fn recent_samples(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        rows: &[BackfillRow],
    ) -> Result<Vec<ProgressSample>, store::StoreError> {
        let running: Vec<String> = rows
            .iter()
            .filter(|r| r.state == State::Running)
            .map(|r| r.id.clone())
            .collect();
        let Some(first) = rows.iter().find(|r| r.state == State::Running) else {
            return Ok(Vec::new());
        };
        store::progress_list(conn, &running, Some(recent_since(first.db_now))).await
    }

    /// The views of `ids` with their rates (OBS-5), for a display inside
    /// the host's own process (the demo's screen), which shows the same
    /// numbers as the admin API. There is no caller to authorize: the
    /// process already holds the database, as with the engine itself.
    /// IDs without a row are left out.
    pub async fn local_views(&self, ids: &[String]) -> Result<Vec<BackfillView>, AdminError> {
        let mut conn = self.conn().await?;
        let rows = store::backfill_get_many(&mut conn, ids).await?;
        let parts = store::partition_list(&mut conn, ids).await?;
        let samples = self.recent_samples(&mut conn, &rows).await?;
        let completed = self.completed_dependencies(&mut conn, &rows).await?;
        Ok(rows
            .iter()
            .map(|r| {
                self.view(r, &parts, &completed)
                    .with_rates(r, &parts, &samples)
            })
            .collect())
    }

    /// GET /admin/backfills/{id}/progress: the run chart (OBS-5). Needs
    /// `backfill:read`; an unknown ID is a 404.
    pub async fn run_chart(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
    ) -> Result<RunChart, AdminError> {
        self.authorize(meta, id, "progress", Capability::Read)
            .await?;
        requested_id("the path's ID", id)?;
        let mut conn = self.conn().await?;
        let row = store::backfill_get(&mut conn, id)
            .await?
            .ok_or_else(AdminError::not_found)?;
        let ids = [row.id.clone()];
        let samples = store::progress_list(&mut conn, &ids, None).await?;
        let timeline = store::timeline_list(&mut conn, id, page_limit(Some(500))?).await?;
        Ok(chart(&row, &samples, &timeline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_000_000 + s, 0).expect("time")
    }

    fn sample(part: Option<i32>, generation: i64, s: i64, rows: i64) -> ProgressSample {
        ProgressSample {
            backfill_id: "b".into(),
            part,
            generation,
            at: at(s),
            rows_done: rows,
        }
    }

    /// OBS-5: a claim's rate spans its samples in the window; fewer than
    /// two, or only old ones, give no rate.
    #[test]
    fn obs05_a_claims_rate_needs_two_recent_samples_of_its_generation() {
        let live = Live {
            part: None,
            generation: 2,
        };
        let s = [
            sample(None, 1, 0, 0),
            sample(None, 2, 10, 100),
            sample(None, 2, 12, 300),
            sample(None, 2, 14, 500),
        ];
        let refs: Vec<&ProgressSample> = s.iter().collect();
        assert_eq!(claim_rate(&refs, live, at(15)), Some(100.0));
        assert_eq!(claim_rate(&refs[..2], live, at(15)), None, "one sample");
        assert_eq!(claim_rate(&refs, live, at(100)), None, "old samples");
        let other = Live {
            part: None,
            generation: 3,
        };
        assert_eq!(claim_rate(&refs, other, at(15)), None, "another claim");
    }

    /// OBS-5: a change of generation breaks the line: the bucket between
    /// two claims has no rate, not an average over the gap.
    #[test]
    fn obs05_a_new_generation_breaks_the_line() {
        let s = [
            sample(None, 1, 0, 0),
            sample(None, 1, 2, 200),
            sample(None, 2, 20, 200),
            sample(None, 2, 22, 600),
        ];
        let refs: Vec<&ProgressSample> = s.iter().collect();
        let rates = bucket_rates(&segments(&refs), at(0), Duration::seconds(2), 12);
        assert_eq!(rates[0], Some(100.0));
        assert!(rates[1..10].iter().all(Option::is_none), "{rates:?}");
        assert_eq!(rates[10], Some(200.0));
        assert_eq!(rates[11], None, "after the last sample");
    }

    /// OBS-5: partitions' rates add up where each covers the bucket.
    #[test]
    fn obs05_partition_rates_add_up_per_bucket() {
        let a = vec![Some(1.0), None, Some(2.0)];
        let b = vec![Some(3.0), None, None];
        assert_eq!(sum_buckets(&[a, b], 3), vec![Some(4.0), None, Some(2.0)]);
    }

    fn event(seq: i64, s: i64, kind: &str, from: Option<&str>, to: Option<&str>) -> TimelineRow {
        TimelineRow {
            source: "runtime".into(),
            seq,
            at: at(s),
            kind: kind.into(),
            part: None,
            from_state: from.map(str::to_string),
            state: to.map(str::to_string),
            actor: None,
            generation: None,
            outcome: None,
            detail: Some(format!("{kind} {seq}")),
            reason: None,
        }
    }

    /// OBS-5: throttled and paused spans are read off the timeline, an
    /// open one stays open.
    #[test]
    fn obs05_intervals_come_from_the_timeline() {
        let t = [
            event(4, 30, "state", Some("running"), Some("paused")),
            event(1, 10, "throttled", None, Some("running")),
            event(2, 15, "unthrottled", None, Some("running")),
            event(3, 20, "claimed", None, Some("running")),
        ];
        let got = intervals(&t);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].kind.as_str(), got[0].from, got[0].to),
            ("throttled", at(10), Some(at(15)))
        );
        assert_eq!(got[0].detail.as_deref(), Some("throttled 1"));
        assert_eq!((got[1].kind.as_str(), got[1].to), ("paused", None));
    }
}
