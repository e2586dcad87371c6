//! Operations: one function per verb (`plan`, `build`, `doctor`, `fetch`, `patch_check`, `patch_diff`,
//! `source`, `clean`, `cache_*`, `lock`, `index_*`, `inspect`, `env`, `verify`), each taking typed options and returning data. The
//! command line (`cli`) parses arguments, calls one operation and prints what it returns.

pub mod build;
pub mod cache;
pub mod env;
pub mod doctor;
pub mod fetch;
pub mod index;
pub mod inspect;
pub mod lock;
pub mod patch;
pub mod plan;
pub mod source;
pub mod verify;

use crate::graph::GraphError;
use crate::host::HostRoot;
use crate::recipe::{Recipe, Stack};
use crate::target::TargetSet;

/// A mistake in what was asked (an option naming a recipe outside the build): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The recipe `name` of `stack`, or an error naming the closest match.
pub fn find_recipe<'a>(stack: &'a Stack, name: &str) -> Result<&'a Recipe, GraphError> {
    stack.recipe(name).ok_or_else(|| GraphError::unknown(stack, name))
}

/// The GPU targets a command works for, and where they came from.
#[derive(Debug, Clone)]
pub struct Targets {
    pub set: TargetSet,
    /// `--target`, the host's card (`the GPU this host has, ...`), or the stack's
    /// `default-targets`.
    pub from: String,
    /// Taken from the host's RDNA1 card, not asked for: worth saying.
    pub from_card: bool,
}

/// `asked` (`--target`), else the host's RDNA1 card's target when every RDNA1 card it has (seen
/// through `root`) is of one kind, else the stack's `default-targets`; refused when the stack
/// serves only some targets (`supported-targets`) and these are not all among them. `build`,
/// `plan`, `fetch`, `env`, `verify` and `doctor` choose alike.
pub fn targets(stack: &Stack, asked: Option<TargetSet>, root: &HostRoot) -> Result<Targets, UsageError> {
    let chosen = match asked {
        Some(set) => Targets { set, from: "--target".into(), from_card: false },
        None => {
            let gpus = crate::host::gpu::detect(root);
            let (set, from) = crate::host::gpu::default_targets(stack, &gpus);
            Targets { set, from, from_card: crate::host::gpu::single_rdna1_target(&gpus).is_some() }
        }
    };
    if let Some(served) = &stack.supported_targets {
        let others: Vec<String> = chosen.set.iter().filter(|t| !served.contains(*t)).map(|t| t.to_string()).collect();
        if !others.is_empty() {
            return Err(UsageError(format!(
                "stack `{}` serves {} only ({}, `supported-targets`), not {}: pass `--target` with one of those, or pick another stack (`rocmforge recipes list`)",
                stack.name,
                served.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
                stack.file,
                others.join(", ")
            )));
        }
    }
    Ok(chosen)
}
