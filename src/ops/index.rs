//! The local wheel index's verbs. Publishing, listing and yanking are the index's own functions
//! (`index::publish_all`, `index::list`, `index::yank`: typed options in, data out); what a
//! command adds to them lives here: its URL, and serving it until a signal.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::index::serve::{ServeError, Server};

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
