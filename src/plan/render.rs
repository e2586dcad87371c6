//! The plan as `plan` prints it (`--json` prints the model itself).

use super::night::{self, Work};
use super::{Plan, State, Status};
use crate::recipe::SourceSpec;

impl Plan {
    /// The human-readable plan.
    pub fn render(&self) -> String {
        let mut s = format!(
            "plan for {} on stack {} (ROCm {}), targets {}: {} recipes\n\n",
            self.requested.join(", "),
            self.stack,
            self.rocm_version,
            self.targets.comma_list(),
            self.recipes.len()
        );
        for (i, e) in self.recipes.iter().enumerate() {
            s.push_str(&format!("{:>3}. {} {} [{}] wave {}\n", i + 1, e.name, e.version, e.system, e.wave));
            s.push_str(&format!("     source:  {}\n", e.source.describe()));
            match (&e.pin, &e.source) {
                (Some(p), _) => s.push_str(&format!("     pin:     {}\n", p.describe())),
                (None, SourceSpec::From { recipe, .. }) => s.push_str(&format!("     pin:     {recipe}'s\n")),
                (None, SourceSpec::None) => {}
                (None, _) => s.push_str("     pin:     none yet (`rocmforge build` pins it)\n"),
            }
            if !e.patches.is_empty() {
                s.push_str(&format!("     patches: {}\n", e.patches.join(", ")));
            }
            if !e.deps.is_empty() {
                s.push_str(&format!("     deps:    {}\n", e.deps.join(", ")));
            }
            if !e.checks.is_empty() || e.provides > 0 {
                let mut what = Vec::new();
                if !e.checks.is_empty() {
                    what.push(format!("after install: {}", e.checks.join(", ")));
                }
                if e.provides > 0 {
                    what.push(format!("{} need(s) of its consumers", e.provides));
                }
                s.push_str(&format!("     checks:  {}\n", what.join("; ")));
            }
            s.push_str(&format!("     targets: {}\n", e.targets.describe()));
            s.push_str(&format!("     state:   {} ({})\n", e.state().as_str(), e.reason()));
        }
        let blocked: Vec<&str> =
            self.recipes.iter().filter(|e| e.state() == State::Blocked).map(|e| e.name.as_str()).collect();
        if !blocked.is_empty() {
            s.push_str(&format!("\n{} blocked: {}\n", blocked.len(), blocked.join(", ")));
        }
        if !self.accept_versions.is_empty() {
            let refused: Vec<&str> = self
                .recipes
                .iter()
                .filter(|e| matches!(e.status, Status::Refused(_)))
                .map(|e| e.name.as_str())
                .collect();
            s.push_str(&format!(
                "the installation holds {} in other versions: `--accept-rocm-version {}` takes them all, `--from-source {}` builds them\n",
                refused.join(", "),
                self.accept_versions.join(","),
                refused.join(",")
            ));
        }
        if let Some(n) = &self.night {
            let guessed = self.recipes.iter().filter(|e| e.estimate_from == "default").count();
            s.push_str(&format!(
                "\nestimated length: {} on {} job{} (lower bound {}, {} order); critical path {}: {}\n",
                crate::progress::human_secs(n.estimated_secs),
                n.jobs,
                if n.jobs == 1 { "" } else { "s" },
                crate::progress::human_secs(n.lower_bound_secs),
                self.schedule.as_str(),
                crate::progress::human_secs(n.critical_path_secs),
                if n.critical_path.is_empty() { "nothing to build".to_string() } else { n.critical_path.join(" -> ") },
            ));
            if let (Some(full), Some(rocm)) = (self.full_night_secs, &self.rocm_path) {
                let taken = self.recipes.iter().filter(|e| e.state() == State::External).count();
                s.push_str(&format!(
                    "the short night on {}: {} recipe(s) taken from it; the full night (nothing taken) would be {}\n",
                    rocm.display(),
                    taken,
                    crate::progress::human_secs(full)
                ));
            }
            let download: f64 = self.recipes.iter().map(|e| e.download_mb).sum();
            let disk: f64 = self.recipes.iter().map(|e| e.disk_gb).sum();
            if download > 0.0 || disk > 0.0 {
                s.push_str(&format!(
                    "downloads {}, disk while building {} (work trees, build trees and artifacts of the recipes to build)\n",
                    human_mb(download),
                    human_mb(disk * 1024.0)
                ));
            }
            let checks = self.recipes.iter().filter(|e| e.checks_estimate != Work::default());
            let (serial, parallel, count) = checks.fold((0.0, 0.0, 0), |(s, p, c), e| {
                (s + e.checks_estimate.serial_secs, p + e.checks_estimate.parallel_secs, c + 1)
            });
            if count > 0 {
                s.push_str(&format!(
                    "checks after install ({count} recipe(s)): {} on {} job{} if run alone, {:.0} core-minutes; in the figures above\n",
                    crate::progress::human_secs(serial + parallel / n.jobs.max(1) as f64),
                    n.jobs,
                    if n.jobs == 1 { "" } else { "s" },
                    parallel / 60.0
                ));
            }
            let measured = self.recipes.iter().filter(|e| e.estimate_from == "last build").count();
            s.push_str(&format!(
                "an estimate: per recipe, its serial minutes plus its compile core-hours over the jobs it gets (capped by its `memory-per-job-gb` in {}){}; more cores shorten the compiles, not the serial parts or the chain (docs/night-estimate.md)\n",
                match n.memory_gb {
                    Some(g) => format!("{g} GiB"),
                    None => "this host's free memory".to_string(),
                },
                if measured > 0 { format!("; {measured} recipe(s) take their last build here") } else { String::new() },
            ));
            if guessed > 0 {
                s.push_str(&format!(
                    "({guessed} recipe(s) never built here and without `[estimate]` count {} each)\n",
                    crate::progress::human_secs(night::DEFAULT_ESTIMATE_SECS)
                ));
            }
        }
        s
    }
}

/// `850 MB`, `12.4 GB`.
fn human_mb(mb: f64) -> String {
    if mb >= 1024.0 {
        format!("{:.1} GB", mb / 1024.0)
    } else {
        format!("{mb:.0} MB")
    }
}
