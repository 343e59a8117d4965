#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The scheduler over a real SQLite store, travelling in time with a fixed clock.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use engram_agent::scheduler::MissedPolicy;
use engram_agent::scheduler::*;
use engram_core::store::jobs::{JobStore, RunStatus, RunTrigger};
use engram_core::{Clock, FixedClock};
use engram_store_sqlite::SqliteStore;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use tempfile::TempDir;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Records every turn; answers "done: <message>", fails on messages starting with "fail", and
/// can move the clock forward while "working".
#[derive(Default)]
struct Recorder {
    turns: Mutex<Vec<(Timestamp, Turn)>>,
    clock: Option<Arc<FixedClock>>,
    work_time: SignedDuration,
}

#[async_trait]
impl TurnRunner for Recorder {
    async fn run_turn(&self, turn: Turn) -> Result<String, TurnError> {
        let now = self.clock.as_ref().map(|c| c.now()).unwrap_or_default();
        let message = turn.message.clone();
        self.turns.lock().unwrap().push((now, turn));
        if let Some(clock) = &self.clock {
            clock.advance(self.work_time);
        }
        if message.starts_with("fail") {
            return Err(TurnError(format!("could not {message}")));
        }
        Ok(format!("done: {message}"))
    }
}

impl Recorder {
    fn times(&self, zone: &str) -> Vec<String> {
        let tz = TimeZone::get(zone).unwrap();
        self.turns
            .lock()
            .unwrap()
            .iter()
            .map(|(at, _)| {
                at.to_zoned(tz.clone())
                    .strftime("%Y-%m-%d %H:%M %Z")
                    .to_string()
            })
            .collect()
    }
}

struct Fixture {
    _dir: TempDir,
    db: PathBuf,
    clock: Arc<FixedClock>,
    scheduler: Scheduler,
}

fn fixture(start: &str) -> Fixture {
    let dir = TempDir::new().unwrap();
    let db = dir.path().join("engram.db");
    let clock = Arc::new(FixedClock::new(ts(start)));
    let store: Arc<dyn JobStore> = Arc::new(SqliteStore::open(&db).unwrap());
    let scheduler = Scheduler::new(store, clock.clone(), Some("UTC".into()));
    Fixture {
        _dir: dir,
        db,
        clock,
        scheduler,
    }
}

fn cron_job(name: &str, expr: &str, zone: &str) -> JobRequest {
    let mut request = JobRequest::new(
        name,
        format!("run {name}"),
        ScheduleInput::Cron(expr.into()),
    );
    request.tz = Some(zone.into());
    request
}

/// Steps the clock minute by minute from the fixture's start to `until`, running what is due
/// at each step, as a gateway polling every minute would.
async fn travel_by_minutes(f: &Fixture, runner: &Recorder, until: &str) {
    let started = f.clock.now();
    let until = ts(until);
    while f.clock.now() < until {
        f.scheduler.run_due(runner, started).await.unwrap();
        f.clock.advance(SignedDuration::from_mins(1));
    }
}

#[tokio::test]
async fn new_york_spring_forward_runs_the_skipped_time_once_after_the_gap() {
    let f = fixture("2024-03-09T12:00:00Z");
    f.scheduler
        .add(&cron_job("late", "30 2 * * *", "America/New_York"))
        .await
        .unwrap();
    f.scheduler
        .add(&cron_job("quarter", "*/15 2 * * *", "America/New_York"))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_minutes(&f, &runner, "2024-03-11T12:00:00Z").await;
    let late: Vec<_> = runner.times("America/New_York");
    // The clock starts at 07:00 EST on the 9th, so the first runs fall on the 10th, inside the
    // gap: each job fires once, at 03:00 EDT. On the 11th, 02:00-02:59 exists again.
    assert_eq!(
        late,
        [
            "2024-03-10 03:00 EDT", // quarter: 02:00, 02:15, 02:30, 02:45 collapsed
            "2024-03-10 03:00 EDT", // late: 02:30
            "2024-03-11 02:00 EDT",
            "2024-03-11 02:15 EDT",
            "2024-03-11 02:30 EDT",
            "2024-03-11 02:30 EDT",
            "2024-03-11 02:45 EDT",
        ]
    );
}

#[tokio::test]
async fn new_york_fall_back_runs_the_repeated_time_once() {
    let f = fixture("2024-11-02T12:00:00Z");
    f.scheduler
        .add(&cron_job("early", "30 1 * * *", "America/New_York"))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_minutes(&f, &runner, "2024-11-04T12:00:00Z").await;
    assert_eq!(
        runner.times("America/New_York"),
        ["2024-11-03 01:30 EDT", "2024-11-04 01:30 EST"]
    );
}

#[tokio::test]
async fn berlin_both_directions() {
    let f = fixture("2024-03-30T12:00:00Z");
    f.scheduler
        .add(&cron_job("night", "30 2 * * *", "Europe/Berlin"))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_minutes(&f, &runner, "2024-04-01T12:00:00Z").await;
    assert_eq!(
        runner.times("Europe/Berlin"),
        ["2024-03-31 03:00 CEST", "2024-04-01 02:30 CEST"]
    );

    let f = fixture("2024-10-26T12:00:00Z");
    f.scheduler
        .add(&cron_job("night", "30 2 * * *", "Europe/Berlin"))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_minutes(&f, &runner, "2024-10-28T12:00:00Z").await;
    assert_eq!(
        runner.times("Europe/Berlin"),
        ["2024-10-27 02:30 CEST", "2024-10-28 02:30 CET"]
    );
}

/// Jumps the clock straight to each job's next run (as the gateway's timer does).
async fn travel_by_runs(f: &Fixture, runner: &Recorder, runs: usize) {
    let started = f.clock.now();
    for _ in 0..runs {
        let next = f.scheduler.next_wake().await.unwrap().expect("a next run");
        if next > f.clock.now() {
            f.clock.set(next);
        }
        f.scheduler.run_due(runner, started).await.unwrap();
    }
}

#[tokio::test]
async fn feb_29_runs_only_in_leap_years() {
    let f = fixture("2023-06-01T00:00:00Z");
    let job = f
        .scheduler
        .add(&cron_job("leap", "0 0 29 2 *", "UTC"))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_runs(&f, &runner, 3).await;
    assert_eq!(
        runner.times("UTC"),
        [
            "2024-02-29 00:00 UTC",
            "2028-02-29 00:00 UTC",
            "2032-02-29 00:00 UTC"
        ]
    );
    let job = f.scheduler.get(&job.id).await.unwrap();
    assert_eq!(
        job.state.next_run_at_ms,
        Some(ts("2036-02-29T00:00:00Z").as_millisecond())
    );
}

#[tokio::test]
async fn every_runs_on_its_grid_however_long_the_turns_take() {
    let f = fixture("2024-01-01T00:00:00Z");
    let job = f
        .scheduler
        .add(&JobRequest::new(
            "tick",
            "tick",
            ScheduleInput::Every("90s".into()),
        ))
        .await
        .unwrap();
    // Each turn takes 7 seconds of (travelled) time.
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        work_time: SignedDuration::from_secs(7),
        ..Recorder::default()
    };
    travel_by_runs(&f, &runner, 100).await;
    let turns = runner.turns.lock().unwrap().clone();
    for (i, (at, _)) in turns.iter().enumerate() {
        let want = ts("2024-01-01T00:00:00Z")
            .checked_add(SignedDuration::from_secs(90 * (i as i64 + 1)))
            .unwrap();
        assert_eq!(*at, want, "run {i}");
    }
    let runs = f.scheduler.runs(&job.id, 1000).await.unwrap();
    assert_eq!(runs.len(), 100);
    assert!(runs.iter().all(|r| r.duration_ms() == Some(7_000)));
}

#[tokio::test]
async fn one_shot_jobs_run_once_then_go() {
    let f = fixture("2024-01-01T00:00:00Z");
    let gone = f
        .scheduler
        .add(&JobRequest::new(
            "once",
            "once",
            ScheduleInput::At("in 10m".into()),
        ))
        .await
        .unwrap();
    let mut keep = JobRequest::new("kept", "kept", ScheduleInput::At("2024-01-01 00:20".into()));
    keep.keep_after_run = true;
    let kept = f.scheduler.add(&keep).await.unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_runs(&f, &runner, 2).await;
    assert_eq!(
        runner.times("UTC"),
        ["2024-01-01 00:10 UTC", "2024-01-01 00:20 UTC"]
    );
    assert!(
        f.scheduler.get(&gone.id).await.is_err(),
        "deleted after its run"
    );
    assert_eq!(
        f.scheduler.runs(&gone.id, 5).await.unwrap()[0].status,
        RunStatus::Ok
    );
    let kept = f.scheduler.get(&kept.id).await.unwrap();
    assert!(!kept.enabled);
    assert_eq!(kept.state.next_run_at_ms, None);
    assert!(f.scheduler.next_wake().await.unwrap().is_none());
    // Re-enabling a one-shot whose time has passed is refused with the reason.
    f.clock.advance(SignedDuration::from_mins(1));
    let err = f
        .scheduler
        .set_enabled(&kept.id, true)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already passed"), "{err}");
}

#[tokio::test]
async fn a_failing_job_is_recorded_and_others_still_run() {
    let f = fixture("2024-01-01T00:00:00Z");
    let bad = f
        .scheduler
        .add(&JobRequest::new(
            "bad",
            "fail loudly",
            ScheduleInput::Every("1m".into()),
        ))
        .await
        .unwrap();
    let good = f
        .scheduler
        .add(&JobRequest::new(
            "good",
            "say hi",
            ScheduleInput::Every("1m".into()),
        ))
        .await
        .unwrap();
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    travel_by_runs(&f, &runner, 2).await;
    let bad = f.scheduler.get(&bad.id).await.unwrap();
    assert_eq!(bad.state.last_status, Some(RunStatus::Error));
    assert_eq!(
        bad.state.last_error.as_deref(),
        Some("could not fail loudly")
    );
    assert!(bad.enabled, "a failure does not stop the job");
    let good_runs = f.scheduler.runs(&good.id, 10).await.unwrap();
    assert_eq!(good_runs.len(), 2);
    assert!(good_runs.iter().all(|r| r.status == RunStatus::Ok));
    assert_eq!(good_runs[0].output.as_deref(), Some("done: say hi"));
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[tokio::test]
async fn a_run_cut_off_by_a_dying_gateway_is_interrupted_then_the_missed_policy_applies() {
    let f = fixture("2024-01-01T08:59:00Z");
    let once = f
        .scheduler
        .add(&cron_job("once", "0 9 * * *", "UTC"))
        .await
        .unwrap();
    let mut skip = cron_job("skip", "0 9 * * *", "UTC");
    skip.missed = MissedPolicy::Skip;
    let skip = f.scheduler.add(&skip).await.unwrap();
    // The first gateway claims both runs at 09:00 and dies before they finish.
    f.clock.set(ts("2024-01-01T09:00:00Z"));
    let store: Arc<dyn JobStore> = Arc::new(SqliteStore::open(&f.db).unwrap());
    let pid = dead_pid();
    for job in [&once, &skip] {
        store
            .start_run(
                &job.id,
                RunTrigger::Schedule,
                Some(ts("2024-01-01T09:00:00Z").as_millisecond()),
                ts("2024-01-01T09:00:00Z").as_millisecond(),
                pid,
            )
            .await
            .unwrap()
            .unwrap();
    }
    // A new gateway starts ten minutes later.
    f.clock.set(ts("2024-01-01T09:10:00Z"));
    let started = f.clock.now();
    let recovered = f.scheduler.recover_interrupted().await.unwrap();
    assert_eq!(recovered.len(), 2);
    assert!(recovered.iter().all(|r| r.status == RunStatus::Interrupted));
    let runner = Recorder {
        clock: Some(f.clock.clone()),
        ..Recorder::default()
    };
    let finished = f.scheduler.run_due(&runner, started).await.unwrap();
    assert_eq!(finished.len(), 1, "only the run-once job runs again");
    assert_eq!(finished[0].run.job_id, once.id);
    assert_eq!(finished[0].run.trigger, RunTrigger::Missed);

    let once_runs = f.scheduler.runs(&once.id, 10).await.unwrap();
    let statuses: Vec<_> = once_runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RunStatus::Ok, RunStatus::Interrupted]);
    let skip_runs = f.scheduler.runs(&skip.id, 10).await.unwrap();
    let statuses: Vec<_> = skip_runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RunStatus::Skipped, RunStatus::Interrupted]);
    for job in [&once, &skip] {
        let job = f.scheduler.get(&job.id).await.unwrap();
        assert_eq!(
            job.state.next_run_at_ms,
            Some(ts("2024-01-02T09:00:00Z").as_millisecond())
        );
        assert_eq!(job.state.running_run_id, None);
    }
}

#[tokio::test]
async fn runs_of_a_live_process_are_not_taken_over() {
    let f = fixture("2024-01-01T09:00:00Z");
    let job = f
        .scheduler
        .add(&JobRequest::new("a", "a", ScheduleInput::At("now".into())))
        .await
        .unwrap();
    f.scheduler
        .start(&job, RunTrigger::Schedule)
        .await
        .unwrap()
        .unwrap();
    // Our own process is alive, so its run is left alone.
    assert!(f.scheduler.recover_interrupted().await.unwrap().is_empty());
    assert!(f.scheduler.due().await.unwrap().is_empty());
    let err = f
        .scheduler
        .run_now(&job.id, &Recorder::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");
}

#[tokio::test]
async fn a_manual_run_leaves_the_schedule_alone() {
    let f = fixture("2024-01-01T00:00:00Z");
    let job = f
        .scheduler
        .add(&cron_job("daily", "0 9 * * *", "UTC"))
        .await
        .unwrap();
    let finished = f
        .scheduler
        .run_now(&job.id, &Recorder::default())
        .await
        .unwrap();
    assert_eq!(finished.run.trigger, RunTrigger::Manual);
    assert_eq!(finished.output.as_deref(), Some("done: run daily"));
    let after = f.scheduler.get(&job.id).await.unwrap();
    assert_eq!(after.state.next_run_at_ms, job.state.next_run_at_ms);
    assert_eq!(after.state.last_status, Some(RunStatus::Ok));
}

// ---- the gateway loop, in process ----

struct Events(Mutex<Vec<GatewayEvent>>);

impl Events {
    fn log() -> (Arc<Self>, EventLog) {
        let events = Arc::new(Self(Mutex::new(Vec::new())));
        let sink = events.clone();
        (
            events,
            Arc::new(move |e: &GatewayEvent| sink.0.lock().unwrap().push(e.clone())),
        )
    }

    fn finished(&self) -> Vec<(String, RunStatus)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                GatewayEvent::RunFinished(f) => Some((f.run.job_name.clone(), f.run.status)),
                _ => None,
            })
            .collect()
    }

    fn count(&self, pred: impl Fn(&GatewayEvent) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|e| pred(e)).count()
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn fast_options() -> GatewayOptions {
    GatewayOptions {
        poll_interval: Duration::from_millis(20),
        shutdown_grace: Duration::from_millis(200),
        recovery_interval: Duration::from_millis(50),
        ..GatewayOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_sees_jobs_added_through_another_connection() {
    let f = fixture("2024-01-01T00:00:00Z");
    let (events, log) = Events::log();
    let gateway = Gateway::new(
        f.scheduler.clone(),
        Arc::new(EchoRunner),
        fast_options(),
        log,
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(gateway.run(async {
        let _ = stop_rx.await;
    }));
    wait_until("start", || {
        events.count(|e| matches!(e, GatewayEvent::Started { .. })) == 1
    })
    .await;

    // Another "process": its own store handle and clock, adding a job due now.
    let other = Scheduler::new(
        Arc::new(SqliteStore::open(&f.db).unwrap()),
        f.clock.clone(),
        Some("UTC".into()),
    );
    other
        .add(&JobRequest::new(
            "ping",
            "ping",
            ScheduleInput::At("now".into()),
        ))
        .await
        .unwrap();
    wait_until("the run", || events.finished().len() == 1).await;
    assert_eq!(events.finished(), [("ping".to_string(), RunStatus::Ok)]);

    // Time travel: an every-minute job runs when the clock reaches it, and a failing one does
    // not stop the gateway.
    other
        .add(&JobRequest::new(
            "fails",
            "fail: no luck",
            ScheduleInput::Every("1m".into()),
        ))
        .await
        .unwrap();
    other
        .add(&JobRequest::new(
            "minutely",
            "tick",
            ScheduleInput::Every("1m".into()),
        ))
        .await
        .unwrap();
    f.clock.advance(SignedDuration::from_secs(61));
    wait_until("two more runs", || events.finished().len() == 3).await;
    f.clock.advance(SignedDuration::from_secs(60));
    wait_until("two more runs", || events.finished().len() == 5).await;
    let mut got = events.finished();
    got.sort_by_key(|(name, status)| (name.clone(), status.as_str()));
    assert_eq!(
        got,
        [
            ("fails".to_string(), RunStatus::Error),
            ("fails".to_string(), RunStatus::Error),
            ("minutely".to_string(), RunStatus::Ok),
            ("minutely".to_string(), RunStatus::Ok),
            ("ping".to_string(), RunStatus::Ok),
        ]
    );
    stop_tx.send(()).unwrap();
    handle.await.unwrap().unwrap();
    assert_eq!(events.count(|e| matches!(e, GatewayEvent::Stopped)), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_gateway_takes_over_the_run_of_a_process_that_died() {
    let f = fixture("2024-01-01T09:00:00Z");
    let (events, log) = Events::log();
    let gateway = Gateway::new(
        f.scheduler.clone(),
        Arc::new(EchoRunner),
        fast_options(),
        log,
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(gateway.run(async {
        let _ = stop_rx.await;
    }));
    wait_until("start", || {
        events.count(|e| matches!(e, GatewayEvent::Started { .. })) == 1
    })
    .await;
    // Another process adds a job and claims its run at once, then dies (`engram cron run`
    // killed, or a second gateway killed with -9) before the gateway looks.
    let other: Arc<dyn JobStore> = Arc::new(SqliteStore::open(&f.db).unwrap());
    let job = f
        .scheduler
        .add(&cron_job("orphan", "0 10 * * *", "UTC"))
        .await
        .unwrap();
    let due = job.state.next_run_at_ms;
    let run = other
        .start_run(&job.id, RunTrigger::Schedule, due, due.unwrap(), dead_pid())
        .await
        .unwrap()
        .unwrap();
    f.clock.set(ts("2024-01-01T10:00:30Z"));
    // Without a restart: the run is found interrupted and the occurrence runs here.
    wait_until("the recovery", || {
        events.count(|e| matches!(e, GatewayEvent::Recovered(r) if r.id == run.id)) == 1
    })
    .await;
    wait_until("the run again", || events.finished().len() == 1).await;
    assert_eq!(events.finished(), [("orphan".to_string(), RunStatus::Ok)]);
    let runs = f.scheduler.runs(&job.id, 10).await.unwrap();
    let statuses: Vec<_> = runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [RunStatus::Ok, RunStatus::Interrupted]);
    assert_eq!(runs[0].scheduled_at_ms, due, "the same occurrence");
    stop_tx.send(()).unwrap();
    handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_records_a_cut_off_run_as_interrupted() {
    let f = fixture("2024-01-01T00:00:00Z");
    let job = f
        .scheduler
        .add(&JobRequest::new(
            "slow",
            "sleep:30 slow",
            ScheduleInput::At("now".into()),
        ))
        .await
        .unwrap();
    let (events, log) = Events::log();
    let gateway = Gateway::new(
        f.scheduler.clone(),
        Arc::new(EchoRunner),
        fast_options(),
        log,
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(gateway.run(async {
        let _ = stop_rx.await;
    }));
    wait_until("the run to start", || {
        events.count(|e| matches!(e, GatewayEvent::RunStarted(_))) == 1
    })
    .await;
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("the gateway stops within its grace period")
        .unwrap()
        .unwrap();
    let runs = f.scheduler.runs(&job.id, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Interrupted);
    assert!(runs[0].finished_at_ms.is_some());
    let job = f.scheduler.get(&job.id).await.unwrap();
    assert_eq!(job.state.running_run_id, None);
    assert!(
        job.enabled,
        "still due: the missed-run policy decides at the next start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_runs_only_when_the_file_has_tasks() {
    let f = fixture("2024-01-01T00:00:00Z");
    let dir = TempDir::new().unwrap();
    let file = dir.path().join(HEARTBEAT_FILE);
    std::fs::write(&file, "# Heartbeat\n<!-- add tasks -->\n- [ ]\n").unwrap();
    let runner = Arc::new(Recorder::default());
    let (events, log) = Events::log();
    let options = GatewayOptions {
        heartbeat: Some(HeartbeatOptions::new(Duration::from_secs(30 * 60), &file)),
        ..fast_options()
    };
    let gateway = Gateway::new(f.scheduler.clone(), runner.clone(), options, log);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(gateway.run(async {
        let _ = stop_rx.await;
    }));
    wait_until("start", || {
        events.count(|e| matches!(e, GatewayEvent::Started { .. })) == 1
    })
    .await;
    f.clock.advance(SignedDuration::from_mins(30));
    wait_until("an idle heartbeat", || {
        events.count(|e| matches!(e, GatewayEvent::HeartbeatIdle)) == 1
    })
    .await;
    assert!(
        runner.turns.lock().unwrap().is_empty(),
        "no model call for an empty file"
    );

    std::fs::write(&file, "# Heartbeat\n- [ ] water the plants\n").unwrap();
    f.clock.advance(SignedDuration::from_mins(30));
    wait_until("a heartbeat turn", || {
        events.count(|e| matches!(e, GatewayEvent::HeartbeatFinished { .. })) == 1
    })
    .await;
    stop_tx.send(()).unwrap();
    handle.await.unwrap().unwrap();
    let turns = runner.turns.lock().unwrap();
    assert_eq!(turns.len(), 1);
    let turn = &turns[0].1;
    assert_eq!(turn.session_key, HEARTBEAT_SESSION);
    assert_eq!(turn.history_limit, Some(HEARTBEAT_HISTORY_LIMIT));
    assert_eq!(turn.origin, TurnOrigin::Heartbeat);
    assert!(turn.message.contains("- [ ] water the plants"));
}
