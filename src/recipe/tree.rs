//! Where recipes come from: the tree embedded in the binary, or a directory given with
//! `--recipes DIR` / `ROCMFORGE_RECIPES` holding `recipes/` and `patches/` side by side.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir};

static EMBEDDED_RECIPES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/recipes");
static EMBEDDED_PATCHES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/patches");

/// What running a check by hand leaves in a recipe tree (Python's bytecode cache) and no recipe
/// is made of: never read, so never part of a key (a stray `__pycache__` would otherwise re-key
/// the recipe whose check it sits in, and everything built after it).
fn is_build_output(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "__pycache__") || path.extension().is_some_and(|e| e == "pyc" || e == "pyo")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Embedded,
    Dir(PathBuf),
}

/// All files of a recipe tree, by path relative to the tree root (`recipes/<stack>/x.toml`,
/// `patches/<stack>/<recipe>/0001-x.patch`). Recipe trees are small, so they are read once.
#[derive(Debug, Clone)]
pub struct RecipeTree {
    pub origin: Origin,
    /// Borrowed from the binary for the embedded tree (a no-op build copies none of it).
    files: BTreeMap<String, Cow<'static, [u8]>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("recipe tree `{0}` has no `recipes/` folder: point --recipes (or ROCMFORGE_RECIPES) at a directory holding `recipes/` and `patches/` side by side")]
    NoRecipes(PathBuf),
    #[error("cannot read `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("`{path}` is a symbolic link to `{target}`, which does not exist: point it at a file, or remove it")]
    DanglingLink { path: PathBuf, target: PathBuf },
}

impl RecipeTree {
    pub fn embedded() -> RecipeTree {
        let mut files = BTreeMap::new();
        fn walk(dir: &Dir<'static>, prefix: &str, out: &mut BTreeMap<String, Cow<'static, [u8]>>) {
            for f in dir.files().filter(|f| !is_build_output(f.path())) {
                out.insert(format!("{prefix}/{}", f.path().display()), Cow::Borrowed(f.contents()));
            }
            for d in dir.dirs().filter(|d| !is_build_output(d.path())) {
                walk(d, prefix, out);
            }
        }
        walk(&EMBEDDED_RECIPES, "recipes", &mut files);
        walk(&EMBEDDED_PATCHES, "patches", &mut files);
        RecipeTree { origin: Origin::Embedded, files }
    }

    pub fn from_dir(root: &Path) -> Result<RecipeTree, TreeError> {
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        if !root.join("recipes").is_dir() {
            return Err(TreeError::NoRecipes(root));
        }
        let mut files = BTreeMap::new();
        for top in ["recipes", "patches"] {
            let base = root.join(top);
            if !base.is_dir() {
                continue;
            }
            // Links are followed (a linked recipe is a recipe); one that leads nowhere is an
            // error naming it, not a recipe skipped unsaid, but for an editor's lock link
            // (Emacs' `.#x.toml`), which leads nowhere by design.
            let walk = walkdir::WalkDir::new(&base).follow_links(true).sort_by_file_name();
            for entry in walk.into_iter().filter_entry(|e| !is_build_output(e.path())) {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        let path = e.path().map(Path::to_path_buf).unwrap_or_else(|| base.clone());
                        match std::fs::read_link(&path) {
                            Ok(_) if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".#")) => {
                                continue
                            }
                            Ok(target) if !path.exists() => return Err(TreeError::DanglingLink { path, target }),
                            _ => {
                                return Err(TreeError::Read {
                                    path,
                                    source: e.into_io_error().unwrap_or_else(|| std::io::Error::other("walk failed")),
                                })
                            }
                        }
                    }
                };
                if !entry.file_type().is_file() {
                    continue;
                }
                let rel = entry.path().strip_prefix(&root).expect("walk stays under root");
                let bytes = std::fs::read(entry.path())
                    .map_err(|source| TreeError::Read { path: entry.path().to_path_buf(), source })?;
                files.insert(rel.to_string_lossy().replace('\\', "/"), Cow::Owned(bytes));
            }
        }
        Ok(RecipeTree { origin: Origin::Dir(root), files })
    }

    /// For tests and tools: a tree from in-memory files.
    pub fn from_files(origin: Origin, files: BTreeMap<String, Vec<u8>>) -> RecipeTree {
        RecipeTree { origin, files: files.into_iter().map(|(k, v)| (k, Cow::Owned(v))).collect() }
    }

    /// How a user should read the path of `rel` in messages.
    pub fn display_path(&self, rel: &str) -> String {
        match &self.origin {
            Origin::Embedded => format!("<embedded>/{rel}"),
            Origin::Dir(root) => root.join(rel).display().to_string(),
        }
    }

    /// The on-disk root, if the tree is a directory (the lock file lives beside it).
    pub fn root(&self) -> Option<&Path> {
        match &self.origin {
            Origin::Embedded => None,
            Origin::Dir(p) => Some(p),
        }
    }

    pub fn get(&self, rel: &str) -> Option<&[u8]> {
        self.files.get(rel).map(|v| v.as_ref())
    }

    pub fn contains(&self, rel: &str) -> bool {
        self.files.contains_key(rel)
    }

    /// Stack folder names: every `recipes/<stack>/` that holds a file, but the shared checks
    /// (`recipes/checks/`).
    pub fn stack_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix("recipes/"))
            .filter_map(|k| k.split_once('/').map(|(s, _)| s.to_string()))
            .filter(|s| s != super::proofs::SHARED_CHECKS)
            .collect();
        names.dedup();
        names
    }

    /// `(relative path, text)` of every `.toml` directly in `recipes/<stack>/`.
    pub fn stack_files(&self, stack: &str) -> Vec<(&str, &[u8])> {
        let prefix = format!("recipes/{stack}/");
        self.files
            .iter()
            .filter(|(k, _)| k.strip_prefix(&prefix).is_some_and(|rest| !rest.contains('/') && rest.ends_with(".toml")))
            .map(|(k, v)| (k.as_str(), v.as_ref()))
            .collect()
    }

    /// Every file below the folder `dir` (`recipes/checks/x/`), as (path relative to
    /// it, content).
    pub fn files_under<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        self.files.iter().filter_map(move |(k, v)| Some((k.strip_prefix(dir)?, v.as_ref())))
    }

    /// Patch files in `patches/<stack>/<recipe>/` that the recipe's series does not name (a
    /// patch someone meant to apply, forgotten in the series), as display paths.
    pub fn unlisted_patches(&self, stack: &str, recipe: &str, series: &[String]) -> Vec<String> {
        let dir = format!("patches/{stack}/{recipe}/");
        self.files
            .keys()
            .filter_map(|k| Some((k, k.strip_prefix(&dir)?)))
            .filter(|(_, name)| !name.contains('/') && (name.ends_with(".patch") || name.ends_with(".diff")))
            .filter(|(_, name)| !series.iter().any(|s| s == name))
            .map(|(k, _)| self.display_path(k))
            .collect()
    }
}
