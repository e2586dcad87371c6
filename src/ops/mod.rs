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
use crate::recipe::{Recipe, Stack};

/// A mistake in what was asked (an option naming a recipe outside the build): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The recipe `name` of `stack`, or an error naming the closest match.
pub fn find_recipe<'a>(stack: &'a Stack, name: &str) -> Result<&'a Recipe, GraphError> {
    stack.recipe(name).ok_or_else(|| GraphError::unknown(stack, name))
}
