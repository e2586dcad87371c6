//! The one integration-test binary: every test of the `rocmforge` binary and of real parts
//! (git daemon, HTTP servers, cmake, hipcc, pip) lives in a module here.

mod support;

mod compilers;
mod engine;
mod example;
mod foundation;
mod index;
mod keys;
mod layering;
mod lock;
mod prebuilt;
mod reap;
mod realstack;
mod report;
mod schedule;
mod sources;
mod wheels;
