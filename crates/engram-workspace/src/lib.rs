//! The agent's workspace: the folder its file and shell tools work in and where its own files
//! live (the bootstrap files such as `AGENTS.md`, `memory/MEMORY.md` and the daily notes, skills,
//! `HEARTBEAT.md`, the notes file, logs), and the one rule that keeps every path engram uses
//! there inside it: [`Workspace::resolve`].
//!
//! A path is resolved the way the kernel would resolve it: component by component, following
//! every symbolic link (also dangling ones and ones in the not-yet-existing part of the path),
//! with `..` applied to the physical directory it lands in. Only the final, symlink-free path is
//! compared with the workspace root, by whole components (so `/ws-evil` is not inside `/ws`). So
//! a `memory/` folder or an `AGENTS.md` that is a symbolic link to somewhere outside is refused,
//! for reading, writing and removing alike. This is a guard against mistakes and planted links,
//! not a security boundary against a process racing it: a link swapped in between the check and
//! the use, or a shell command, can still reach outside.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed while resolving one path before calling it a loop (Linux uses 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// The directory tools work in, and whether they may leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
    confined: bool,
}

/// Why a directory cannot serve as the workspace.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The directory does not exist or cannot be read.
    #[error("the workspace directory {} cannot be used: {source}", path.display())]
    Unusable {
        /// The directory given.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The path names a file, not a directory.
    #[error("the workspace {} is not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
}

/// Why a path given to a tool was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// No path was given.
    #[error("the path is empty; give a path relative to the workspace {}", root.display())]
    Empty {
        /// The workspace root.
        root: PathBuf,
    },
    /// The path leads outside the workspace.
    #[error(
        "the path '{given}' resolves to {}{}, which is outside the workspace {}; only paths inside the workspace may be used",
        resolved.display(),
        if *through_symlink { " (through a symbolic link)" } else { "" },
        root.display()
    )]
    Outside {
        /// The path as the model wrote it.
        given: String,
        /// Where it really leads.
        resolved: PathBuf,
        /// The workspace root.
        root: PathBuf,
        /// Whether a symbolic link took it there.
        through_symlink: bool,
    },
    /// Following symbolic links did not end.
    #[error(
        "the path '{given}' cannot be resolved: too many levels of symbolic links (a symlink loop?)"
    )]
    SymlinkLoop {
        /// The path as the model wrote it.
        given: String,
    },
    /// The file system refused to tell where the path leads.
    #[error("the path '{given}' cannot be resolved: {source}")]
    Io {
        /// The path as the model wrote it.
        given: String,
        /// What the system said.
        source: io::Error,
    },
}

impl Workspace {
    /// A workspace at `root` (an existing directory) that tools may not leave.
    pub fn confined(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        Self::open(root.as_ref(), true)
    }

    /// A workspace at `root` whose tools may use any path (relative paths still start at `root`).
    /// Only for users who ask for it.
    pub fn unconfined(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        Self::open(root.as_ref(), false)
    }

    fn open(root: &Path, confined: bool) -> Result<Self, WorkspaceError> {
        let canonical = std::fs::canonicalize(root).map_err(|source| WorkspaceError::Unusable {
            path: root.to_path_buf(),
            source,
        })?;
        if !canonical.is_dir() {
            return Err(WorkspaceError::NotADirectory {
                path: root.to_path_buf(),
            });
        }
        Ok(Self {
            root: canonical,
            confined,
        })
    }

    /// The workspace directory (canonical: absolute, without symbolic links).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether tools are kept inside the workspace.
    pub fn is_confined(&self) -> bool {
        self.confined
    }

    /// Where `given` (relative to the workspace, or absolute) really leads, with every symbolic
    /// link resolved; refused when confined and the result is outside the workspace. The path
    /// need not exist yet.
    pub fn resolve(&self, given: &str) -> Result<PathBuf, PathError> {
        if given.trim().is_empty() {
            return Err(PathError::Empty {
                root: self.root.clone(),
            });
        }
        let requested = self.root.join(given);
        let (resolved, through_symlink) = resolve_physically(&requested).map_err(|e| match e {
            ResolveError::Loop => PathError::SymlinkLoop {
                given: given.to_string(),
            },
            ResolveError::Io(source) => PathError::Io {
                given: given.to_string(),
                source,
            },
        })?;
        // `starts_with` compares whole components: /ws-evil does not start with /ws.
        if self.confined && !resolved.starts_with(&self.root) {
            return Err(PathError::Outside {
                given: given.to_string(),
                resolved,
                root: self.root.clone(),
                through_symlink,
            });
        }
        Ok(resolved)
    }

    /// A resolved path as tools show it: relative to the workspace when inside, else absolute.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_string(),
            Ok(relative) => relative.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

enum ResolveError {
    Loop,
    Io(io::Error),
}

/// Resolves an absolute path like the kernel does, but also through parts that do not exist
/// yet. Returns the symlink-free path and whether any symbolic link was followed.
fn resolve_physically(path: &Path) -> Result<(PathBuf, bool), ResolveError> {
    let mut pending: VecDeque<OsString> = VecDeque::new();
    let mut resolved = PathBuf::from("/");
    push_components(&mut pending, &mut resolved, path);
    let mut hops = 0usize;

    while let Some(part) = pending.pop_front() {
        if part == ".." {
            // `resolved` never contains a symlink, so its parent is the physical parent.
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(ResolveError::Loop);
                }
                let target = std::fs::read_link(&candidate).map_err(ResolveError::Io)?;
                // The target's parts come before whatever was left of the path.
                let rest: Vec<OsString> = pending.drain(..).collect();
                push_components(&mut pending, &mut resolved, &target);
                pending.extend(rest);
            }
            Ok(_) => resolved = candidate,
            // Not there (yet), or a parent is a file: nothing on disk can redirect the rest.
            Err(e) if is_missing(&e) => resolved = candidate,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(ResolveError::Loop);
            }
            Err(e) => return Err(ResolveError::Io(e)),
        }
    }
    Ok((resolved, hops > 0))
}

/// Queues the parts of `path`; an absolute path restarts `resolved` at `/`.
fn push_components(pending: &mut VecDeque<OsString>, resolved: &mut PathBuf, path: &Path) {
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                pending.clear();
                *resolved = PathBuf::from("/");
            }
            Component::CurDir => {}
            Component::ParentDir => pending.push_back(OsString::from("..")),
            Component::Normal(name) => pending.push_back(name.to_os_string()),
        }
    }
}

fn is_missing(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.kind() == io::ErrorKind::NotADirectory
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        base: PathBuf,
        workspace: Workspace,
    }

    /// base/ws (the workspace) with a subdirectory, links in and out, and base/outside.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        symlink(base.join("outside"), ws.join("link_out")).unwrap();
        symlink("sub", ws.join("link_in")).unwrap();
        let workspace = Workspace::confined(&ws).unwrap();
        Fixture {
            _dir: dir,
            base,
            workspace,
        }
    }

    #[test]
    fn inside_paths_resolve_whether_or_not_they_exist() {
        let f = fixture();
        let root = f.workspace.root().to_path_buf();
        assert_eq!(f.workspace.resolve("sub").unwrap(), root.join("sub"));
        assert_eq!(
            f.workspace.resolve("./sub/../sub/new/x.txt").unwrap(),
            root.join("sub/new/x.txt")
        );
        assert_eq!(
            f.workspace.resolve("link_in/a").unwrap(),
            root.join("sub/a")
        );
        assert_eq!(f.workspace.resolve(".").unwrap(), root);
        let absolute = root.join("sub/y").display().to_string();
        assert_eq!(f.workspace.resolve(&absolute).unwrap(), root.join("sub/y"));
    }

    #[test]
    fn resolving_the_link_then_going_up_uses_the_physical_parent() {
        let f = fixture();
        // link_out/.. is base (the parent of outside), not the workspace.
        let err = f.workspace.resolve("link_out/../ws/sub").unwrap();
        assert_eq!(err, f.workspace.root().join("sub"));
        assert!(matches!(
            f.workspace.resolve("link_out/.."),
            Err(PathError::Outside { .. })
        ));
    }

    #[test]
    fn escapes_are_refused_with_the_reason() {
        let f = fixture();
        let err = f.workspace.resolve("../outside/x").unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        let err = f.workspace.resolve("link_out/x").unwrap_err();
        assert!(
            err.to_string().contains("(through a symbolic link)"),
            "{err}"
        );
        assert!(f.workspace.resolve("/etc/passwd").is_err());
        let sibling = f.base.join("ws-evil/x").display().to_string();
        assert!(matches!(
            f.workspace.resolve(&sibling),
            Err(PathError::Outside { .. })
        ));
        assert!(matches!(
            f.workspace.resolve("  "),
            Err(PathError::Empty { .. })
        ));
    }

    #[test]
    fn unconfined_workspaces_allow_any_path() {
        let f = fixture();
        let open = Workspace::unconfined(f.workspace.root()).unwrap();
        assert!(!open.is_confined());
        assert_eq!(
            open.resolve("../outside/x").unwrap(),
            f.base.join("outside/x")
        );
    }

    #[test]
    fn workspace_must_be_an_existing_directory() {
        let f = fixture();
        assert!(matches!(
            Workspace::confined(f.base.join("nope")),
            Err(WorkspaceError::Unusable { .. })
        ));
        std::fs::write(f.base.join("file"), "x").unwrap();
        assert!(matches!(
            Workspace::confined(f.base.join("file")),
            Err(WorkspaceError::NotADirectory { .. })
        ));
    }

    #[test]
    fn display_is_relative_inside() {
        let f = fixture();
        let root = f.workspace.root();
        assert_eq!(f.workspace.display(&root.join("sub/a")), "sub/a");
        assert_eq!(f.workspace.display(root), ".");
        assert_eq!(f.workspace.display(Path::new("/etc")), "/etc");
    }

    proptest! {
        // Whatever mix of names, `.`, `..` and links the model writes, an accepted path is
        // inside the workspace and free of symbolic links.
        #[test]
        fn accepted_paths_stay_inside(parts in prop::collection::vec(
            prop_oneof![
                Just("sub"), Just("new"), Just(".."), Just("."), Just("link_out"), Just("link_in"), Just("ws")
            ], 1..8)
        ) {
            let f = fixture();
            let given = parts.join("/");
            if let Ok(resolved) = f.workspace.resolve(&given) {
                prop_assert!(resolved.starts_with(f.workspace.root()), "{given} -> {resolved:?}");
                let mut prefix = PathBuf::new();
                for component in resolved.components() {
                    prefix.push(component);
                    if let Ok(meta) = std::fs::symlink_metadata(&prefix) {
                        prop_assert!(!meta.file_type().is_symlink(), "{given} -> {resolved:?}");
                    }
                }
            }
        }
    }
}
