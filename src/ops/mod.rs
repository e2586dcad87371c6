//! Operations: one function per verb, taking typed options and returning data; the CLI parses
//! arguments, calls one and prints what it returns.
pub mod lock;
