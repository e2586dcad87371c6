//! `rocmforge recipes list|show|check`.

use super::{exit, CliResult, Context, Failure};
use crate::recipe::load_all;

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// List the stacks and their recipes.
    List,
    /// Show one recipe: source, patches, dependencies, build, targets.
    Show {
        /// Recipe name.
        name: String,
    },
    /// Validate every stack of the recipe tree and report every problem.
    Check,
}

pub fn run(ctx: &Context, cmd: Cmd) -> CliResult {
    let tree = ctx.tree()?;
    match cmd {
        Cmd::List => {
            let stacks = load_all(&tree).map_err(|d| Failure::new(exit::INVALID_RECIPES, d))?;
            for s in &stacks {
                if ctx.cli_stack.as_deref().is_some_and(|w| w != s.name) {
                    continue;
                }
                println!(
                    "{}{}  ROCm {}  default targets {}  ({} recipes)\n  {}",
                    s.name,
                    if s.is_default { " (default)" } else { "" },
                    s.rocm_version,
                    s.default_targets.comma_list(),
                    s.recipes.len(),
                    s.summary
                );
                for r in s.recipes.values() {
                    let lock = if r.source.is_unlocked() { "  [unlocked]" } else { "" };
                    println!("    {:<24} {:<12} {}{}", r.name, r.version, r.summary, lock);
                }
            }
            Ok(())
        }
        Cmd::Show { name } => {
            let stack = ctx.stack(&tree)?;
            let Some(r) = stack.recipe(&name) else {
                let close = crate::recipe::load_closest(&name, stack.recipes.keys().map(String::as_str));
                return Err(Failure::usage(anyhow::anyhow!(
                    "no recipe named `{name}` in stack `{}`{}",
                    stack.name,
                    close.first().map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default()
                )));
            };
            println!("{} {} ({})", r.name, r.version, tree.display_path(&r.file));
            println!("  {}", r.summary);
            println!("  source:   {}", r.source.describe());
            for p in &r.patches {
                println!("  patch:    {}", p.name);
            }
            if !r.build_deps.is_empty() {
                println!("  build deps:  {}", r.build_deps.join(", "));
            }
            if !r.source_deps.is_empty() {
                println!("  source deps: {}", r.source_deps.join(", "));
            }
            println!("  build:    {} ({} GB per compile job)", r.build.system.as_str(), r.build.memory_per_job_gb);
            for a in &r.build.args {
                println!("    arg   {a}");
            }
            for (k, v) in &r.build.env {
                println!("    env   {k}={v}");
            }
            for s in &r.build.steps {
                println!("    step  {s}");
            }
            for q in &r.build.requirements {
                println!("    pip   {q}");
            }
            for w in &r.build.install_wheels {
                println!("    wheel {w} (the wheel a build dependency built)");
            }
            let t = &r.targets;
            if !t.gpu {
                println!("  targets:  host code only");
            } else {
                match &t.supported {
                    Some(s) => println!("  targets:  {}", s.comma_list()),
                    None => println!("  targets:  any"),
                }
                if let Some(reason) = &t.reason {
                    println!("    note  {reason}");
                }
            }
            Ok(())
        }
        Cmd::Check => {
            let stacks = load_all(&tree).map_err(|d| Failure::new(exit::INVALID_RECIPES, d))?;
            let unknown: Vec<_> = stacks.iter().flat_map(crate::verify::unknown_cases).collect();
            if !unknown.is_empty() {
                return Err(Failure::new(exit::INVALID_RECIPES, crate::diagnostic::Diagnostics(unknown)));
            }
            let n: usize = stacks.iter().map(|s| s.recipes.len()).sum();
            let warnings: Vec<String> =
                stacks.iter().flat_map(|s| s.unlisted_patch_warnings(&tree, &[])).map(|(_, w)| w).collect();
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            let warned = if warnings.is_empty() { String::new() } else { format!(", {} warning(s)", warnings.len()) };
            println!("ok: {} stack(s), {n} recipes, no problems{warned}", stacks.len());
            Ok(())
        }
    }
}
