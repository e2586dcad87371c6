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
        if !r.build.system.makes_wheels() {
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
    /// must not sit in the cache and fail every later build at publish), and those the stack
    /// builds close over their libraries ([`crate::wheel::closure`]) with the wheels they are
    /// installed with (those of the recipe's build dependencies), in a stack that publishes its
    /// libraries as runtime wheels ([`crate::recipe::Stack::has_runtime_wheels`]).
    pub(super) fn check_wheels(&self, r: &Recipe, tree: &Path, prefix: &Prefix) -> Result<(), BuildError> {
        let wheels = self.wheels_of(r, tree)?;
        if !wheels.is_empty() {
            crate::index::check_publishable(&crate::index::stack_dir(&self.cfg.index_dir(), self.stack), &wheels)
                .map_err(|e| BuildError::Publish { recipe: r.name.clone(), source: e })?;
        }
        if matches!(r.build.system, BuildSystem::PythonWheel | BuildSystem::RuntimeWheel)
            && self.stack.has_runtime_wheels()
        {
            let beside: Vec<PathBuf> = self.deployed_dependency_wheels(r, prefix).into_iter().map(|w| w.3).collect();
            let checked = crate::wheel::closure::check(&wheels, &beside, &self.stack.system_libraries)
                .map_err(|e| BuildError::RuntimeWheel { recipe: r.name.clone(), why: e.to_string() })?;
            if checked.files > 0 {
                self.progress.message(
                    &r.name,
                    &format!(
                        "libraries: the {} DT_NEEDED entries of {} ELF file(s) in its wheels resolve within the stack's wheels or the system's",
                        checked.needed, checked.files
                    ),
                );
            }
        }
        Ok(())
    }

    /// The runtime wheels among the wheels the recipe's build dependencies deployed: (recipe,
    /// `project==version` as a requirement, path).
    fn runtime_wheels_below(&self, r: &Recipe, prefix: &Prefix) -> Vec<(String, String, PathBuf)> {
        self.deployed_dependency_wheels(r, prefix)
            .into_iter()
            .filter_map(|(dep, _, file, path)| {
                let spec = self.stack.recipes.get(&dep)?.runtime_wheel.as_ref()?;
                let w = crate::index::WheelName::parse(&file).ok()?;
                Some((dep, format!("{}=={}", spec.project, w.version), path))
            })
            .collect()
    }

    /// A python-wheel recipe's wheels require the runtime wheels its build dependencies made,
    /// exactly, and each ELF file in them finds their libraries through a RUNPATH relative to
    /// `$ORIGIN` ([`crate::wheel::runtime::relink`]). Nothing to do without runtime wheels below.
    pub(super) fn link_runtime_wheels(&self, r: &Recipe, tree: &Path, prefix: &Prefix) -> Result<(), BuildError> {
        if r.build.system != BuildSystem::PythonWheel {
            return Ok(());
        }
        let runtime = self.runtime_wheels_below(r, prefix);
        if runtime.is_empty() {
            return Ok(());
        }
        let requires: Vec<String> = runtime.iter().map(|w| w.1.clone()).collect();
        let beside: Vec<PathBuf> = self.deployed_dependency_wheels(r, prefix).into_iter().map(|w| w.3).collect();
        for wheel in self.wheels_of(r, tree)? {
            let done = crate::wheel::runtime::relink(&wheel, &requires, &beside)
                .map_err(|e| BuildError::RuntimeWheel { recipe: r.name.clone(), why: e.to_string() })?;
            let name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            self.progress.message(
                &r.name,
                &format!(
                    "{name}: requires {}; RUNPATH set in {} file(s){}",
                    done.requires.join(", "),
                    done.runpaths.len(),
                    done.runpaths.first().map(|(m, rp)| format!(" ({m}: {rp}, ...)")).unwrap_or_default()
                ),
            );
        }
        Ok(())
    }

    /// A runtime-wheel recipe's wheel, written into `tree`'s wheel folder from the files its
    /// `[runtime-wheel]` names: a build dependency's from the prefix (those its deploy manifest
    /// lists), one taken from an installation (`--rocm-path`) from there.
    pub(super) fn make_runtime_wheel(
        &self,
        r: &Recipe,
        tree: &Path,
        prefix: &Prefix,
        version: String,
    ) -> Result<(), BuildError> {
        let Some(spec) = &r.runtime_wheel else { return Ok(()) };
        let fail = |why: String| BuildError::RuntimeWheel { recipe: r.name.clone(), why };
        let targets: Vec<String> = self.plan.targets.names().iter().map(|t| t.to_string()).collect();
        let installation =
            self.plan.rocm_path.as_ref().map(|p| crate::installation::Installation::open(p, &self.cfg.state_dir));
        let mut chosen = Vec::new();
        for (dep, globs) in &spec.files {
            let taken = self.plan.entry(dep).is_some_and(|e| e.state() == crate::plan::State::External);
            let skipped = self.plan.entry(dep).is_some_and(|e| e.state() == crate::plan::State::Skipped);
            if skipped {
                continue;
            }
            let (root, files): (PathBuf, Option<Vec<String>>) = match (&installation, taken) {
                (Some(inst), true) => (inst.root.clone(), None),
                _ => (prefix.root.clone(), Some(prefix.manifest(dep).map(|m| m.files).unwrap_or_default())),
            };
            for glob in globs {
                let per_target = glob.contains("{target}");
                let expanded: Vec<String> = if per_target {
                    targets.iter().map(|t| glob.replace("{target}", t)).collect()
                } else {
                    vec![glob.clone()]
                };
                let mut found = Vec::new();
                for g in &expanded {
                    let matched: Vec<(String, PathBuf)> = match (&files, &installation) {
                        (Some(files), _) => {
                            let m = crate::offload::coverage::matcher(g).map_err(&fail)?;
                            files.iter().filter(|f| m.is_match(f.as_str())).map(|f| (f.clone(), root.join(f))).collect()
                        }
                        (None, Some(inst)) => inst.runtime_wheel_files(g, self.plan.rocm_llvm.as_deref()),
                        (None, None) => Vec::new(),
                    };
                    found.extend(matched);
                }
                if found.is_empty() && !per_target {
                    return Err(fail(format!(
                        "`[runtime-wheel] files` entry `{glob}` of `{dep}` matches none of the files {dep} installed{}: fix the glob in {}",
                        if taken { format!(" in {}", root.display()) } else { " (its deploy manifest)".to_string() },
                        r.file
                    )));
                }
                chosen.extend(found.into_iter().map(|(rel, path)| crate::wheel::runtime::Chosen { path, rel }));
            }
        }
        let below = self.runtime_wheels_below(r, prefix);
        let startup_env = match &spec.profile {
            Some(p) => self.stack.profiles.get(p).map(|p| p.env.clone()).unwrap_or_default(),
            None => Default::default(),
        };
        let w = crate::wheel::runtime::RuntimeWheel {
            project: spec.project.clone(),
            version,
            summary: r.summary.clone(),
            root: spec.root.clone(),
            requires: below.iter().map(|b| b.1.clone()).collect(),
            startup_env,
        };
        let beside: Vec<PathBuf> = below.into_iter().map(|b| b.2).collect();
        let out = tree.join(systems::WHEEL_DIR);
        let wheel = crate::wheel::runtime::assemble(&w, &chosen, &beside, &out).map_err(|e| fail(e.to_string()))?;
        let size = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
        self.progress.message(
            &r.name,
            &format!(
                "runtime wheel {} ({}, {} file(s) of {})",
                wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                crate::fsutil::human_size(size),
                chosen.len(),
                spec.files.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        );
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
