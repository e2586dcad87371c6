//! Before the first compile: every source the plan's builds will prepare is fetched, verified
//! and checked the way `prepare` would (archive entries, `strip-components`, `subdir`, the patch
//! series), and every problem is reported at once, so a broken patch in the last recipe stops
//! the build in seconds instead of hours into the night.

use std::collections::BTreeSet;

use super::{BuildError, Engine, Outcome};
use crate::recipe::{Recipe, SourceSpec};
use crate::source;

impl Engine<'_> {
    /// The recipes whose sources the builds of the plan will prepare: each building recipe's own
    /// (or, for a `from` recipe, the one it names) and its source dependencies.
    fn sources_to_prepare(&self) -> Vec<&Recipe> {
        let mut names = BTreeSet::new();
        for e in self.plan.recipes.iter().filter(|e| e.builds()) {
            let r = &self.stack.recipes[&e.name];
            match &r.source {
                SourceSpec::From { recipe, .. } => names.insert(recipe.as_str()),
                _ => names.insert(r.name.as_str()),
            };
            names.extend(r.source_deps.iter().map(String::as_str));
        }
        names
            .into_iter()
            .map(|n| &self.stack.recipes[n])
            .filter(|r| r.source != SourceSpec::None || !r.patches.is_empty())
            .collect()
    }

    /// The `[host]` needs of every recipe the plan builds (and the stack's Python), checked
    /// before anything is fetched: every missing one listed at once, with the command that
    /// installs them (the checks `doctor` prints).
    pub(super) fn host_preflight(&self) -> Result<(), BuildError> {
        let building: Vec<&Recipe> = self
            .plan
            .recipes
            .iter()
            .filter(|e| e.builds())
            .map(|e| &self.stack.recipes[&e.name])
            .filter(|r| !r.is_source_only())
            .collect();
        if building.is_empty() {
            return Ok(());
        }
        let python = (self.stack.python.as_deref())
            .filter(|_| building.iter().any(|r| r.uses_stack_python()))
            .map(|v| (v, self.stack.name.as_str()));
        let check = crate::host::needs::check(&crate::host::HostRoot::from_env(), &building, python);
        if check.is_ok() {
            for note in &check.notes {
                self.progress.warn("host", note);
            }
            return Ok(());
        }
        Err(BuildError::Host { problems: check.problems() })
    }

    /// Checks every source to prepare whose work tree is not already prepared; all failures in
    /// one error.
    pub(super) fn preflight(&self) -> Result<(), BuildError> {
        let mut failures = Vec::new();
        let mut checked = 0;
        for r in self.sources_to_prepare() {
            let work = self.work_dir(&r.name).src();
            let prepared = source::patch_series(self.tree, r)
                .and_then(|series| source::expected_marker(r, &series))
                .is_ok_and(|m| source::is_prepared(&work, &m));
            if prepared {
                continue;
            }
            checked += 1;
            if let Err(e) = source::preflight(self.cfg, self.tree, r, self.progress) {
                failures.push((r.name.clone(), crate::diagnostic::one_line(&e)));
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        // In the build report too: each failing source is its recipe's failure.
        for (name, error) in &failures {
            self.progress.recipe_started(name, false);
            self.progress.recipe_failed(name, error);
            self.progress.recipe_finished(name, Outcome::Failed);
        }
        Err(BuildError::Preflight { failures, checked })
    }
}
