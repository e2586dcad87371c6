//! `inspect`: the GPU targets of the device code in files, directories and wheels, and the stack
//! each host library and executable asks for.

use std::path::PathBuf;

use serde::Serialize;

use crate::offload::{self, Inspected};

/// What `inspect` found in everything it was given.
#[derive(Debug, Default, Serialize)]
pub struct InspectReport {
    /// Every ELF file, bundle and wheel member read, in the order given (directories sorted).
    pub files: Vec<Inspected>,
    /// Files under the given directories that are neither ELF, bundle nor wheel.
    pub skipped: usize,
    /// Files that could not be read, each with why (the rest were read).
    pub errors: Vec<String>,
    /// Each libMIOpen given directly: what its embedded kernels do on the targets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub miopen: Vec<crate::audit::Audit>,
}

/// Reads every path (file, directory or `.whl`); an unreadable or malformed file is recorded
/// in `errors`, and the others are still read.
pub fn inspect(paths: &[PathBuf], audit: Option<&crate::audit::Settings>) -> InspectReport {
    let mut report = InspectReport::default();
    for p in paths {
        let found = offload::inspect_path(p);
        report.files.extend(found.files);
        report.skipped += found.skipped;
        report.errors.extend(found.errors.iter().map(|e| e.to_string()));
    }
    // Host libraries whose device code went into `.kpack` archives: among the files read, or
    // on disk inside a directory given (never outside what was given).
    let dirs: Vec<PathBuf> = paths.iter().filter(|p| p.is_dir()).cloned().collect();
    report.errors.extend(offload::follow_markers(&mut report.files, &dirs).iter().map(|e| e.to_string()));
    // A libMIOpen given directly (not one found in a directory): what its kernels do.
    if let Some(settings) = audit {
        let libraries = paths.iter().filter(|p| p.is_file() && offload::miopen::is_miopen_name(p));
        report.miopen.extend(libraries.enumerate().map(|(i, lib)| settings.audit(i, lib)));
    }
    report
}
