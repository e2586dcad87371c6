//! The command line: argument parsing and dispatch. One file per command; each calls into the
//! library and maps failures to the documented exit codes.

mod build;
mod cache;
mod env;
mod completions;
mod doctor;
mod fetch;
mod graph;
mod index;
mod inspect;
mod lock;
mod log;
mod patch;
mod plan;
mod recipes;
mod report;
mod source;
mod status;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::recipe::{pick_valid_stack, RecipeTree, Stack, StackError};
use crate::target::TargetSet;

/// Exit codes, documented in `rocmforge --help` and README.md.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The operation failed (a fetch, a patch, a build step).
    pub const FAILED: u8 = 1;
    /// Bad usage: unknown flag, recipe, stack or GPU target.
    pub const USAGE: u8 = 2;
    /// The recipe tree is invalid (every problem is listed).
    pub const INVALID_RECIPES: u8 = 3;
}

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 operation failed, 2 bad usage (unknown flag, recipe, stack or target),
3 invalid recipe tree.

Recipes are embedded in the binary; --recipes DIR (or ROCMFORGE_RECIPES) uses a tree holding
recipes/ and patches/ side by side instead.";

#[derive(Debug, Parser)]
#[command(name = "rocmforge", version, about = "Build a patched ROCm stack and PyTorch from source for your GPU (gfx1010 and friends)", after_help = AFTER_HELP)]
pub struct Cli {
    /// Directory holding `recipes/` and `patches/` (default: the recipes embedded in rocmforge).
    #[arg(long = "recipes", id = "recipes_dir", global = true, env = "ROCMFORGE_RECIPES", value_name = "DIR")]
    pub recipes: Option<PathBuf>,

    /// Stack to use (a folder of recipes/); default: the stack marked default.
    #[arg(long, global = true, env = "ROCMFORGE_STACK", value_name = "NAME")]
    pub stack: Option<String>,

    /// Use only what is already cached; fail listing every source that would need the network.
    #[arg(long, global = true, env = "ROCMFORGE_OFFLINE")]
    pub offline: bool,

    /// An installed ROCm (e.g. /opt/rocm) whose components are used instead of built
    /// (recognised by each recipe's `[external]`).
    #[arg(long = "rocm-path", global = true, value_name = "DIR")]
    pub rocm_path: Option<PathBuf>,

    /// With --rocm-path: build these recipes from source although the installation has them.
    #[arg(long = "from-source", global = true, value_name = "RECIPE", value_delimiter = ',')]
    pub from_source: Vec<String>,

    /// With --rocm-path: take these patched recipes from the installation anyway (their fix is
    /// then missing, and the plan and the build summary say so).
    #[arg(long = "take-installed", global = true, value_name = "RECIPE", value_delimiter = ',')]
    pub take_installed: Vec<String>,

    /// With --rocm-path: accept components of these versions (major.minor, comma-separated, or
    /// `any`) in place of the stack's; without it another version is refused.
    #[arg(long = "accept-rocm-version", global = true, value_name = "X.Y[,X.Y]")]
    pub accept_rocm_version: Option<String>,

    /// Only warnings and errors.
    #[arg(long, short = 'q', global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Plain lines (no bars), with every step's command and log path.
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,

    /// A shared artifact cache over HTTP (bazel-remote layout: /cas/, /ac/); overrides
    /// `cache-url` in the config and ROCMFORGE_CACHE_URL.
    #[arg(long = "cache-url", global = true, value_name = "URL")]
    pub cache_url: Option<String>,

    /// Take artifacts from the shared cache, never upload to it.
    #[arg(long = "cache-read-only", global = true)]
    pub cache_read_only: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build recipes and what they need: cached artifacts are reused, interrupted builds resume.
    Build(build::Args),
    /// Inspect and maintain the artifact cache.
    #[command(subcommand)]
    Cache(cache::Cmd),
    /// Remove work dirs (sources, build trees) of recipes whose artifacts are stored.
    Clean(cache::CleanArgs),
    /// Show what would be built, in order, from what, for which targets, and why.
    Plan(plan::Args),
    /// Is this host ready? OS, compilers, CMake, Python, the recipes' host needs (with the
    /// command that installs what is missing), disk, RAM, GPUs, groups, a leftover override.
    Doctor(doctor::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
    /// Print the man page (roff): `rocmforge man > rocmforge.1`.
    Man(completions::ManArgs),
    /// Print the dependency graph of recipes (dot or json).
    Graph(graph::Args),
    /// List, show and check recipes.
    #[command(subcommand)]
    Recipes(recipes::Cmd),
    /// The local wheel index pip and uv install from: publish, list, yank, serve.
    Index(index::Args),
    /// Pin unpinned recipes (git tags to commits, downloads to sha256) in the stack's lock file.
    Lock(lock::Args),
    /// Fetch every source of the recipes' closure and check every patch series (the preflight).
    Fetch(fetch::Args),
    /// Check patch series, or turn edits of a work tree into the next patch.
    #[command(subcommand)]
    Patch(patch::Cmd),
    /// Prepare a recipe's patched source tree and print its path.
    Source(source::Args),
    /// Where is the build? (From another terminal: running recipes, steps, newest log lines.)
    Status(status::Args),
    /// Print a recipe's step logs (all steps in order, or one); --follow a running build.
    Log(log::Args),
    /// Print the path of the latest build report (timeline.html, trace.json, report.json).
    Report(report::Args),
    /// The GPU targets of the device code in libraries, objects, code objects and wheels, and the
    /// libraries and executables that need an executable stack.
    Inspect(inspect::Args),
    /// Print the shell lines that activate a stack: prefix, venv, a profile's MIOpen settings.
    Env(env::Args),
    /// Run the Conv2d/batchnorm smoke test on the GPU, each case in its own process under a timeout.
    Verify(verify::Args),
}

/// The recipes a command works on, and the GPU targets (shared by `build`, `plan`, `fetch`).
#[derive(Debug, clap::Args)]
pub struct Selection {
    /// Recipes to work on (their dependencies are included).
    #[arg(required = true, value_name = "RECIPE")]
    pub recipes: Vec<String>,
    /// GPU targets, comma separated (e.g. gfx1010,gfx1012); default: the stack's.
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
}

/// A failure with its exit code; `main` prints the error chain.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn new(code: u8, error: impl Into<anyhow::Error>) -> Failure {
        Failure { code, error: error.into() }
    }
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure::new(exit::USAGE, error)
    }
    pub fn failed(error: impl Into<anyhow::Error>) -> Failure {
        Failure::new(exit::FAILED, error)
    }
    /// An operation's error: bad usage (exit 2) when it is about what was asked (an unknown
    /// recipe, an option outside the build), else a failure (exit 1).
    pub fn from_op(error: impl Into<anyhow::Error>) -> Failure {
        let error = error.into();
        let usage = error.downcast_ref::<crate::ops::UsageError>().is_some()
            || error.downcast_ref::<crate::graph::GraphError>().is_some();
        Failure::new(if usage { exit::USAGE } else { exit::FAILED }, error)
    }
}

pub type CliResult = Result<(), Failure>;

/// What every command needs: the recipe tree and the global options.
pub struct Context {
    pub cli_recipes: Option<PathBuf>,
    pub cli_stack: Option<String>,
    pub offline: bool,
    pub rocm_path: Option<PathBuf>,
    pub installation: crate::installation::Choices,
    pub verbosity: crate::progress::Verbosity,
    pub cache_url: Option<String>,
    pub cache_read_only: bool,
}

impl Context {
    pub fn tree(&self) -> Result<RecipeTree, Failure> {
        match &self.cli_recipes {
            None => Ok(RecipeTree::embedded()),
            Some(dir) => RecipeTree::from_dir(dir).map_err(Failure::usage),
        }
    }

    /// The stack, with its lock file applied (unlocked recipes pinned by `rocmforge lock`).
    pub fn stack(&self, tree: &RecipeTree) -> Result<Stack, Failure> {
        let mut stack = self.stack_unlocked(tree)?;
        let cfg = self.config()?;
        crate::recipe::lockfile::apply(&mut stack, tree, &cfg.state_dir).map_err(Failure::usage)?;
        Ok(stack)
    }

    /// The stack with every source of the closure of `recipes` pinned: the lock file applied,
    /// and what is still unpinned pinned now and recorded there (each new pin printed), as cargo
    /// writes Cargo.lock; with `locked`, an unpinned source is an error naming each one.
    pub fn pinned_stack(&self, tree: &RecipeTree, recipes: &[String], locked: bool) -> Result<Stack, Failure> {
        let stack = self.stack_unlocked(tree)?;
        let cfg = self.config()?;
        let pinned = crate::ops::lock::pin_closure(&stack, tree, &cfg, recipes, locked, &crate::progress::Lines::new())
            .map_err(lock_failure)?;
        if !pinned.added.is_empty() && self.verbosity != crate::progress::Verbosity::Quiet {
            for p in &pinned.added {
                eprintln!("pinned {}: {}", p.recipe, p.describe());
            }
            eprintln!("wrote {} pin(s) to {}", pinned.added.len(), pinned.path.display());
        }
        Ok(pinned.stack)
    }

    /// `plan --locked`: fails as `build --locked` would when a source of the closure of `recipes`
    /// has no pin.
    pub fn check_locked(&self, tree: &RecipeTree, recipes: &[String]) -> Result<(), Failure> {
        let stack = self.stack_unlocked(tree)?;
        crate::ops::lock::check_locked(&stack, tree, &self.config()?, recipes).map_err(lock_failure)
    }

    /// The stack as its recipe files say, without the lock applied.
    pub fn stack_unlocked(&self, tree: &RecipeTree) -> Result<Stack, Failure> {
        self.stack_named(tree, self.cli_stack.as_deref())
    }

    /// The stack `name` (the default stack when `None`), without the lock applied.
    pub fn stack_named(&self, tree: &RecipeTree, name: Option<&str>) -> Result<Stack, Failure> {
        // Every command validates a recipe tree of the user's as `recipes check` does: a problem
        // anywhere in it (another stack, two default stacks) is reported the same way by all of
        // them. The embedded tree is the one the binary was tested with (`recipes check` in the
        // test suite): only the stack asked for is loaded, which a no-op build feels.
        let picked = match tree.origin {
            crate::recipe::Origin::Embedded => crate::recipe::pick_stack(tree, name),
            crate::recipe::Origin::Dir(_) => pick_valid_stack(tree, name),
        };
        picked.map_err(|e| match e {
            StackError::Invalid(_) => Failure::new(exit::INVALID_RECIPES, e),
            _ => Failure::usage(e),
        })
    }

    /// The user configuration (file, environment), with global flags applied.
    pub fn config(&self) -> Result<crate::config::Config, Failure> {
        let mut cfg = crate::config::Config::load().map_err(Failure::usage)?;
        cfg.offline |= self.offline;
        if let Some(p) = &self.rocm_path {
            cfg.rocm_path = Some(p.clone());
        }
        if let Some(u) = &self.cache_url {
            cfg.remote.url = Some(u.clone()).filter(|u| !u.is_empty());
        }
        cfg.remote.read_only |= self.cache_read_only;
        Ok(cfg)
    }

    /// The stack a command about past or running builds means: `--stack`, else the stack built
    /// most recently, else the default stack.
    pub fn build_stack(&self, cfg: &crate::config::Config) -> Result<String, Failure> {
        if let Some(s) = &self.cli_stack {
            return Ok(s.clone());
        }
        if let Ok((_, rec)) = crate::report::status::read(&cfg.state_dir, None) {
            return Ok(rec.stack);
        }
        let tree = self.tree()?;
        Ok(self.stack(&tree)?.name)
    }

    /// `--prefix` if given, else the config's or `<state-dir>/prefix/<stack>`; absolute, since
    /// it is part of every cache key.
    pub fn prefix(&self, cfg: &crate::config::Config, stack: &Stack, flag: Option<&std::path::Path>) -> PathBuf {
        let p = flag.map(PathBuf::from).unwrap_or_else(|| cfg.prefix_for(&stack.name));
        std::path::absolute(&p).unwrap_or(p)
    }

    /// The targets `ops::targets` chooses for `--target` (`spec`); one taken from the host's
    /// card is said on stderr.
    pub fn targets(&self, stack: &Stack, spec: Option<&str>) -> Result<TargetSet, Failure> {
        let asked = spec.map(TargetSet::parse).transpose().map_err(Failure::usage)?;
        let chosen = crate::ops::targets(stack, asked, &crate::host::HostRoot::from_env()).map_err(Failure::usage)?;
        if chosen.from_card && self.verbosity != crate::progress::Verbosity::Quiet {
            eprintln!("note: no --target given: building for {}, from {}", chosen.set, chosen.from);
        }
        Ok(chosen.set)
    }
}

/// A pinning failure: bad usage when it is about what was asked.
fn lock_failure(e: crate::ops::lock::LockError) -> Failure {
    use crate::ops::lock::LockError;
    match e {
        LockError::Graph(_) | LockError::UnknownRecipe(_) => Failure::usage(e),
        _ => Failure::failed(e),
    }
}

pub fn run(cli: Cli) -> CliResult {
    use crate::progress::Verbosity;
    let verbosity = if cli.quiet {
        Verbosity::Quiet
    } else if cli.verbose {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    };
    let ctx = Context {
        cli_recipes: cli.recipes,
        cli_stack: cli.stack,
        offline: cli.offline,
        rocm_path: cli.rocm_path,
        installation: crate::installation::Choices {
            from_source: cli.from_source.into_iter().collect(),
            take_installed: cli.take_installed.into_iter().collect(),
            accept_version: cli.accept_rocm_version,
        },
        verbosity,
        cache_url: cli.cache_url,
        cache_read_only: cli.cache_read_only,
    };
    match cli.command {
        Command::Build(a) => build::run(&ctx, a),
        Command::Plan(a) => plan::run(&ctx, a),
        Command::Doctor(a) => doctor::run(&ctx, a),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => completions::man(a),
        Command::Cache(c) => cache::run(&ctx, c),
        Command::Clean(a) => cache::clean(&ctx, a),
        Command::Graph(a) => graph::run(&ctx, a),
        Command::Recipes(c) => recipes::run(&ctx, c),
        Command::Index(a) => index::run(&ctx, a),
        Command::Fetch(a) => fetch::run(&ctx, a),
        Command::Lock(a) => lock::run(&ctx, a),
        Command::Patch(c) => patch::run(&ctx, c),
        Command::Source(a) => source::run(&ctx, a),
        Command::Status(a) => status::run(&ctx, a),
        Command::Log(a) => log::run(&ctx, a),
        Command::Report(a) => report::run(&ctx, a),
        Command::Inspect(a) => inspect::run(&ctx, a),
        Command::Env(a) => env::run(&ctx, a),
        Command::Verify(a) => verify::run(&ctx, a),
    }
}

/// `fetch` and `patch check`: prints one checked recipe as it comes.
fn print_checked(c: &crate::ops::fetch::Checked) {
    match &c.result {
        Ok(id) => println!("ok    {:<24} {id}", c.recipe),
        Err(_) => println!("FAIL  {:<24} {}", c.recipe, c.source),
    }
}

/// The summary line, or every failure in one error.
fn summary(checked: &[crate::ops::fetch::Checked], what: &str, offline: bool) -> CliResult {
    let failures: Vec<String> = checked
        .iter()
        .filter_map(|c| c.result.as_ref().err().map(|e| format!("{}: {}", c.recipe, one_line(e))))
        .collect();
    let count = checked.len();
    if failures.is_empty() {
        println!("all {count} {what} ok{}", if offline { " (offline: from the cache)" } else { "" });
        return Ok(());
    }
    let mut msg = format!("{} of {count} {what} failed{}:", failures.len(), if offline { " (offline)" } else { "" });
    for f in &failures {
        msg.push_str(&format!("\n  - {}", f.replace('\n', "\n    ")));
    }
    Err(Failure::failed(anyhow::anyhow!(msg)))
}

pub use crate::diagnostic::one_line;

/// Renders a failure as cargo does: the error, then each cause on its own line.
pub fn render_failure(f: &Failure) -> String {
    let mut s = String::new();
    let top = f.error.to_string();
    // Recipe diagnostics already carry their own `error:` headings.
    if top.starts_with("error: ") {
        s.push_str(&top);
        s.push('\n');
    } else {
        s.push_str(&format!("error: {top}\n"));
    }
    for cause in f.error.chain().skip(1) {
        s.push_str(&format!("  caused by: {cause}\n"));
    }
    s
}

pub fn main() -> ExitCode {
    // `rocmforge __supervise ...`: this binary as a child's supervisor (hidden; see process::supervisor).
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == crate::process::supervisor::SUPERVISE) {
        return crate::process::supervisor::main(args.collect());
    }
    crate::process::supervisor::enable();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(f) => {
            eprint!("{}", render_failure(&f));
            ExitCode::from(f.code)
        }
    }
}

/// `-j N`: taken with a sign too (`allow_negative_numbers` on the args), so `-j -1` gets this
/// message, not clap's tip to write `-- -1`, which would make `-1` a recipe.
pub fn job_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i128>() {
        Ok(n) if n < 1 => Err(format!(
            "{n} jobs would build nothing: the job count must be at least 1 (the default is the number of cores)"
        )),
        Ok(n) => usize::try_from(n).map_err(|_| format!("`{s}` jobs is more than this machine can count")),
        Err(_) => Err(format!("`{s}` is not a number of jobs: give 1 or more")),
    }
}
