//! `rocmforge status`: where is the build? Reads the status file a running build keeps current,
//! and tells a live build from one whose process is gone.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{CliResult, Context, Failure};
use crate::progress::{clock, human_secs, last_line};
use crate::report::status::{leftovers, liveness, read, rocmforge_alive, Leftover, StatusError, Waiting};
use crate::report::{BuildRecord, BuildState};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Machine-readable output: the status file plus `liveness` and `alive`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let cfg = ctx.config()?;
    let stack = ctx.build_stack(&cfg)?;
    let rec = match read(&cfg.state_dir, Some(&stack)) {
        Ok((_, rec)) => rec,
        // Nothing built yet is an answer, not a failure: said in words, or as JSON of the shape
        // `{"state": "none", "stack", "status_file", "message"}` (README, `status`).
        Err(StatusError::None(path)) => {
            let message = StatusError::None(path.clone()).to_string();
            if args.json {
                let v = serde_json::json!({
                    "state": "none",
                    "stack": stack,
                    "status_file": path,
                    "message": message,
                });
                println!("{}", serde_json::to_string_pretty(&v).map_err(Failure::failed)?);
            } else {
                println!("{message}");
            }
            return Ok(());
        }
        Err(e) => return Err(Failure::failed(e)),
    };
    let live = liveness(&rec);
    let waiting = Waiting::of(&cfg.state_dir, &stack);
    let left = leftovers(&cfg.work_dir, &rec);
    if args.json {
        let mut v = serde_json::to_value(&rec).map_err(Failure::failed)?;
        v["liveness"] = live.clone().into();
        v["waiting"] = serde_json::to_value(&waiting).map_err(Failure::failed)?;
        v["alive"] = (rec.state == BuildState::Running && rocmforge_alive(rec.pid)).into();
        v["left_running"] = left
            .iter()
            .map(|l| {
                serde_json::json!({
                    "recipe": l.recipe,
                    "processes": l.procs.iter().map(|p| serde_json::json!({"pid": p.pid, "name": p.name})).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>()
            .into();
        println!("{}", serde_json::to_string_pretty(&v).map_err(Failure::failed)?);
        return Ok(());
    }
    print!("{}", render(&rec, &live));
    for w in &waiting {
        let holder = w.holder.map(|p| format!(" (held by pid {p})")).unwrap_or_default();
        println!(
            "  waiting  another build of `{}` (pid {}) for the prefix {}{holder}, since {} (UTC)",
            w.stack,
            w.pid,
            w.prefix.display(),
            w.since
        );
    }
    print!("{}", render_leftovers(&left));
    Ok(())
}

/// The processes a dead build left running, with the command that stops them.
fn render_leftovers(left: &[Leftover]) -> String {
    let mut s = String::new();
    for l in left {
        let pids: Vec<String> = l.procs.iter().map(|p| p.pid.to_string()).collect();
        let shown: Vec<String> = l.procs.iter().take(12).map(|p| format!("{} {}", p.pid, p.name)).collect();
        let more = l.procs.len().saturating_sub(shown.len());
        s.push_str(&format!(
            "  left running by {}: {} process(es) of its step are still alive, though the build's process is gone: {}{}\n",
            l.recipe,
            l.procs.len(),
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
        s.push_str(&format!("    stop them: kill -9 {}   (building again stops them first, too)\n", pids.join(" ")));
    }
    s
}

fn ago(rec: &BuildRecord, offset_secs: f64) -> f64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    now - rec.started_unix_ms as f64 / 1000.0 - offset_secs
}

/// How long a step that started `start_secs` into the build has run; `None` when the status
/// file's numbers give no time (NaN, or more seconds than a `Duration` holds: a damaged or
/// hand-edited file, which `Duration::from_secs_f64` panicked on). A start a little in the
/// future (a clock set back) is 0.
fn step_age(rec: &BuildRecord, start_secs: f64) -> Option<std::time::Duration> {
    let secs = ago(rec, start_secs);
    std::time::Duration::try_from_secs_f64(if secs < 0.0 { 0.0 } else { secs }).ok()
}

fn render(rec: &BuildRecord, live: &str) -> String {
    let mut s = format!("build of stack `{}`: {live} (pid {})\n", rec.stack, rec.pid);
    s.push_str(&format!("  started  {} (UTC), {} ago\n", rec.started_at, human_secs(ago(rec, 0.0))));
    if let Some(d) = rec.duration_secs {
        s.push_str(&format!("  took     {}\n", human_secs(d)));
    }
    s.push_str(&format!("  recipes  {}/{} done\n", rec.recipes_done, rec.recipes_total));
    for r in &rec.running {
        let rr = rec.recipe(&r.recipe);
        match (&r.step, &r.log) {
            (Some(step), Some(log)) => {
                let since = rr.and_then(|x| x.steps.last()).and_then(|st| step_age(rec, st.start_secs)).map(clock);
                s.push_str(&format!(
                    "  {} {}: step {step}{}\n",
                    if rec.state == BuildState::Running { "running" } else { "was at" },
                    r.recipe,
                    since.map(|c| format!(" for {c}")).unwrap_or_default()
                ));
                s.push_str(&format!("    log: {}\n", log.display()));
                if let Some(l) = last_line(log) {
                    s.push_str(&format!("    | {l}\n"));
                }
            }
            _ => s.push_str(&format!("  running  {}: preparing its source\n", r.recipe)),
        }
    }
    // A build that stopped without a word leaves its last step "running": show it as such.
    if rec.state != BuildState::Running {
        for r in &rec.recipes {
            if let Some(st) = r.steps.iter().find(|st| st.status == "interrupted") {
                s.push_str(&format!("  interrupted {}: step {}\n    log: {}\n", r.name, st.name, st.log.display()));
            }
        }
    }
    let done: Vec<String> =
        rec.recipes.iter().filter_map(|r| r.outcome.as_ref().map(|o| format!("{} {o}", r.name))).collect();
    if !done.is_empty() {
        s.push_str(&format!("  outcomes {}\n", done.join(", ")));
    }
    if let Some(f) = rec.recipes.iter().find(|r| r.outcome == Some(crate::progress::Outcome::Failed)) {
        if let Some(st) = f.steps.iter().rev().find(|st| st.status == "failed") {
            s.push_str(&format!("  failed   {}: step {}; log {}\n", f.name, st.name, st.log.display()));
        }
    }
    if let Some(r) = &rec.report {
        s.push_str(&format!("  report   {}\n", r.display()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{RecipeRecord, RunningRecipe, StepRecord};

    /// A running step whose start in the status file is no time at all: `status` shows the
    /// step without how long it ran, and does not panic; a start in the future shows 00:00:00.
    #[test]
    fn a_step_start_that_is_no_time_is_shown_without_its_age() {
        for (start, age) in [
            (-1e300, None),
            (f64::NEG_INFINITY, None),
            (f64::NAN, None),
            (-(u64::MAX as f64) * 2.0, None),
            (1e300, Some(" for 00:00:00")),
        ] {
            let rec = BuildRecord {
                stack: "s".into(),
                state: BuildState::Running,
                running: vec![RunningRecipe {
                    recipe: "r".into(),
                    step: Some("configure".into()),
                    log: Some("/nonexistent/r.log".into()),
                    step_started_at: None,
                }],
                recipes: vec![RecipeRecord {
                    name: "r".into(),
                    steps: vec![StepRecord { name: "configure".into(), start_secs: start, ..Default::default() }],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let text = render(&rec, "running");
            let line = format!("  running r: step configure{}\n", age.unwrap_or(""));
            assert!(text.contains(&line), "start {start}: no `{line}` in\n{text}");
        }
    }
}
