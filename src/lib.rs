//! rocmforge: a from-source build orchestrator for a patched ROCm stack.
//!
//! Data flows one way: recipe (TOML -> typed model) -> graph -> plan -> ... Each module owns one
//! concept; see DESIGN notes in README.md.
pub mod cache;
pub mod cli;
pub mod config;
pub mod deploy;
pub mod diagnostic;
pub mod digest;
pub mod engine;
pub mod external;
pub mod fault;
pub mod fsutil;
pub mod graph;
pub mod index;
pub mod key;
pub mod patch;
pub mod plan;
pub mod progress;
pub mod recipe;
pub mod report;
pub mod source;
pub mod target;
