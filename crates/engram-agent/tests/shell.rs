#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! bash, bash_output and bash_kill with real child processes.

mod common;

use std::time::{Duration, Instant};

use common::{Fixture, content_of, error_of, read_pid, wait_until_dead};
use engram_agent::tools::{BuiltinOptions, ShellLimits, ShellOptions};
use serde_json::json;

fn with_shell(shell: ShellOptions) -> Fixture {
    Fixture::with_options(BuiltinOptions {
        shell,
        ..BuiltinOptions::default()
    })
}

#[tokio::test]
async fn output_and_exit_code_are_reported() {
    let f = Fixture::new();
    let out = f
        .call("bash", json!({"command": "echo out; echo err >&2; pwd"}))
        .await;
    assert_eq!(
        content_of(&out),
        format!("out\nerr\n{}\n[exit code 0]", f.ws.display())
    );

    let out = f
        .call("bash", json!({"command": "echo failing; exit 3"}))
        .await;
    assert_eq!(error_of(&out), "the command failed (exit code 3)");
    assert_eq!(out.content, "failing\n[exit code 3]");
    assert_eq!(
        out.to_model_text(),
        "Error: the command failed (exit code 3)\nfailing\n[exit code 3]"
    );

    let out = f.call("bash", json!({"command": "true"})).await;
    assert_eq!(content_of(&out), "(no output)\n[exit code 0]");

    let out = f.call("bash", json!({"command": "kill -TERM $$"})).await;
    assert_eq!(error_of(&out), "the command failed (killed by signal 15)");
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let f = with_shell(ShellOptions {
        output_cap_bytes: 1000,
        ..ShellOptions::default()
    });
    let out = f.call("bash", json!({"command": "seq 1 100000"})).await;
    let text = content_of(&out);
    assert!(text.starts_with("1\n2\n3\n"), "{text}");
    assert!(text.ends_with("99999\n100000\n[exit code 0]"), "{text}");
    // seq 1 100000 prints 588895 bytes; 1000 are kept.
    assert!(
        text.contains("\n[... 587895 bytes of output omitted ...]\n"),
        "{text}"
    );
    assert!(text.len() < 1200);
}

#[tokio::test]
async fn a_command_that_runs_too_long_is_killed_with_its_children() {
    let f = Fixture::new();
    let started = Instant::now();
    let out = f
        .call(
            "bash",
            json!({"command": "echo started; sleep 300 & echo $! > child.pid; wait", "timeout": 1}),
        )
        .await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let error = error_of(&out);
    assert!(
        error.starts_with(
            "the command timed out after 1 s and was stopped (its whole process group was killed)"
        ),
        "{error}"
    );
    assert!(error.contains("at most 600 s"));
    assert_eq!(out.content, "started\n[timed out]");
    let child = read_pid(&f.path("child.pid")).await;
    assert!(
        wait_until_dead(child, 5).await,
        "grandchild {child} survived the timeout"
    );
}

#[tokio::test]
async fn the_timeout_cannot_exceed_the_configured_maximum() {
    let f = with_shell(ShellOptions {
        max_timeout: Duration::from_secs(30),
        ..ShellOptions::default()
    });
    let out = f
        .call("bash", json!({"command": "true", "timeout": 31}))
        .await;
    assert!(error_of(&out).contains("field 'timeout' must be at most 30, got 31"));
}

#[tokio::test]
async fn processes_left_behind_by_a_finished_command_are_stopped() {
    let f = Fixture::new();
    let out = f
        .call(
            "bash",
            json!({"command": "sleep 300 & echo $! > left.pid; echo done"}),
        )
        .await;
    assert_eq!(content_of(&out), "done\n[exit code 0]");
    let left = read_pid(&f.path("left.pid")).await;
    assert!(
        wait_until_dead(left, 5).await,
        "left-behind process {left} still runs"
    );
}

#[tokio::test]
async fn background_commands_report_new_output_then_their_exit() {
    let f = Fixture::new();
    let out = f
        .call(
            "bash",
            json!({"command": "echo first; sleep 0.3; echo second; exit 4", "run_in_background": true}),
        )
        .await;
    let started = content_of(&out);
    assert!(
        started.starts_with("Started background command bg1 (pid "),
        "{started}"
    );
    assert!(started.contains("Use bash_output with id \"bg1\""));

    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let out = f.call("bash_output", json!({"id": "bg1"})).await;
        let text = content_of(&out).to_string();
        if let Some((_, new)) = text.split_once("New output:\n") {
            seen.push_str(new);
        }
        if text.contains("Status: finished") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        last.starts_with(
            "Command: echo first; sleep 0.3; echo second; exit 4\nStatus: finished (exit code 4)\n"
        ),
        "{last}"
    );
    assert_eq!(seen, "first\nsecond\n");
    // Nothing new after everything was read.
    let out = f.call("bash_output", json!({"id": "bg1"})).await;
    assert!(content_of(&out).ends_with("(no new output since the last check)"));
}

#[tokio::test]
async fn bash_kill_stops_a_background_command_and_its_children() {
    let f = Fixture::new();
    let out = f
        .call(
            "bash",
            json!({"command": "sleep 300 & echo $! > bg.pid; echo ready; wait", "run_in_background": true}),
        )
        .await;
    content_of(&out);
    let child = read_pid(&f.path("bg.pid")).await;
    let out = f.call("bash_output", json!({"id": "bg1"})).await;
    assert!(content_of(&out).contains("Status: running (pid "));

    let out = f.call("bash_kill", json!({"id": "bg1"})).await;
    assert!(content_of(&out).starts_with("Stopped background command bg1 (sleep 300 &"));
    assert!(
        wait_until_dead(child, 5).await,
        "child {child} survived bash_kill"
    );
    let out = f.call("bash_output", json!({"id": "bg1"})).await;
    assert!(content_of(&out).contains("Status: stopped by bash_kill"));
    let out = f.call("bash_kill", json!({"id": "bg1"})).await;
    assert_eq!(
        content_of(&out),
        "Background command bg1 was already stopped."
    );

    let out = f.call("bash_output", json!({"id": "bg9"})).await;
    assert_eq!(
        error_of(&out),
        "no background command with id 'bg9' (known ids: bg1)"
    );
}

#[tokio::test]
async fn dropping_the_registry_kills_background_commands() {
    let f = Fixture::new();
    let pid_file = f.path("bg.pid");
    let out = f
        .call(
            "bash",
            json!({"command": "sleep 300 & echo $! > bg.pid; wait", "run_in_background": true}),
        )
        .await;
    content_of(&out);
    let child = read_pid(&pid_file).await;
    let Fixture { registry, dir, .. } = f;
    drop(registry);
    assert!(
        wait_until_dead(child, 5).await,
        "child {child} outlived the registry"
    );
    drop(dir);
}

#[tokio::test]
async fn cancelling_a_call_kills_the_command() {
    let f = Fixture::new();
    let call = f.call(
        "bash",
        json!({"command": "sleep 300 & echo $! > fg.pid; wait"}),
    );
    // The agent stops waiting (Ctrl-C) once the command is under way: the future is dropped.
    let pid_file = f.path("fg.pid");
    let child = tokio::select! {
        out = call => panic!("the command finished: {out:?}"),
        pid = read_pid(&pid_file) => pid,
    };
    assert!(
        wait_until_dead(child, 5).await,
        "child {child} outlived the cancelled call"
    );
}

#[tokio::test]
async fn too_many_background_commands_are_refused() {
    let f = with_shell(ShellOptions {
        max_background: 1,
        ..ShellOptions::default()
    });
    content_of(
        &f.call(
            "bash",
            json!({"command": "sleep 300", "run_in_background": true}),
        )
        .await,
    );
    let out = f
        .call(
            "bash",
            json!({"command": "sleep 300", "run_in_background": true}),
        )
        .await;
    assert!(error_of(&out).starts_with("1 background commands are already running"));
}

#[tokio::test]
async fn destructive_commands_are_refused_before_anything_runs() {
    let f = Fixture::new();
    for command in [
        "touch ran.txt; rm -rf /",
        "touch ran.txt && rm -rf ~",
        "touch ran.txt; sudo mkfs.ext4 /dev/sda1",
        "touch ran.txt; dd if=/dev/zero of=/dev/sda",
        "touch ran.txt; :(){ :|:& };:",
        "touch ran.txt; shutdown -h now",
        "touch ran.txt; chmod -R 777 /",
    ] {
        let out = f.call("bash", json!({"command": command})).await;
        let error = error_of(&out);
        assert!(error.starts_with("refused: "), "{command}: {error}");
        assert!(error.contains("a guard rail against accidents, not a sandbox"));
        let out = f
            .call(
                "bash",
                json!({"command": command, "run_in_background": true}),
            )
            .await;
        assert!(error_of(&out).starts_with("refused: "));
    }
    assert!(!f.path("ran.txt").exists());
    let out = f.call("bash", json!({"command": "rm -rf ~"})).await;
    assert_eq!(
        error_of(&out),
        "refused: `rm -r ~` deletes the home directory. This command is on the deny list of \
         destructive commands (a guard rail against accidents, not a sandbox). If it is really \
         needed, ask the user to run it themselves."
    );
}

#[tokio::test]
async fn commands_get_no_stdin() {
    let f = Fixture::new();
    let out = f.call("bash", json!({"command": "cat; echo after"})).await;
    assert_eq!(content_of(&out), "after\n[exit code 0]");
}

#[tokio::test]
async fn commands_get_an_allow_listed_environment_without_secrets() {
    // cargo gives this test process CARGO_* variables: not on the list, so not passed on,
    // unless named.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let f = Fixture::new();
    let out = f.call("bash", json!({"command": "env"})).await;
    let env = content_of(&out);
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
    assert!(!env.contains("CARGO_PKG_NAME"), "{env}");

    let f = with_shell(ShellOptions {
        pass_env: vec!["CARGO_PKG_NAME".to_string()],
        ..ShellOptions::default()
    });
    let out = f.call("bash", json!({"command": "env"})).await;
    let env = content_of(&out);
    assert!(env.contains("CARGO_PKG_NAME=engram-agent"), "{env}");
    assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
}

#[tokio::test]
async fn commands_run_under_resource_limits_they_cannot_raise() {
    let f = with_shell(ShellOptions {
        limits: ShellLimits {
            extra_processes: 4096,
            max_file_bytes: 1 << 20,
            max_memory_bytes: Some(1 << 30),
        },
        ..ShellOptions::default()
    });
    let out = f
        .call(
            "bash",
            json!({"command": "ulimit -H -f; ulimit -S -f; ulimit -c; ulimit -d; ulimit -u"}),
        )
        .await;
    let text = content_of(&out);
    let values: Vec<&str> = text.lines().take(5).collect();
    assert_eq!(&values[..4], ["1024", "1024", "0", "1048576"], "{text}");
    assert_ne!(values[4], "unlimited", "{text}");

    // A file past the limit is cut off (the writer gets SIGXFSZ); only root could raise the
    // hard limit again.
    let out = f
        .call(
            "bash",
            json!({"command": "head -c 2000000 /dev/zero > big; ls -l big | awk '{print $5}'; ulimit -f unlimited"}),
        )
        .await;
    let text = out.content.clone();
    assert!(text.contains("1048576"), "{text}");
    if !rustix::process::getuid().is_root() {
        assert!(text.contains("cannot modify limit"), "{text}");
    }
}
