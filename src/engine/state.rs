//! Per-recipe build state in its work dir: which key the dir was built for, which steps are
//! finished (recorded atomically after each), and whether the artifact is stored.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkState {
    pub key: String,
    pub steps_done: Vec<String>,
    pub stored: bool,
}

/// A recipe's work dir: `src/` (the patched tree), `build/`, `stage/`, `steps/`, `logs/`.
#[derive(Debug, Clone)]
pub struct WorkDir {
    pub root: PathBuf,
}

impl WorkDir {
    pub fn new(work_dir: &Path, stack: &str, recipe: &str) -> WorkDir {
        WorkDir { root: work_dir.join(stack).join(recipe) }
    }
    pub fn src(&self) -> PathBuf {
        self.root.join("src")
    }
    pub fn build(&self) -> PathBuf {
        self.root.join("build")
    }
    pub fn stage(&self) -> PathBuf {
        self.root.join("stage")
    }
    pub fn steps(&self) -> PathBuf {
        self.root.join("steps")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }

    pub fn state(&self) -> Option<WorkState> {
        serde_json::from_slice(&fs::read(self.state_file()).ok()?).ok()
    }

    pub fn save(&self, s: &WorkState) -> std::io::Result<()> {
        fsutil::write_atomic(&self.state_file(), &serde_json::to_vec_pretty(s).expect("serialises"))
    }

    /// Makes the dir ready for `key`: a dir built for another key is wiped (its build dir would
    /// mix old and new inputs); a dir for the same key is kept, so ninja continues where it was.
    pub fn begin(&self, key: &str) -> std::io::Result<WorkState> {
        match self.state() {
            Some(s) if s.key == key => Ok(s),
            _ => {
                for d in [self.build(), self.stage(), self.steps(), self.logs()] {
                    fsutil::remove_dir_all_if_exists(&d)?;
                }
                fs::create_dir_all(&self.root)?;
                let s = WorkState { key: key.to_string(), ..Default::default() };
                self.save(&s)?;
                Ok(s)
            }
        }
    }
}
