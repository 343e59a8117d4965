//! bash, bash_output and bash_kill: shell commands in the workspace, in the foreground with a
//! timeout or in the background with polled output.
//!
//! Every command runs as `bash -c` in its own process group, started in the workspace
//! directory. A foreground command's whole group is killed when it returns or times out, and
//! every background group is killed when the [`Shell`] is dropped (that is, when the last of
//! its three tools goes, normally with the registry). A command that calls `setsid` or
//! daemonizes itself leaves the group and is out of reach. Commands get an allow-listed
//! environment ([`SAFE_ENV`] and what the user passes: never the model's API key), resource
//! limits ([`ShellLimits`]: processes, file size, memory, no core dumps) and the deny list's
//! check; that is a guard rail against accidents and the plain forms of injected commands, not
//! a sandbox.

mod deny;
mod output;
mod process;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use engram_core::{Tool, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use self::output::HeadTail;
use self::process::{Launcher, ProcessGroup, describe_exit, lock, pump, spawn_bash};
pub use self::process::{SAFE_ENV, ShellLimits};
use super::workspace::Workspace;
use super::{AbortOnDrop, parse_args};

pub use self::deny::{check as check_deny_list, check_in as check_deny_list_in};

/// Time the output reader gets to drain the pipe after a command's processes are gone.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Limits for shell commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOptions {
    /// Timeout when the model gives none.
    pub default_timeout: Duration,
    /// Longest timeout a model may ask for.
    pub max_timeout: Duration,
    /// Output kept per call, in bytes (half from the start, half from the end).
    pub output_cap_bytes: usize,
    /// Background commands that may run at once.
    pub max_background: usize,
    /// Variables of engram's environment passed to commands besides [`SAFE_ENV`] (by name).
    pub pass_env: Vec<String>,
    /// Resource limits of every command.
    pub limits: ShellLimits,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            output_cap_bytes: 30_000,
            max_background: 8,
            pass_env: Vec::new(),
            limits: ShellLimits::default(),
        }
    }
}

/// The shell the three tools share: the workspace, the limits, and the background commands.
#[derive(Debug)]
pub struct Shell {
    workspace: Workspace,
    options: ShellOptions,
    launcher: Launcher,
    jobs: Mutex<Jobs>,
}

#[derive(Debug, Default)]
struct Jobs {
    next_id: u64,
    by_id: BTreeMap<String, Job>,
}

/// A background command. Dropping it kills its process group.
#[derive(Debug)]
struct Job {
    command: String,
    pid: i32,
    started: Instant,
    group: ProcessGroup,
    state: Arc<Mutex<JobState>>,
    _reader: AbortOnDrop<()>,
    _waiter: AbortOnDrop<()>,
}

#[derive(Debug)]
struct JobState {
    unread: HeadTail,
    status: JobStatus,
}

#[derive(Debug, Clone)]
enum JobStatus {
    Running,
    Exited(String),
    Killed,
}

impl Shell {
    /// A shell working in `workspace`.
    pub fn new(workspace: Workspace, options: ShellOptions) -> Arc<Self> {
        let launcher = Launcher::new(&options.pass_env, &options.limits);
        Arc::new(Self {
            workspace,
            options,
            launcher,
            jobs: Mutex::new(Jobs::default()),
        })
    }

    /// The three tools (bash, bash_output, bash_kill) over this shell.
    pub fn tools(self: &Arc<Self>) -> [Arc<dyn Tool>; 3] {
        [
            Arc::new(BashTool::new(Arc::clone(self))),
            Arc::new(BashOutputTool {
                shell: Arc::clone(self),
            }),
            Arc::new(BashKillTool {
                shell: Arc::clone(self),
            }),
        ]
    }

    /// Runs `command` to completion or until `timeout`, whichever comes first.
    async fn run_foreground(&self, command: &str, timeout: Duration) -> ToolOutput {
        let spawned = match spawn_bash(command, self.workspace.root(), &self.launcher) {
            Ok(spawned) => spawned,
            Err(e) => return ToolOutput::error(format!("cannot start bash: {e}")),
        };
        let mut child = spawned.child;
        let group = spawned.group;
        let buffer = Arc::new(Mutex::new(HeadTail::new(self.options.output_cap_bytes)));
        let mut reader = {
            let buffer = Arc::clone(&buffer);
            AbortOnDrop(tokio::spawn(pump(spawned.output, move |bytes| {
                lock(&buffer).push(bytes);
            })))
        };

        let outcome = tokio::time::timeout(timeout, child.wait()).await;
        // Stop what the command left behind, or the command itself if it ran out of time.
        group.kill();
        let status = match outcome {
            Ok(Ok(status)) => Some(status),
            Ok(Err(e)) => return ToolOutput::error(format!("lost track of the command: {e}")),
            Err(_) => {
                let _ = child.wait().await;
                None
            }
        };
        // The writers are dead, so the reader reaches end-of-file at once, unless a process
        // escaped the group and still holds the pipe; don't wait for that one.
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut reader.0).await;
        let captured = lock(&buffer).clone();
        let text = if captured.is_empty() {
            "(no output)".to_string()
        } else {
            captured.render()
        };

        match status {
            Some(status) => {
                let ending = describe_exit(status);
                let content = format!("{}\n[{ending}]", text.trim_end_matches('\n'));
                if status.success() {
                    ToolOutput::ok(content)
                } else {
                    ToolOutput {
                        success: false,
                        content,
                        error: Some(format!("the command failed ({ending})")),
                    }
                }
            }
            None => ToolOutput {
                success: false,
                content: format!("{}\n[timed out]", text.trim_end_matches('\n')),
                error: Some(format!(
                    "the command timed out after {} s and was stopped (its whole process group \
                     was killed). Pass a larger timeout (at most {} s), or start long-running \
                     commands with run_in_background: true. Output so far:",
                    timeout.as_secs(),
                    self.options.max_timeout.as_secs()
                )),
            },
        }
    }

    /// Starts `command` in the background and returns its id at once.
    fn start_background(&self, command: &str) -> ToolOutput {
        let mut jobs = lock(&self.jobs);
        let running = jobs
            .by_id
            .values()
            .filter(|job| matches!(lock(&job.state).status, JobStatus::Running))
            .count();
        if running >= self.options.max_background {
            return ToolOutput::error(format!(
                "{running} background commands are already running (the limit); stop one with \
                 bash_kill first"
            ));
        }
        let spawned = match spawn_bash(command, self.workspace.root(), &self.launcher) {
            Ok(spawned) => spawned,
            Err(e) => return ToolOutput::error(format!("cannot start bash: {e}")),
        };
        let pid = spawned.group.id();
        let state = Arc::new(Mutex::new(JobState {
            unread: HeadTail::new(self.options.output_cap_bytes),
            status: JobStatus::Running,
        }));
        // The reader writes straight into the job's unread buffer.
        let reader = {
            let state = Arc::clone(&state);
            tokio::spawn(pump(spawned.output, move |bytes| {
                lock(&state).unread.push(bytes);
            }))
        };
        let waiter = {
            let state = Arc::clone(&state);
            let mut child = spawned.child;
            tokio::spawn(async move {
                let ending = match child.wait().await {
                    Ok(status) => describe_exit(status),
                    Err(e) => format!("unknown exit status ({e})"),
                };
                let mut state = lock(&state);
                if matches!(state.status, JobStatus::Running) {
                    state.status = JobStatus::Exited(ending);
                }
            })
        };
        jobs.next_id += 1;
        let id = format!("bg{}", jobs.next_id);
        jobs.by_id.insert(
            id.clone(),
            Job {
                command: command.to_string(),
                pid,
                started: Instant::now(),
                group: spawned.group,
                state,
                _reader: AbortOnDrop(reader),
                _waiter: AbortOnDrop(waiter),
            },
        );
        ToolOutput::ok(format!(
            "Started background command {id} (pid {pid}). Use bash_output with id \"{id}\" to read \
             its output and status, and bash_kill to stop it."
        ))
    }

    /// New output of a background command since the last call, and its status.
    fn read_background(&self, id: &str) -> ToolOutput {
        let jobs = lock(&self.jobs);
        let Some(job) = jobs.by_id.get(id) else {
            return unknown_job(id, &jobs);
        };
        let mut state = lock(&job.state);
        let fresh = std::mem::replace(
            &mut state.unread,
            HeadTail::new(self.options.output_cap_bytes),
        );
        let status = match &state.status {
            JobStatus::Running => format!(
                "running (pid {}, for {} s)",
                job.pid,
                job.started.elapsed().as_secs()
            ),
            JobStatus::Exited(ending) => format!("finished ({ending})"),
            JobStatus::Killed => "stopped by bash_kill".to_string(),
        };
        let mut out = format!("Command: {}\nStatus: {status}\n", job.command);
        if fresh.is_empty() {
            out.push_str("(no new output since the last check)");
        } else {
            let _ = write!(out, "New output:\n{}", fresh.render());
        }
        ToolOutput::ok(out)
    }

    /// Kills a background command's whole process group.
    fn kill_background(&self, id: &str) -> ToolOutput {
        let jobs = lock(&self.jobs);
        let Some(job) = jobs.by_id.get(id) else {
            return unknown_job(id, &jobs);
        };
        let mut state = lock(&job.state);
        match &state.status {
            JobStatus::Running => {
                job.group.kill();
                state.status = JobStatus::Killed;
                ToolOutput::ok(format!(
                    "Stopped background command {id} ({}). Output it wrote before stopping can \
                     still be read with bash_output.",
                    job.command
                ))
            }
            JobStatus::Exited(ending) => {
                // Its own children may still run in the group.
                job.group.kill();
                ToolOutput::ok(format!(
                    "Background command {id} had already finished ({ending})."
                ))
            }
            JobStatus::Killed => {
                ToolOutput::ok(format!("Background command {id} was already stopped."))
            }
        }
    }

    fn timeout_from(&self, seconds: Option<u64>) -> Duration {
        seconds
            .map(Duration::from_secs)
            .unwrap_or(self.options.default_timeout)
            .clamp(Duration::from_secs(1), self.options.max_timeout)
    }
}

fn unknown_job(id: &str, jobs: &Jobs) -> ToolOutput {
    let known: Vec<&str> = jobs.by_id.keys().map(String::as_str).collect();
    let hint = if known.is_empty() {
        "no background commands have been started".to_string()
    } else {
        format!("known ids: {}", known.join(", "))
    };
    ToolOutput::error(format!("no background command with id '{id}' ({hint})"))
}

/// The `bash` tool.
#[derive(Debug)]
pub struct BashTool {
    shell: Arc<Shell>,
    description: String,
}

impl BashTool {
    /// bash over `shell`.
    pub fn new(shell: Arc<Shell>) -> Self {
        let options = &shell.options;
        let description = format!(
            "Run a command with `bash -c` in the workspace directory and return its combined \
             stdout and stderr followed by its exit code, e.g. `[exit code 0]`. Commands time out \
             after {default} s by default (set `timeout` in seconds, at most {max}); on timeout \
             the command and everything it started are killed. Output longer than {cap} bytes \
             keeps its beginning and end with a note about what was left out. Processes a command \
             leaves running are stopped when it returns: for servers, watchers and other long \
             jobs set `run_in_background` to true, which returns an id at once; then read new \
             output with bash_output and stop it with bash_kill. stdin is closed, so interactive \
             programs will not work. A few destructive commands (such as `rm -rf /` or `~`, \
             mkfs, dd to a device, shutdown) are refused.",
            default = options.default_timeout.as_secs(),
            max = options.max_timeout.as_secs(),
            cap = options.output_cap_bytes,
        );
        Self { shell, description }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    timeout: Option<u64>,
    #[serde(default)]
    run_in_background: bool,
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The command line to run with bash -c."
                },
                "timeout": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.shell.options.max_timeout.as_secs(),
                    "description": format!(
                        "Seconds before the command is killed. Default {}.",
                        self.shell.options.default_timeout.as_secs()
                    )
                },
                "run_in_background": {
                    "type": "boolean",
                    "description": "Start the command in the background and return an id at once. Default false."
                }
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        let args: BashArgs = match parse_args(self.name(), args) {
            Ok(args) => args,
            Err(output) => return output,
        };
        if args.command.trim().is_empty() {
            return ToolOutput::error("the command is empty");
        }
        if let Some(reason) = deny::check_in(&args.command, self.shell.workspace.root()) {
            return ToolOutput::error(format!(
                "refused: {reason}. This command is on the deny list of destructive commands \
                 (a guard rail against accidents, not a sandbox). If it is really needed, ask the \
                 user to run it themselves."
            ));
        }
        if args.run_in_background {
            return self.shell.start_background(&args.command);
        }
        let timeout = self.shell.timeout_from(args.timeout);
        self.shell.run_foreground(&args.command, timeout).await
    }
}

/// The `bash_output` tool.
#[derive(Debug)]
pub struct BashOutputTool {
    shell: Arc<Shell>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobArgs {
    id: String,
}

fn job_parameters(what: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {
                "type": "string",
                "description": format!("Id of the background command to {what}, as returned by bash (e.g. \"bg1\").")
            }
        },
        "required": ["id"],
        "additionalProperties": false
    })
}

#[async_trait]
impl Tool for BashOutputTool {
    fn name(&self) -> &str {
        "bash_output"
    }

    fn description(&self) -> &str {
        "Read what a background command (started with bash and run_in_background: true) has \
         written since the last bash_output call for it, and its status: running, finished with \
         its exit code, or stopped. Returns immediately; call it again later for more."
    }

    fn parameters(&self) -> Value {
        job_parameters("read")
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        match parse_args::<JobArgs>(self.name(), args) {
            Ok(args) => self.shell.read_background(&args.id),
            Err(output) => output,
        }
    }
}

/// The `bash_kill` tool.
#[derive(Debug)]
pub struct BashKillTool {
    shell: Arc<Shell>,
}

#[async_trait]
impl Tool for BashKillTool {
    fn name(&self) -> &str {
        "bash_kill"
    }

    fn description(&self) -> &str {
        "Stop a background command started with bash and run_in_background: true, together with \
         every process it started. Its remaining output can still be read with bash_output."
    }

    fn parameters(&self) -> Value {
        job_parameters("stop")
    }

    async fn execute(&self, args: Value) -> ToolOutput {
        match parse_args::<JobArgs>(self.name(), args) {
            Ok(args) => self.shell.kill_background(&args.id),
            Err(output) => output,
        }
    }
}
