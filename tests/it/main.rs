//! The one integration-test binary: every test of the `rocmforge` binary and of real parts
//! (git daemon, HTTP servers, cmake, hipcc, pip) lives in a module here.

mod support;

mod batchnorm_check;
mod completions;
mod doctor;
mod compilers;
mod engine;
mod env;
mod example;
mod fallback;
mod hipblaslt_standin;
mod foundation;
mod index;
mod inspect;
mod installation;
mod keys;
mod layering;
mod legacy_ck;
mod lock;
mod lookback_fence;
mod miopen_audit;
mod miopen_audit_sweep;
mod memory;
mod miopen_sweep;
mod prebuilt;
mod proofs;
mod reap;
mod remote;
mod realstack;
mod report;
mod schedule;
mod sources;
mod triton_check;
mod undeclared;
mod upstream_edges;
mod verify;
mod wheels;
