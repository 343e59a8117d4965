//! [`JobStore`]: jobs, claiming runs once, finishing them, recovering interrupted ones.

use std::sync::Arc;
use std::time::Duration;

use engram_core::store::jobs::{
    AfterRun, JobError, JobStore, NewJob, RUN_OUTPUT_LIMIT, RunEnd, RunStatus, RunTrigger,
    ScheduleRecord,
};
use serde_json::json;

use crate::{Engine, eventually, open};

/// A job due at `next` (ms) that repeats every minute: what the checks, and engine tests of
/// their own, schedule.
pub fn new_job(name: &str, next: i64) -> NewJob {
    NewJob {
        name: name.into(),
        schedule: ScheduleRecord::Every {
            every_ms: 60_000,
            anchor_ms: 0,
        },
        tz: "UTC".into(),
        payload: json!({"message": format!("do {name}"), "deliver": false})
            .as_object()
            .unwrap()
            .clone(),
        session_key: None,
        missed: "run_once".into(),
        delete_after_run: false,
        next_run_at_ms: next,
    }
}

async fn jobs(engine: &dyn Engine) -> Arc<dyn JobStore> {
    open(engine).await.0.jobs
}

/// A job comes back as added, with an 8-hex-digit id and the default session `cron:<id>`;
/// schedules of each kind, the payload and the policy are kept as given.
pub async fn a_job_round_trips_with_its_default_session(engine: &dyn Engine) {
    let store = jobs(engine).await;
    let job = store.add(new_job("water", 1_000), 500).await.unwrap();
    assert_eq!(job.id.len(), 8);
    assert!(job.id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(job.session_key, format!("cron:{}", job.id));
    assert_eq!(job.payload["message"], "do water");
    assert_eq!(job.created_at_ms, 500);
    assert!(job.enabled);
    assert_eq!(job.state.next_run_at_ms, Some(1_000));
    assert_eq!(job.state.running_run_id, None);
    assert_eq!(store.get(&job.id).await.unwrap(), job);
    assert!(matches!(
        store.get("nope").await,
        Err(JobError::NotFound(_))
    ));
    for schedule in [
        ScheduleRecord::At { at_ms: 7_000 },
        ScheduleRecord::Cron {
            expr: "0 9 * * MON-FRI".into(),
        },
    ] {
        let job = store
            .add(
                NewJob {
                    schedule: schedule.clone(),
                    tz: "Europe/Berlin".into(),
                    session_key: Some("telegram:42".into()),
                    missed: "skip".into(),
                    delete_after_run: true,
                    ..new_job("other", 7_000)
                },
                600,
            )
            .await
            .unwrap();
        let got = store.get(&job.id).await.unwrap();
        assert_eq!(got.schedule, schedule);
        assert_eq!(got.tz, "Europe/Berlin");
        assert_eq!(got.session_key, "telegram:42");
        assert_eq!(got.missed, "skip");
        assert!(got.delete_after_run);
    }
    assert!(matches!(
        store.add(new_job("  ", 1), 0).await,
        Err(JobError::Invalid(_))
    ));
}

/// A claimed run is recorded as started, then finished with its output cut to the limit; the
/// job moves on and the old occurrence cannot be claimed again.
pub async fn a_run_is_recorded_and_moves_the_job_on(engine: &dyn Engine) {
    let store = jobs(engine).await;
    let job = store.add(new_job("water", 1_000), 500).await.unwrap();
    assert_eq!(store.due(999).await.unwrap().len(), 0);
    assert_eq!(store.due(1_000).await.unwrap()[0].id, job.id);
    let run = store
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.trigger, RunTrigger::Schedule);
    assert_eq!(run.scheduled_at_ms, Some(1_000));
    assert_eq!(run.job_name, "water");
    assert_eq!(
        store.get(&job.id).await.unwrap().state.running_run_id,
        Some(run.id)
    );
    assert!(
        store.due(5_000).await.unwrap().is_empty(),
        "a running job is not due"
    );
    assert_eq!(store.next_wake().await.unwrap(), None);
    let end = RunEnd {
        status: RunStatus::Ok,
        error: None,
        output: Some("é".repeat(RUN_OUTPUT_LIMIT + 5)),
        finished_at_ms: 1_500,
    };
    store
        .finish_run(&run, &end, AfterRun::Reschedule(Some(61_000)))
        .await
        .unwrap();
    let job = store.get(&job.id).await.unwrap();
    assert_eq!(job.state.next_run_at_ms, Some(61_000));
    assert_eq!(job.state.last_status, Some(RunStatus::Ok));
    assert_eq!(job.state.last_run_at_ms, Some(1_000));
    assert_eq!(job.state.running_run_id, None);
    assert!(
        store
            .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 2_000, 1)
            .await
            .unwrap()
            .is_none()
    );
    let runs = store.runs(&job.id, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Ok);
    assert_eq!(runs[0].duration_ms(), Some(500));
    assert_eq!(
        runs[0].output.as_ref().unwrap().chars().count(),
        RUN_OUTPUT_LIMIT + 1
    );
    assert_eq!(store.run(run.id).await.unwrap(), runs[0]);
    // A manual run leaves the schedule alone; runs are listed newest first.
    let manual = store
        .start_run(&job.id, RunTrigger::Manual, None, 3_000, 1)
        .await
        .unwrap()
        .unwrap();
    assert!(manual.id > run.id);
    store
        .finish_run(
            &manual,
            &RunEnd {
                status: RunStatus::Error,
                error: Some("boom".into()),
                output: None,
                finished_at_ms: 3_100,
            },
            AfterRun::Keep,
        )
        .await
        .unwrap();
    let job = store.get(&job.id).await.unwrap();
    assert_eq!(job.state.next_run_at_ms, Some(61_000));
    assert_eq!(job.state.last_error.as_deref(), Some("boom"));
    let runs = store.runs(&job.id, 10).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        [manual.id, run.id]
    );
    assert_eq!(store.runs(&job.id, 1).await.unwrap().len(), 1);
    assert!(matches!(
        store
            .start_run("nope", RunTrigger::Manual, None, 3_000, 1)
            .await,
        Err(JobError::NotFound(_))
    ));
}

/// Listing shows enabled jobs unless asked for all, soonest first; disabling and enabling
/// (with the next run computed inside the change) move the next wake.
pub async fn jobs_are_listed_soonest_first_and_disabled_ones_only_when_asked(engine: &dyn Engine) {
    let store = jobs(engine).await;
    let late = store.add(new_job("late", 1_000), 0).await.unwrap();
    let soon = store.add(new_job("soon", 10), 0).await.unwrap();
    let ids = |jobs: Vec<engram_core::store::jobs::Job>| -> Vec<String> {
        jobs.into_iter().map(|j| j.id).collect()
    };
    assert_eq!(
        ids(store.list(false).await.unwrap()),
        [soon.id.clone(), late.id.clone()]
    );
    store
        .set_enabled(&late.id, false, 10, Box::new(|_| Ok(None)))
        .await
        .unwrap();
    assert_eq!(
        ids(store.list(false).await.unwrap()),
        std::slice::from_ref(&soon.id)
    );
    assert_eq!(store.list(true).await.unwrap().len(), 2);
    assert_eq!(store.next_wake().await.unwrap(), Some(10));
    assert_eq!(
        ids(store.due(5_000).await.unwrap()),
        std::slice::from_ref(&soon.id)
    );
    let late = store
        .set_enabled(
            &late.id,
            true,
            20,
            Box::new(|job| {
                assert!(!job.enabled, "the job as it was");
                Ok(Some(3))
            }),
        )
        .await
        .unwrap();
    assert!(late.enabled);
    assert_eq!(late.state.next_run_at_ms, Some(3));
    assert_eq!(store.next_wake().await.unwrap(), Some(3));
    assert_eq!(
        ids(store.due(5_000).await.unwrap()),
        [late.id.clone(), soon.id.clone()]
    );
    assert!(matches!(
        store
            .set_enabled("nope", true, 0, Box::new(|_| Ok(Some(1))))
            .await,
        Err(JobError::NotFound(_))
    ));
    let removed = store.remove(&soon.id).await.unwrap();
    assert_eq!(removed.id, soon.id);
    assert!(matches!(
        store.remove(&soon.id).await,
        Err(JobError::NotFound(_))
    ));
    assert_eq!(ids(store.list(true).await.unwrap()), [late.id]);
}

/// A missed occurrence is skipped once (a `skipped` run), and the job moves on.
pub async fn a_missed_occurrence_is_skipped_once(engine: &dyn Engine) {
    let store = jobs(engine).await;
    let job = store.add(new_job("b", 10), 0).await.unwrap();
    assert!(
        store
            .skip_missed(&job.id, 10, 100, AfterRun::Reschedule(Some(60_010)))
            .await
            .unwrap()
    );
    assert!(
        !store
            .skip_missed(&job.id, 10, 100, AfterRun::Keep)
            .await
            .unwrap()
    );
    let runs = store.runs(&job.id, 5).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Skipped);
    assert_eq!(runs[0].scheduled_at_ms, Some(10));
    assert_eq!(
        store.get(&job.id).await.unwrap().state.next_run_at_ms,
        Some(60_010)
    );
}

/// A one-shot job deleted after its run is gone, but its runs can still be read; removing a job
/// takes its runs with it.
pub async fn a_one_shot_job_deleted_after_its_run_keeps_its_runs(engine: &dyn Engine) {
    let store = jobs(engine).await;
    let once = store
        .add(
            NewJob {
                schedule: ScheduleRecord::At { at_ms: 200 },
                delete_after_run: true,
                ..new_job("once", 200)
            },
            0,
        )
        .await
        .unwrap();
    let run = store
        .start_run(&once.id, RunTrigger::Schedule, Some(200), 200, 1)
        .await
        .unwrap()
        .unwrap();
    store
        .finish_run(
            &run,
            &RunEnd {
                status: RunStatus::Error,
                error: Some("x".repeat(RUN_OUTPUT_LIMIT + 10)),
                output: Some("done".into()),
                finished_at_ms: 300,
            },
            AfterRun::Delete,
        )
        .await
        .unwrap();
    assert!(matches!(
        store.get(&once.id).await,
        Err(JobError::NotFound(_))
    ));
    let runs = store.runs(&once.id, 5).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Error);
    assert_eq!(runs[0].output.as_deref(), Some("done"));
    assert_eq!(
        runs[0].error.as_ref().unwrap().chars().count(),
        RUN_OUTPUT_LIMIT + 1
    );

    // A kept one-shot job is disabled instead.
    let kept = store
        .add(
            NewJob {
                schedule: ScheduleRecord::At { at_ms: 200 },
                ..new_job("kept", 200)
            },
            0,
        )
        .await
        .unwrap();
    let run = store
        .start_run(&kept.id, RunTrigger::Schedule, Some(200), 200, 1)
        .await
        .unwrap()
        .unwrap();
    store
        .finish_run(
            &run,
            &RunEnd {
                status: RunStatus::Ok,
                error: None,
                output: None,
                finished_at_ms: 300,
            },
            AfterRun::Disable,
        )
        .await
        .unwrap();
    let kept = store.get(&kept.id).await.unwrap();
    assert!(!kept.enabled);
    assert!(store.due(10_000).await.unwrap().is_empty());

    store.remove(&kept.id).await.unwrap();
    assert!(matches!(
        store.runs(&kept.id, 5).await,
        Err(JobError::NotFound(_))
    ));
    assert!(matches!(
        store.runs("never", 5).await,
        Err(JobError::NotFound(_))
    ));
}

/// Two handles (two processes, two hosts) claiming the same occurrence at once get one run
/// between them; once it runs, a manual run is refused by either.
pub async fn two_claimers_of_one_occurrence_get_one_run(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    for i in 0..20 {
        let job = a
            .jobs
            .add(new_job(&format!("j{i}"), 1_000), 0)
            .await
            .unwrap();
        let (x, y) = tokio::join!(
            a.jobs
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 1),
            b.jobs
                .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 2),
        );
        let won = usize::from(x.unwrap().is_some()) + usize::from(y.unwrap().is_some());
        assert_eq!(won, 1, "job {i} was claimed {won} times");
        assert_eq!(a.jobs.runs(&job.id, 10).await.unwrap().len(), 1);
        assert!(matches!(
            b.jobs
                .start_run(&job.id, RunTrigger::Manual, None, 1_001, 2)
                .await,
            Err(JobError::AlreadyRunning(_))
        ));
        // A claim for a time that is not the job's next run gets nothing.
        assert!(
            b.jobs
                .start_run(&job.id, RunTrigger::Schedule, Some(999), 1_000, 2)
                .await
                .unwrap()
                .is_none()
        );
    }
}

/// A run is interrupted only when its runner is gone: while the handle that started it is open
/// and its process alive, nobody recovers it; once that handle is closed and its process is
/// dead, another handle marks it interrupted (within a few seconds), frees the job and keeps
/// its due time.
pub async fn a_run_is_interrupted_only_when_its_runner_is_gone(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let job = a.jobs.add(new_job("long", 1_000), 0).await.unwrap();
    let run = a
        .jobs
        .start_run(&job.id, RunTrigger::Schedule, Some(1_000), 1_000, 4242)
        .await
        .unwrap()
        .unwrap();
    let stale = b
        .jobs
        .recover_interrupted(2_000, Box::new(|_| true))
        .await
        .unwrap();
    assert!(stale.is_empty(), "{stale:?}");

    drop(a);
    let recovered = std::sync::Mutex::new(Vec::new());
    eventually(
        Duration::from_secs(5),
        "the dead runner's run recovered",
        || async {
            let found = b
                .jobs
                .recover_interrupted(3_000, Box::new(|_| false))
                .await
                .unwrap();
            let done = !found.is_empty();
            recovered.lock().unwrap().extend(found);
            done
        },
    )
    .await;
    let recovered = recovered.into_inner().unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].id, run.id);
    let run = b.jobs.run(run.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Interrupted);
    let job = b.jobs.get(&job.id).await.unwrap();
    assert_eq!(job.state.running_run_id, None);
    assert_eq!(job.state.next_run_at_ms, Some(1_000), "still due");
    assert_eq!(b.jobs.due(5_000).await.unwrap().len(), 1);
    assert!(
        b.jobs
            .recover_interrupted(4_000, Box::new(|_| false))
            .await
            .unwrap()
            .is_empty(),
        "recovered once"
    );
}

/// A job added through one handle moves another handle's change version within a second.
pub async fn a_job_added_through_another_handle_moves_the_change_version(engine: &dyn Engine) {
    let (a, clock) = open(engine).await;
    let b = engine.open(clock).await;
    let before = b.jobs.change_version().await.unwrap();
    a.jobs.add(new_job("new", 5_000), 0).await.unwrap();
    eventually(Duration::from_secs(1), "the version moved", || async {
        b.jobs.change_version().await.unwrap() != before
    })
    .await;
    assert_eq!(b.jobs.due(5_000).await.unwrap().len(), 1);
}
