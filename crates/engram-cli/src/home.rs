//! ENGRAM_HOME: the one directory that holds all of engram's state.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};

/// The resolved home directory.
#[derive(Debug, Clone)]
pub struct Home {
    dir: PathBuf,
}

impl Home {
    /// `--home` / ENGRAM_HOME if given, else `~/.engram`.
    pub fn resolve(flag: Option<PathBuf>) -> Result<Self> {
        let dir = match flag {
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err(crate::exit::usage("--home / ENGRAM_HOME is empty"));
            }
            Some(dir) => dir,
            None => dirs::home_dir()
                .ok_or_else(|| {
                    anyhow!("cannot find your home directory; set ENGRAM_HOME or pass --home DIR")
                })?
                .join(".engram"),
        };
        Ok(Self { dir })
    }

    /// Creates the directory if needed.
    pub fn ensure(&self) -> Result<()> {
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(anyhow!(
                "ENGRAM_HOME {} exists but is not a directory",
                self.dir.display()
            ));
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create ENGRAM_HOME at {}", self.dir.display()))
    }

    /// The directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}
