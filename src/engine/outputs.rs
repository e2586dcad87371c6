//! A recipe's outputs beyond its prefix files: the wheels it publishes into the local index, and
//! the wheels its build dependencies deployed, offered to its own Python build.

use std::path::{Path, PathBuf};

use super::{io_err, BuildError, Engine};
use crate::cache::Artifact;
use crate::deploy::Prefix;
use crate::engine::systems;
use crate::recipe::{BuildSystem, Recipe};

impl Engine<'_> {
    /// The wheels a python-wheel or prebuilt-wheel recipe made, in its installed tree `tree`
    /// (none for other recipes; an error when such a recipe made none).
    pub(super) fn wheels_of(&self, r: &Recipe, tree: &Path) -> Result<Vec<PathBuf>, BuildError> {
        if !matches!(r.build.system, BuildSystem::PythonWheel | BuildSystem::PrebuiltWheel) {
            return Ok(Vec::new());
        }
        let dir = tree.join(systems::WHEEL_DIR);
        let mut wheels: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err("no wheels were produced in", &dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "whl"))
            .collect();
        wheels.sort();
        if wheels.is_empty() {
            return Err(BuildError::Io {
                what: "no wheels were produced in",
                path: dir,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        Ok(wheels)
    }

    /// A prebuilt wheel whose libraries ask for an executable stack (glibc 2.41+ refuses to load
    /// them) is replaced in `tree` by a copy with the request cleared, under a local version
    /// label that says so ([`crate::wheel::execstack`]); the download stays as it was. One
    /// whose request cannot be cleared is kept as it is, with a warning.
    pub(super) fn clear_exec_stacks(&self, r: &Recipe, tree: &Path) -> Result<(), BuildError> {
        if r.build.system != BuildSystem::PrebuiltWheel {
            return Ok(());
        }
        for wheel in self.wheels_of(r, tree)? {
            match crate::wheel::execstack::clear(&wheel) {
                Ok(None) => {}
                Ok(Some(c)) => self.progress.warn(
                    &r.name,
                    &format!(
                        "{} asks for an executable stack in {} librar{} ({}), which glibc 2.41 and later refuse to load: published as {} with the request cleared (the lock file still pins the download)",
                        c.original,
                        c.members.len(),
                        if c.members.len() == 1 { "y" } else { "ies" },
                        c.members.join(", "),
                        c.wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
                    ),
                ),
                Err(e @ crate::wheel::execstack::ExecStackError::Unfixable { .. }) => {
                    self.progress.warn(&r.name, &format!("{e}: published unchanged"))
                }
                Err(e) => {
                    return Err(BuildError::Io {
                        what: "cannot clear the executable-stack request of",
                        path: wheel.clone(),
                        source: std::io::Error::other(e.to_string()),
                    })
                }
            }
        }
        Ok(())
    }

    /// A prebuilt wheel's GPU code, read and recorded in `tree` ([`crate::gpu_code`]); on a
    /// binary stack, a requested target the wheels cannot run (natively or as another target
    /// by a profile's override) stops the recipe before anything is stored. A host library
    /// whose code AMD's packaging moved into `.kpack` archives gets the code of the archives its
    /// marker names in the wheels its build dependencies deployed (torch's, in the device wheels
    /// built for the requested targets).
    ///
    /// `targets`: those the recipe is built for (a per-target device wheel's own), else the
    /// requested ones.
    pub(super) fn record_gpu_code(
        &self,
        r: &Recipe,
        tree: &Path,
        prefix: &Prefix,
        targets: &crate::target::TargetSet,
    ) -> Result<(), BuildError> {
        if r.build.system != BuildSystem::PrebuiltWheel {
            return Ok(());
        }
        let beside: Vec<PathBuf> = self.deployed_dependency_wheels(r, prefix).into_iter().map(|w| w.3).collect();
        let found = crate::gpu_code::read_all(&self.wheels_of(r, tree)?, &beside).map_err(unreadable_wheel(r))?;
        if !found.moved_out.is_empty() {
            // AMD's host libraries without the device wheels of the requested targets: the card
            // would find no code (hipErrorNoBinaryForGpu), with nothing recorded to say so.
            let shown: Vec<&str> =
                found.moved_out.iter().map(|p| p.rsplit_once(".whl!").map(|(_, m)| m).unwrap_or(p)).collect();
            return Err(BuildError::WheelTargets {
                recipe: r.name.clone(),
                why: format!(
                    "the device code of {} was moved into kpack archives (.rocm_kpack_ref), and no wheel of its build dependencies holds one for {}: no device-wheel recipe of stack `{}` is built for {} (their `[targets] supported`, beside {}); build for a target one of them supports",
                    shown.join(", "),
                    targets.comma_list(),
                    self.stack.name,
                    if targets.names().len() == 1 { "it" } else { "them" },
                    self.stack.file
                ),
            });
        }
        let code = found.code;
        if code.is_empty() {
            return Ok(());
        }
        self.progress.message(&r.name, &format!("GPU code: {}", crate::gpu_code::describe(&code)));
        if let Some(why) = crate::gpu_code::refusal(self.stack, &code, targets) {
            return Err(BuildError::WheelTargets { recipe: r.name.clone(), why });
        }
        let dir = tree.join(crate::gpu_code::RECORD_DIR);
        crate::gpu_code::record(tree, &r.name, &code).map_err(io_err("cannot record the GPU code in", &dir))
    }

    /// Before the artifact is stored: the wheels in `tree` may enter the index (a refused wheel
    /// must not sit in the cache and fail every later build at publish).
    pub(super) fn check_wheels(&self, r: &Recipe, tree: &Path) -> Result<(), BuildError> {
        let wheels = self.wheels_of(r, tree)?;
        if !wheels.is_empty() {
            crate::index::check_publishable(&crate::index::stack_dir(&self.cfg.index_dir(), self.stack), &wheels)
                .map_err(|e| BuildError::Publish { recipe: r.name.clone(), source: e })?;
        }
        Ok(())
    }

    /// Publishes the wheels of a python-wheel or prebuilt-wheel artifact into the local index
    /// (all or none; the same bytes again are a no-op).
    pub(super) fn publish_wheels(&self, r: &Recipe, a: &Artifact) -> Result<(), BuildError> {
        let wheels = self.wheels_of(r, &a.tree())?;
        if wheels.is_empty() {
            return Ok(());
        }
        let index = crate::index::stack_dir(&self.cfg.index_dir(), self.stack);
        let reports = crate::index::publish_all(&index, &wheels)
            .map_err(|e| BuildError::Publish { recipe: r.name.clone(), source: e })?;
        for rep in reports {
            if rep.outcome == crate::index::PublishOutcome::Repaired {
                self.progress.warn(
                    &r.name,
                    &format!(
                        "published wheel `{}` was altered on disk in the index (sha256 {}, published as {}): replaced with the artifact's copy",
                        index.join("simple").join(&rep.project).join(&rep.filename).display(),
                        rep.found_sha256.as_deref().unwrap_or("?"),
                        rep.sha256
                    ),
                );
                continue;
            }
            let what = match rep.outcome {
                crate::index::PublishOutcome::Published => "published",
                _ => "already in the index",
            };
            self.progress.message(&r.name, &format!("{what}: {}", rep.filename));
        }
        Ok(())
    }

    /// The wheels the recipe's build dependencies (transitively) deployed into the prefix (a
    /// dependency skipped for the targets deployed none): (recipe, project, file name, path).
    fn deployed_dependency_wheels(&self, r: &Recipe, prefix: &Prefix) -> Vec<(String, String, String, PathBuf)> {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo: Vec<&str> = r.build_deps.iter().map(String::as_str).collect();
        let mut wheels: Vec<(String, String, String, PathBuf)> = Vec::new();
        while let Some(dep) = todo.pop() {
            if !seen.insert(dep) {
                continue;
            }
            let Some(dr) = self.stack.recipes.get(dep) else { continue };
            todo.extend(dr.build_deps.iter().map(String::as_str));
            for f in prefix.manifest(dep).map(|m| m.files).unwrap_or_default() {
                let Some(file) = f.strip_prefix(&format!("{}/", systems::WHEEL_DIR)).filter(|n| !n.contains('/'))
                else {
                    continue;
                };
                if let Ok(w) = crate::index::WheelName::parse(file) {
                    wheels.push((dep.to_string(), w.project(), file.to_string(), prefix.root.join(&f)));
                }
            }
        }
        wheels.sort();
        wheels
    }

    /// The wheels the recipe's build dependencies (transitively) deployed into the prefix, laid
    /// out as links in `dir` (recreated) for pip's `--find-links`, and the files among them that
    /// `install-wheels` names. `(None, [])` when no dependency deployed a wheel.
    pub(super) fn dependency_wheels(
        &self,
        r: &Recipe,
        prefix: &Prefix,
        dir: &Path,
    ) -> Result<(Option<PathBuf>, Vec<PathBuf>), BuildError> {
        let wheels = self.deployed_dependency_wheels(r, prefix);
        for req in &r.build.requirements {
            let name: String = req
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            let project = crate::index::normalize_name(&name);
            if let Some((dep, _, file, _)) = wheels.iter().find(|w| w.1 == project) {
                return Err(BuildError::RequirementIsDependencyWheel {
                    recipe: r.name.clone(),
                    requirement: req.clone(),
                    project: name,
                    dep: dep.clone(),
                    file: file.clone(),
                });
            }
        }
        let mut install = Vec::new();
        for name in &r.build.install_wheels {
            let project = crate::index::normalize_name(name);
            let found: Vec<&(String, String, String, PathBuf)> = wheels.iter().filter(|w| w.1 == project).collect();
            match found.as_slice() {
                [one] => install.push(dir.join(&one.2)),
                [] => {
                    let available = if wheels.is_empty() {
                        "its dependencies deployed no wheels".to_string()
                    } else {
                        format!(
                            "wheels of its dependencies: {}",
                            wheels.iter().map(|w| format!("{} from {}", w.2, w.0)).collect::<Vec<_>>().join(", ")
                        )
                    };
                    return Err(BuildError::NoDependencyWheel {
                        recipe: r.name.clone(),
                        name: name.clone(),
                        available,
                    });
                }
                many => {
                    return Err(BuildError::AmbiguousDependencyWheel {
                        recipe: r.name.clone(),
                        name: name.clone(),
                        wheels: many.iter().map(|w| format!("{} from {}", w.2, w.0)).collect(),
                    })
                }
            }
        }
        crate::fsutil::remove_dir_all_if_exists(dir).map_err(io_err("cannot clean", dir))?;
        if wheels.is_empty() {
            return Ok((None, install));
        }
        std::fs::create_dir_all(dir).map_err(io_err("cannot create", dir))?;
        for (_, _, file, path) in &wheels {
            let link = dir.join(file);
            std::os::unix::fs::symlink(path, &link).map_err(io_err("cannot link a dependency's wheel at", &link))?;
        }
        Ok((Some(dir.to_path_buf()), install))
    }
}

fn unreadable_wheel(r: &Recipe) -> impl Fn(crate::offload::OffloadError) -> BuildError + '_ {
    move |e| BuildError::WheelTargets { recipe: r.name.clone(), why: format!("its GPU code cannot be read: {e}") }
}
