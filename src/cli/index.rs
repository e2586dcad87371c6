//! `rocmforge index publish|list|yank|serve`: the local wheel index.

use std::io::Write;
use std::path::PathBuf;

use super::{CliResult, Context, Failure};
use crate::index::{self, serve, IndexError, PublishOutcome, Selector};
use crate::ops::index::{index_serve, index_url};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The index directory (default: the stack's: `index-dir` from the config file, else
    /// <state-dir>/index, with the stack's `index-path` below it).
    #[arg(long = "index", global = true, env = "ROCMFORGE_INDEX_DIR", value_name = "DIR")]
    pub index: Option<PathBuf>,

    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Publish wheels (all or none: every wheel is checked before any is written). A file
    /// already published with the same bytes is left as is; with other bytes it is refused.
    Publish {
        #[arg(required = true, value_name = "WHEEL")]
        wheels: Vec<PathBuf>,
    },
    /// List projects, versions and files.
    List {
        /// Machine-readable output (the index state).
        #[arg(long)]
        json: bool,
    },
    /// Yank a file or a whole release (PEP 592): pip and uv skip it unless pinned exactly.
    Yank {
        /// A wheel filename, or a project name followed by VERSION.
        #[arg(value_name = "FILE|PROJECT")]
        what: String,
        /// The release to yank, when PROJECT is given.
        #[arg(value_name = "VERSION")]
        version: Option<String>,
        /// Why (shown by pip and uv to whoever still installs it).
        #[arg(long, default_value = "")]
        reason: String,
        /// Un-yank instead.
        #[arg(long, conflicts_with = "reason")]
        undo: bool,
    },
    /// Print the index's `file://` URL, for `pip install --index-url "$(rocmforge index url)"`.
    Url,
    /// Serve the index read-only over HTTP (HTML, or PEP 691 JSON on request) until Ctrl-C.
    /// The first line on stdout is the index URL (the real port when :0 is given).
    Serve {
        /// Address to listen on; anything but loopback exposes the index to the network.
        #[arg(long, default_value = "127.0.0.1:8000", value_name = "HOST:PORT")]
        bind: String,
        /// Do not log requests on stderr.
        #[arg(long, short)]
        quiet: bool,
    },
}

fn index_failure(e: IndexError) -> Failure {
    match e {
        IndexError::Wheel { .. } | IndexError::NotFound(_) => Failure::usage(e),
        e => Failure::failed(e),
    }
}

/// `--index DIR` (or ROCMFORGE_INDEX_DIR), else the stack's index: `index-dir` from the config
/// (else <state-dir>/index), and below it the stack's `index-path` if it has one. The stack is
/// `--stack`, else the one built last, else the default one.
fn index_dir(ctx: &Context, flag: Option<PathBuf>) -> Result<PathBuf, Failure> {
    if let Some(d) = flag {
        return Ok(d);
    }
    let cfg = ctx.config()?;
    let name = ctx.build_stack(&cfg)?;
    let stack = ctx.stack_named(&ctx.tree()?, Some(&name))?;
    Ok(index::stack_dir(&cfg.index_dir(), &stack))
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let dir = index_dir(ctx, args.index)?;
    match args.cmd {
        Cmd::Publish { wheels } => {
            let reports = index::publish_all(&dir, &wheels).map_err(index_failure)?;
            for r in &reports {
                let what = match r.outcome {
                    PublishOutcome::Published => "published",
                    PublishOutcome::AlreadyPresent => "unchanged",
                    PublishOutcome::Repaired => "repaired",
                };
                if let Some(found) = &r.found_sha256 {
                    eprintln!(
                        "warning: `{}` in the index was altered on disk (sha256 {found}); replaced with the published bytes",
                        r.filename
                    );
                }
                println!("{what:<10} {}  (sha256 {})", r.filename, r.sha256);
            }
            println!("index: {}", dir.join("simple").display());
            Ok(())
        }
        Cmd::List { json } => {
            let state = index::list(&dir).map_err(index_failure)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&state).map_err(Failure::failed)?);
                return Ok(());
            }
            if state.projects.is_empty() {
                println!("the index at {} is empty", dir.display());
            }
            for (normalized, project) in &state.projects {
                println!("{normalized}");
                for f in &project.files {
                    let yanked = match &f.yanked {
                        None => String::new(),
                        Some(r) if r.is_empty() => "  [yanked]".into(),
                        Some(r) => format!("  [yanked: {r}]"),
                    };
                    println!(
                        "  {:<36} {}  sha256:{}{yanked}",
                        f.version,
                        f.filename,
                        &f.sha256[..f.sha256.len().min(12)]
                    );
                }
            }
            Ok(())
        }
        Cmd::Yank { what, version, reason, undo } => {
            let selector = match version {
                Some(v) => Selector::Release { project: what, version: v },
                None if what.ends_with(".whl") => Selector::File(what),
                None => {
                    return Err(Failure::usage(anyhow::anyhow!("give a wheel filename, or a project and a VERSION")))
                }
            };
            let changed = index::yank(&dir, &selector, (!undo).then_some(reason.as_str())).map_err(index_failure)?;
            let verb = if undo { "un-yanked" } else { "yanked" };
            if changed.is_empty() {
                println!("nothing to do: {selector} is already {verb}");
            }
            for f in changed {
                println!("{verb} {f}");
            }
            Ok(())
        }
        Cmd::Url => {
            println!("{}", index_url(&dir).map_err(Failure::failed)?);
            Ok(())
        }
        Cmd::Serve { bind, quiet } => {
            let server = serve::Server::bind(&dir, &bind).map_err(|e| match e {
                serve::ServeError::BadAddress(_) => Failure::usage(e),
                e => Failure::failed(e),
            })?;
            println!("{}", server.url());
            let _ = std::io::stdout().flush();
            eprintln!("serving {} read-only at {} (Ctrl-C stops)", dir.display(), server.url());
            if !server.addr().ip().is_loopback() {
                eprintln!(
                    "warning: listening on {}: anyone who can reach this host can download the index",
                    server.addr()
                );
            }
            if !dir.join(index::STATE_FILE).exists() {
                eprintln!(
                    "note: nothing is published in {} yet; the index fills as wheels are published",
                    dir.display()
                );
            }
            index_serve(&server, !quiet).map_err(Failure::failed)?;
            eprintln!("stopped");
            Ok(())
        }
    }
}
