//! Starting `bash -c` in its own process group, capturing its output, and killing the whole
//! group (grandchildren included) when we are done with it.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

/// A process group we started; dropping it kills every process still in it.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: Pid,
}

impl ProcessGroup {
    /// The id of the group (the pid of the shell that leads it).
    pub(crate) fn id(&self) -> i32 {
        self.pgid.as_raw_nonzero().get()
    }

    /// Sends SIGKILL to every process in the group. A group that is already gone is fine.
    pub(crate) fn kill(&self) {
        // ESRCH (nothing left to kill) is the normal case once the command has finished.
        let _ = kill_process_group(self.pgid, Signal::KILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // The group id is the shell's pid. While any member lives, the id cannot be reused;
        // once all are gone, the kernel could in theory hand it to a new group, which is why
        // callers kill as soon as they are done rather than leaving it to a late drop.
        self.kill();
    }
}

/// A running `bash -c`, its process group, and the read end of its combined output.
pub(crate) struct Spawned {
    /// The shell itself; killed if dropped while running.
    pub(crate) child: Child,
    /// Every process the command starts (unless it deliberately leaves the group).
    pub(crate) group: ProcessGroup,
    /// stdout and stderr, interleaved as written.
    pub(crate) output: pipe::Receiver,
}

/// Environment variables every command gets from engram's own environment: where programs
/// and the user's files are, the locale, the terminal, temporary folders, and the usual
/// toolchain homes. Nothing else: API keys, tokens and passwords in engram's environment (the
/// model's key above all) never reach a command unless the user names them in
/// `[agent] shell_env`.
pub const SAFE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "EDITOR",
    "VISUAL",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOBIN",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYENV_ROOT",
    "NVM_DIR",
    "NODE_PATH",
    "PYTHONPATH",
];

/// Whether a variable of engram's environment goes to commands: [`SAFE_ENV`], the locale's
/// `LC_*`, and the names the user passes.
pub(crate) fn passes(name: &str, extra: &[String]) -> bool {
    SAFE_ENV.contains(&name) || name.starts_with("LC_") || extra.iter().any(|e| e == name)
}

/// Limits every command and its children run under (`setrlimit`, hard and soft, applied by the
/// shell before the command starts): a guard against runaway commands, not a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellLimits {
    /// Processes (threads, as Linux counts them) the user may have, added to those the user
    /// already has when the shell is set up (`ulimit -u`): a fork bomb stops there.
    pub extra_processes: u64,
    /// The largest file a command may write, in bytes (`ulimit -f`).
    pub max_file_bytes: u64,
    /// Memory (the data segment, heap and private mappings) a process may use, in bytes
    /// (`ulimit -d`); `None`: three quarters of the machine's memory.
    pub max_memory_bytes: Option<u64>,
}

impl Default for ShellLimits {
    fn default() -> Self {
        Self {
            extra_processes: 4096,
            max_file_bytes: 8 << 30,
            max_memory_bytes: None,
        }
    }
}

/// How commands are started: their environment and limits, worked out once per shell.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    /// The environment commands get (nothing else is inherited).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// `ulimit` settings run before the command, as one shell line.
    ulimits: String,
}

impl Launcher {
    /// The environment from engram's own, filtered; the limits from `limits` and the machine.
    pub(crate) fn new(pass_env: &[String], limits: &ShellLimits) -> Self {
        let env = std::env::vars_os()
            .filter(|(name, _)| name.to_str().is_some_and(|n| passes(n, pass_env)))
            .collect();
        Self {
            env,
            ulimits: ulimit_line(limits),
        }
    }
}

/// `ulimit -H -S` for each limit (hard too, so a command cannot raise it again), each value no
/// higher than what engram itself may use (lowering always works). A limit the system refuses
/// is reported in the command's output and the command still runs.
fn ulimit_line(limits: &ShellLimits) -> String {
    use rustix::process::{Resource, getrlimit};
    let cap = |resource: Resource, wanted: u64| -> u64 {
        getrlimit(resource)
            .maximum
            .map_or(wanted, |hard| hard.min(wanted))
    };
    let processes = cap(
        Resource::Nproc,
        user_tasks().saturating_add(limits.extra_processes),
    );
    let memory = limits
        .max_memory_bytes
        .or_else(|| physical_memory().map(|total| total / 4 * 3));
    // bash counts file sizes and memory in KiB.
    let mut line = format!(
        "ulimit -H -S -u {processes}; ulimit -H -S -f {}; ulimit -H -S -c 0",
        cap(Resource::Fsize, limits.max_file_bytes) / 1024
    );
    if let Some(memory) = memory {
        line.push_str(&format!(
            "; ulimit -H -S -d {}",
            cap(Resource::Data, memory) / 1024
        ));
    }
    line
}

/// Tasks (processes and their threads) of this user now, from /proc; 0 when unknown.
fn user_tasks() -> u64 {
    let uid = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0u64;
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            tasks += field("Threads:").unwrap_or(1);
        }
    }
    tasks
}

/// The machine's memory in bytes, from /proc/meminfo.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Starts `command` with bash in `cwd`, in a new process group, stdin closed, stdout and stderr
/// going to one pipe, with the launcher's environment (and nothing else) and limits. The
/// limits are set by a first bash that then becomes `bash -c command` (exec), so the command
/// starts already limited and runs exactly as `bash -c` would run it.
pub(crate) fn spawn_bash(command: &str, cwd: &Path, launcher: &Launcher) -> io::Result<Spawned> {
    let (reader, writer) = io::pipe()?;
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(format!("{}; exec bash -c \"$1\"", launcher.ulimits))
        .arg("engram-shell")
        .arg(command)
        .current_dir(cwd)
        .env_clear()
        .envs(launcher.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        // Pagers and prompts would wait forever on a closed stdin.
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .process_group(0)
        .kill_on_drop(true);
    let child = bash.spawn()?;
    // The Command holds our copies of the write end; drop them so the reader sees end-of-file
    // once the command's processes are gone.
    drop(bash);
    let raw_pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("the shell exited before its process id was known"))?;
    let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
    Ok(Spawned {
        child,
        group: ProcessGroup { pgid: raw_pid },
        output,
    })
}

/// Hands everything read from `output` to `sink`, chunk by chunk, until end-of-file.
pub(crate) async fn pump(mut output: pipe::Receiver, mut sink: impl FnMut(&[u8])) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match output.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => sink(&chunk[..read]),
        }
    }
}

/// Locks a mutex, recovering the data if a thread panicked while holding it (the buffer stays
/// usable; at worst it misses a chunk).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a command ended, in words: `exit code 0`, `killed by signal 9`.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "unknown exit status".to_string(),
    }
}
