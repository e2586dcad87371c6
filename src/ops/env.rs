//! `env`: the activation of a stack (its prefix, its venv, a profile's settings), as data for the
//! command line to render for a shell ([`crate::activate`]), with a comment naming the card the
//! host has and where it was seen (KFD node, PCI id).

use std::path::PathBuf;

use super::UsageError;
use crate::activate::{self, Activation};
use crate::config::Config;
use crate::recipe::{Stack, GFX_OVERRIDE_VAR};
use crate::target::TargetSet;

#[derive(Debug, Clone)]
pub struct EnvRequest {
    pub targets: TargetSet,
    pub prefix: PathBuf,
    /// A profile of the stack (default: the stack's `default-profile`).
    pub profile: Option<String>,
}

/// The lines that activate `stack`, reading the caller's `HSA_OVERRIDE_GFX_VERSION`. On a binary
/// stack the wheels' GPU code picks the profile when none is named ([`crate::gpu_code`]).
pub fn env(cfg: &Config, stack: &Stack, req: &EnvRequest) -> Result<Activation, UsageError> {
    let code = crate::gpu_code::load(&req.prefix);
    let choice = crate::gpu_code::choose(stack, req.profile.as_deref(), &code, &req.targets).map_err(UsageError)?;
    let gpus = crate::host::gpu::detect(&crate::host::HostRoot::from_env());
    Ok(activation(cfg, stack, req, &choice, &gpus))
}

/// [`env`] with the profile already chosen and the GPUs already found (`verify` has both).
pub fn activation(
    cfg: &Config,
    stack: &Stack,
    req: &EnvRequest,
    choice: &crate::gpu_code::Choice<'_>,
    gpus: &[crate::host::gpu::Gpu],
) -> Activation {
    let venv = crate::venv::dir(&cfg.state_dir, &stack.name);
    let installation = cfg.rocm_path.as_deref().map(|p| crate::installation::Installation::open(p, &cfg.state_dir));
    let card = crate::host::gpu::card_line(gpus);
    let mut a = activate::activation(&activate::Request {
        stack,
        prefix: &req.prefix,
        venv: &venv,
        profile: choice.profile,
        targets: &req.targets,
        caller_override: std::env::var(GFX_OVERRIDE_VAR).ok(),
        installation: installation.as_ref(),
        card: Some(&card),
        profile_why: choice.note.as_deref(),
    });
    a.warnings.extend(choice.warning.clone());
    a
}
