//! What was built last: for each recipe of a stack, the cache-key inputs of the artifact it last
//! built or used (`layout::last_build_file`). The plan compares them with today's inputs to say
//! why a recipe rebuilds; `cache gc --unused` keeps the artifacts they name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::key::KeyInputs;
use crate::layout;

pub struct History {
    state_dir: PathBuf,
    stack: String,
}

impl History {
    pub fn new(state_dir: &Path, stack: &str) -> History {
        History { state_dir: state_dir.to_path_buf(), stack: stack.to_string() }
    }

    fn file(&self, recipe: &str) -> PathBuf {
        layout::last_build_file(&self.state_dir, &self.stack, recipe)
    }

    /// Inputs of the last artifact built or used for `recipe`.
    pub fn last(&self, recipe: &str) -> Option<KeyInputs> {
        serde_json::from_slice(&std::fs::read(self.file(recipe)).ok()?).ok()
    }

    /// Records `inputs` as the recipe's last build (no write when unchanged: a no-op build
    /// writes nothing). Returns the file on failure, for the error message.
    pub fn record(&self, inputs: &KeyInputs) -> Result<(), (PathBuf, std::io::Error)> {
        let p = self.file(&inputs.recipe);
        let json = serde_json::to_vec_pretty(inputs).expect("inputs serialise");
        crate::fsutil::write_if_changed(&p, &json).map(drop).map_err(|e| (p, e))
    }
}

/// The keys every recipe of every stack last built or used.
pub fn keys_in_use(state_dir: &Path) -> BTreeSet<String> {
    walkdir::WalkDir::new(layout::last_build_root(state_dir))
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| serde_json::from_slice::<KeyInputs>(&std::fs::read(e.path()).ok()?).ok())
        .map(|i| i.key().to_string())
        .collect()
}
