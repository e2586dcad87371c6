//! The local wheel index's verbs. Publishing, listing and yanking are the index's own functions
//! (`index::publish_all`, `index::list`, `index::yank`: typed options in, data out); what a
//! command adds to them lives here: which index, its URL, and serving it until a signal.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::index::serve::{ServeError, Server};

/// `--index DIR` if given, else the config's `index-dir`, else `<state-dir>/index`.
pub fn index_dir(flag: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    match flag {
        Some(d) => Ok(d),
        None => Ok(Config::load()?.index_dir()),
    }
}

/// The `file://` URL pip and uv take as `--index-url` for the index at `dir`.
pub fn index_url(dir: &Path) -> std::io::Result<String> {
    Ok(crate::index::file_url(&std::path::absolute(dir)?))
}

/// Serves `server` until SIGINT or SIGTERM.
pub fn index_serve(server: &Server, log: bool) -> Result<(), ServeError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(ServeError::Signal)?;
    }
    server.run(&stop, log)
}
