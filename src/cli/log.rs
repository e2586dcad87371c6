//! `rocmforge log`: a recipe's step logs, in step order, or one step's; `--follow` keeps
//! printing what a running build appends until the step (or recipe) is done or the build's
//! process is gone.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{CliResult, Context, Failure};
use crate::layout::WorkDir;
use crate::report::status::{read, rocmforge_alive};
use crate::report::BuildState;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe whose logs to print.
    pub recipe: String,
    /// Only this step's log (e.g. `build`, `configure`, `step3`).
    #[arg(long)]
    pub step: Option<String>,
    /// Keep printing new lines while the build runs the step (or, without --step, the recipe).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// Copies `path` from `offset` to stdout; returns the new offset (restarting at 0 if the log
/// was truncated by a re-run of its step).
fn copy_from(path: &Path, offset: u64) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else { return offset };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let offset = if len < offset { 0 } else { offset };
    if f.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    // Streamed: a compiler's log can be gigabytes.
    let mut out = std::io::stdout().lock();
    let n = std::io::copy(&mut f, &mut out).unwrap_or(0);
    let _ = out.flush();
    offset + n
}

fn header(step: &str, log: &Path) {
    println!("==> {step} ({}) <==", log.display());
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let cfg = ctx.config()?;
    let stack = ctx.build_stack(&cfg)?;
    let wd = WorkDir::new(&cfg.work_dir, &stack, &args.recipe);
    let steps = wd.logged_steps();
    let mut current: Option<(String, PathBuf, u64)> = None;
    match &args.step {
        Some(step) => {
            let log = wd.step_log(step);
            if !log.is_file() && !args.follow {
                let known: Vec<&str> = steps.iter().map(|(s, _)| s.as_str()).collect();
                return Err(Failure::usage(anyhow::anyhow!(
                    "{}: no log of step `{step}` in `{}`; steps with logs: {}",
                    args.recipe,
                    wd.logs().display(),
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                )));
            }
            let off = copy_from(&log, 0);
            current = Some((step.clone(), log, off));
        }
        None => {
            if steps.is_empty() && !args.follow {
                return Err(Failure::failed(anyhow::anyhow!(
                    "{}: no step logs in `{}` (stack `{stack}`): it has not run a step yet, or its work dir was cleaned",
                    args.recipe,
                    wd.logs().display()
                )));
            }
            for (step, log) in &steps {
                header(step, log);
                let off = copy_from(log, 0);
                current = Some((step.clone(), log.clone(), off));
            }
        }
    }
    if args.follow {
        follow(&cfg.state_dir, &stack, &args.recipe, args.step.as_deref(), current);
    }
    Ok(())
}

/// Polls the build's status and the log; returns when there is nothing more to wait for.
fn follow(
    state_dir: &Path,
    stack: &str,
    recipe: &str,
    only: Option<&str>,
    mut current: Option<(String, PathBuf, u64)>,
) {
    loop {
        if let Some((_, log, off)) = current.as_mut() {
            *off = copy_from(log, *off);
        }
        let Ok((_, rec)) = read(state_dir, Some(stack)) else { return };
        if rec.state != BuildState::Running || !rocmforge_alive(rec.pid) {
            return;
        }
        let Some(r) = rec.recipe(recipe) else { return };
        let over = match only {
            // One step: over once this build finished it (or the recipe ended without it).
            Some(o) => r.outcome.is_some() || r.steps.iter().any(|s| s.name == o && s.status != "running"),
            None => {
                let running =
                    rec.running.iter().find(|x| x.recipe == recipe).and_then(|x| x.step.clone().zip(x.log.clone()));
                if let Some((step, log)) = running {
                    if current.as_ref().is_none_or(|(s, _, _)| *s != step) {
                        if let Some((_, old, off)) = current.as_mut() {
                            *off = copy_from(old, *off);
                        }
                        header(&step, &log);
                        current = Some((step, log, 0));
                    }
                }
                r.outcome.is_some()
            }
        };
        if over {
            if let Some((_, log, off)) = current.as_mut() {
                *off = copy_from(log, *off);
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
