//! Exit statuses scripts can rely on, and how errors map to them.

use engram_core::StoreError;

/// The statuses `engram` exits with (also listed in `engram --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Everything worked.
    Success = 0,
    /// Storage, I/O or another failure.
    Failure = 1,
    /// Bad usage or invalid input.
    Usage = 2,
    /// No such memory.
    NotFound = 3,
    /// The change conflicts with what is stored (duplicate text, already invalidated).
    Conflict = 4,
    /// The command finished, but some input lines were rejected.
    Partial = 5,
    /// The agent used all its steps without giving an answer (`engram run`).
    StepLimit = 6,
    /// Interrupted by the user (Ctrl-C / SIGINT), as shells report it.
    Interrupted = 130,
}

impl From<Status> for std::process::ExitCode {
    fn from(status: Status) -> Self {
        std::process::ExitCode::from(status as u8)
    }
}

/// An error that carries its own exit status.
#[derive(Debug)]
pub struct Failure {
    /// The status to exit with.
    pub status: Status,
    /// What went wrong, in one line.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// An invalid-input error (exit status 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Failure {
        status: Status::Usage,
        message: message.into(),
    }
    .into()
}

/// The status an error should exit with.
pub fn code_for(err: &anyhow::Error) -> Status {
    for cause in err.chain() {
        if let Some(failure) = cause.downcast_ref::<Failure>() {
            return failure.status;
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return store_status(store);
        }
        if let Some(engram_memory::SearchError::Store(store)) =
            cause.downcast_ref::<engram_memory::SearchError>()
        {
            return store_status(store);
        }
    }
    Status::Failure
}

fn store_status(error: &StoreError) -> Status {
    match error {
        StoreError::NotFound(_) => Status::NotFound,
        StoreError::Invalid(_) | StoreError::BadQuery(_) => Status::Usage,
        StoreError::Duplicate(_) | StoreError::AlreadyClosed(_) => Status::Conflict,
        _ => Status::Failure,
    }
}
