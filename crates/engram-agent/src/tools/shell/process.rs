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

/// Starts `bash -c command` in `cwd`, in a new process group, stdin closed, stdout and stderr
/// going to one pipe.
pub(crate) fn spawn_bash(command: &str, cwd: &Path) -> io::Result<Spawned> {
    let (reader, writer) = io::pipe()?;
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(command)
        .current_dir(cwd)
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
