//! rocmforge: a from-source build orchestrator for a patched ROCm stack.
//!
//! The modules below are listed in the order data flows through them. A module may use only
//! modules listed above it (a test, `tests/it/layering.rs`, reads every `crate::` path and fails
//! on one against this order):
//!
//! 1. Leaves, used everywhere: `fault` (crash-test points), `digest` (sha256), `fsutil` (atomic
//!    writes, trees), `process` (children in process groups of their own, run until a deadline
//!    and stopped with everything they started; it uses no other module), `diagnostic`
//!    (file:line:col errors), `target` (GPU targets and their spellings),
//!    `offload` (the GPU targets of the device code in libraries, code objects and wheels,
//!    whether installed files cover what a recipe declares, and which need an executable stack),
//!    `config` (user settings), `progress` (the reporting trait; indicatif lives only there),
//!    `layout` (where everything lives on disk), `wheel` (wheel names and versions).
//! 2. The model: `recipe` (TOML -> typed, validated recipes and stacks), `graph` (closure,
//!    order, waves), `host` (the machine: OS, packages, tools, the stack's Python, GPUs, read
//!    through a root; recipes' `[host]` needs checked against it), `installation` (an installed
//!    ROCm, and which recipes it may stand in for), `audit` (what a MIOpen built elsewhere does
//!    on gfx101x, from the kernel sources it embeds, compiled by the stack's checks).
//! 3. Inputs: `patch` (parse, apply, diff), `source` (fetch, verify, check out, patch).
//! 4. Decisions: `key` (what a cache key hashes), `cache` (the `Store` of artifacts), `history`
//!    (what was built last), `plan` (the resolved build: keys, statuses, reasons).
//! 5. Doing: `deploy` (artifacts into the prefix), `index` (the local wheel index), `gpu_code`
//!    (which GPU targets a binary stack's wheels carry, and so the profile a card runs them
//!    under), `engine` (carries out a plan), `report` (status file, build report, trace,
//!    timeline).
//!    After the build: `venv` (the stack's venv, filled with its wheels), `activate` (the shell
//!    lines of `env`), `verify` (the inference and training cases, each under a timeout).
//! 6. Verbs and the command line: `ops` (one function per verb, returning data), `cli`
//!    (parses arguments, calls one op, prints).
pub mod fault;
pub mod digest;
pub mod fsutil;
pub mod process;
pub mod diagnostic;
pub mod target;
pub mod offload;
pub mod config;
pub mod progress;
pub mod layout;
pub mod wheel;
pub mod recipe;
pub mod graph;
pub mod host;
pub mod installation;
pub mod audit;
pub mod patch;
pub mod source;
pub mod key;
pub mod cache;
pub mod history;
pub mod plan;
pub mod deploy;
pub mod index;
pub mod gpu_code;
pub mod engine;
pub mod report;
pub mod venv;
pub mod activate;
pub mod verify;
pub mod ops;
pub mod cli;
