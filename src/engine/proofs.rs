//! What a recipe answers for, checked at its own end, before its artifact is stored: the
//! coverage `[targets]` declares, the needs of its consumers (`[[provides]]`: files, or a path a
//! program of it prints), and the checks after install (`[[check]]`: steps of the build, run in
//! a fresh copy of the check's files, and the device code of what they made). A miss fails the
//! recipe that is wrong, naming the consumer or the check, instead of a consumer hours later.
//! Built in for every recipe that builds something: none of its host libraries and executables
//! needs an executable stack, which glibc 2.41 and later refuse to load.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{BuildError, Engine};
use crate::layout::WorkDir;
use crate::offload::coverage::{self, CoverageCheck, CoverageSpec, Installed};
use crate::plan::PlanEntry;
use crate::recipe::proofs::TARGET_PLACEHOLDERS;
use crate::recipe::{BuildSystem, PostCheck, Provide, Recipe};

/// How long a `[[provides]] query` program may take (a compiler printing a path: a second).
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

/// How many files that need an executable stack an error lists (the build report has them all).
const STACKS_LISTED: usize = 20;

/// The directory a check runs in: `<build>/checks/<name>`.
pub fn check_dir(wd: &WorkDir, check: &str) -> PathBuf {
    wd.build().join("checks").join(check)
}

/// The steps of a check: `check-<name>` for one line, `check-<name>.<i>` for several.
pub fn check_step_names(c: &PostCheck) -> Vec<String> {
    match c.steps.len() {
        1 => vec![format!("check-{}", c.name)],
        _ => (1..=c.steps.len()).map(|i| format!("check-{}.{i}", c.name)).collect(),
    }
}

/// Writes a fresh copy of the check's files into its directory, and of its helpers beside it
/// (`<dir>/../<helpers>/`, where the check's code finds them as in the recipe tree), before its
/// first step runs. A helpers folder already in `laid` (laid out by an earlier check of the same
/// build: the checks of a recipe share one) is not written again.
pub fn materialize(c: &PostCheck, dir: &Path, laid: &mut BTreeSet<PathBuf>) -> Result<(), BuildError> {
    write_fresh(dir, &c.files)?;
    if let Some((beside, files)) = c.helpers_beside(dir).filter(|(at, _)| !laid.contains(at)) {
        write_fresh(&beside, files)?;
        laid.insert(beside);
    }
    Ok(())
}

fn write_fresh(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), BuildError> {
    crate::fsutil::write_fresh(dir, files).map_err(|(what, path, source)| BuildError::Io { what, path, source })
}

impl Engine<'_> {
    /// Every declaration of `r` checked against what it installed into `tree` and what its
    /// checks made in `wd`; all go to the report, and any miss fails the recipe with every
    /// problem listed.
    pub(super) fn check_outputs(&self, r: &Recipe, d: &PlanEntry, tree: &Path, wd: &WorkDir) -> Result<(), BuildError> {
        let built_for: Vec<&str> = d.targets.targets().map(|t| t.names()).unwrap_or_default();
        let wheels = self.wheels_of(r, tree)?;
        let installed = if wheels.is_empty() { Installed::Tree(tree) } else { Installed::Wheels(&wheels) };
        let malformed = |what: &str, e: crate::offload::OffloadError| BuildError::Coverage {
            recipe: r.name.clone(),
            file: r.file.clone(),
            what: what.to_string(),
            problems: vec![e.to_string()],
        };
        let spec = CoverageSpec { device_code: &r.targets.device_code, must_contain: &r.targets.must_contain };
        // The recipe's own declarations: `[targets]`, and the device code of what its checks made.
        let mut own = coverage::check(spec, &built_for, &installed).map_err(|e| malformed("`[targets]`", e))?;
        // A host-only recipe's checks compile for the requested targets (as `{targets}` says).
        let requested: Vec<&str> = self.plan.targets.names();
        let check_targets = if d.targets.targets().is_some() { &built_for } else { &requested };
        for c in &r.checks {
            let dir = check_dir(wd, &c.name);
            let spec = CoverageSpec { device_code: &c.device_code, must_contain: &Default::default() };
            for mut found in coverage::check(spec, check_targets, &Installed::Tree(&dir))
                .map_err(|e| malformed(&format!("check `{}`", c.name), e))?
            {
                found.pattern = format!("check {}: {}", c.name, found.pattern);
                own.push(found);
            }
        }
        // Its consumers' needs.
        let needs: Vec<CoverageCheck> = r.provides.iter().map(|p| provide(p, &requested, &installed, tree)).collect();
        // What every loader asks of its libraries and executables (a prebuilt wheel's are not
        // this build's doing).
        let stacks = if r.build.system == BuildSystem::PrebuiltWheel {
            Vec::new()
        } else {
            coverage::exec_stacks(&installed).map_err(unreadable)?
        };
        if own.is_empty() && needs.is_empty() && stacks.is_empty() {
            return Ok(());
        }
        let all: Vec<CoverageCheck> = own.iter().chain(&needs).chain(&stacks).cloned().collect();
        self.progress.coverage(&r.name, &all);
        for c in all.iter().filter(|c| c.ok) {
            self.progress.message(&r.name, &c.describe());
        }
        let failed =
            |checks: &[CoverageCheck]| checks.iter().filter(|c| !c.ok).map(|c| c.describe()).collect::<Vec<_>>();
        let (own, needs, mut stacks) = (failed(&own), failed(&needs), failed(&stacks));
        if stacks.len() > STACKS_LISTED {
            let more = stacks.len() - STACKS_LISTED;
            stacks.truncate(STACKS_LISTED);
            stacks.push(format!("and {more} more (the build report lists them all: `rocmforge report`)"));
        }
        if !own.is_empty() {
            return Err(BuildError::Coverage {
                recipe: r.name.clone(),
                file: r.file.clone(),
                what: "`[targets]` and `[[check]]`".into(),
                problems: own.into_iter().chain(needs).chain(stacks).collect(),
            });
        }
        if !needs.is_empty() {
            return Err(BuildError::Provides {
                recipe: r.name.clone(),
                file: r.file.clone(),
                problems: needs.into_iter().chain(stacks).collect(),
            });
        }
        if !stacks.is_empty() {
            return Err(BuildError::ExecStack { recipe: r.name.clone(), file: r.file.clone(), problems: stacks });
        }
        Ok(())
    }
}

/// An installed file (or wheel member) the stack check could not read.
fn unreadable(e: crate::offload::OffloadError) -> BuildError {
    use crate::offload::OffloadError;
    let (path, source) = match e {
        OffloadError::Io { path, source } => (path, source),
        OffloadError::File { path, message } => (PathBuf::from(path), std::io::Error::other(message)),
        OffloadError::Malformed(message) => (PathBuf::new(), std::io::Error::other(message)),
    };
    BuildError::Io { what: "the stack check cannot read", path, source }
}

/// One `[[provides]]` checked: every file entry matches (once per requested target where it
/// names one), and the query's program prints a path that exists.
fn provide(p: &Provide, targets: &[&str], installed: &Installed<'_>, tree: &Path) -> CoverageCheck {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for f in &p.files {
        let expanded: Vec<String> = if TARGET_PLACEHOLDERS.iter().any(|ph| f.contains(ph)) {
            targets
                .iter()
                .map(|t| f.replace("{target}", t).replace("{target_isa}", t.trim_start_matches("gfx")))
                .collect()
        } else {
            vec![f.clone()]
        };
        for pattern in expanded {
            match coverage::matching(installed, &pattern) {
                Ok(m) if m.is_empty() => missing.push(format!("`{pattern}`: no installed file matches")),
                Ok(m) => found.extend(m),
                Err(e) => missing.push(e.to_string()),
            }
        }
    }
    if !p.query.is_empty() {
        match query(&p.query, tree) {
            Ok(path) => found.push(path),
            Err(why) => missing.push(why),
        }
    }
    let ok = missing.is_empty();
    CoverageCheck {
        kind: "provides".into(),
        pattern: p.what.clone(),
        wants: p.consumers.clone(),
        files: found
            .into_iter()
            .map(|path| coverage::CoveredFile { path, targets: Vec::new(), contains: None })
            .collect(),
        missing,
        ok,
    }
}

/// Runs the installed program `q[0]` (relative to `tree`) with `q[1..]`; the last line it
/// prints must name a file that exists. Returns that path, or what went wrong.
fn query(q: &[String], tree: &Path) -> Result<String, String> {
    let shown = q.join(" ");
    let program = tree.join(&q[0]);
    if !program.is_file() {
        return Err(format!("`{shown}`: `{}` is not installed", q[0]));
    }
    let mut command = std::process::Command::new(&program);
    command.args(&q[1..]).current_dir(tree);
    let (status, [stdout, stderr]) =
        crate::process::bounded(&mut command, QUERY_TIMEOUT).map_err(|e| format!("`{shown}` could not run: {e}"))?;
    let stdout = String::from_utf8_lossy(&stdout);
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr);
        return Err(format!("`{shown}` failed ({status}): {}", stderr.trim().lines().last().unwrap_or("")));
    }
    let Some(line) = stdout.lines().rev().map(str::trim).find(|l| !l.is_empty()) else {
        return Err(format!("`{shown}` printed nothing"));
    };
    let path = Path::new(line);
    let path = if path.is_absolute() { path.to_path_buf() } else { tree.join(path) };
    if path.is_file() {
        Ok(path.strip_prefix(tree).map(|p| p.display().to_string()).unwrap_or_else(|_| line.to_string()))
    } else {
        Err(format!("`{shown}` printed `{line}`, which does not exist"))
    }
}
