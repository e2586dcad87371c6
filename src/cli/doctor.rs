//! `rocmforge doctor`: is this host ready for the night? Exit 1 when a need of the recipes is
//! missing (a build would refuse to start), 0 otherwise; warnings do not change it.

use std::path::PathBuf;

use super::{CliResult, Context, Failure};
use crate::engine::budget;
use crate::fsutil::human_size;
use crate::host::needs::State;
use crate::ops::doctor::{doctor, Disk, Doctor, DoctorRequest, InstallationReport, MemoryFit};
use crate::target::TargetSet;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes whose closure is checked (default: every recipe of the stack).
    #[arg(value_name = "RECIPE")]
    pub recipes: Vec<String>,
    /// GPU targets the build is for (default: the host's RDNA1 card, else the stack's).
    #[arg(long, short = 't', value_name = "TARGETS")]
    pub target: Option<String>,
    /// The job budget RAM is checked against (default: number of cores).
    #[arg(long, short = 'j', value_parser = super::job_count, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// With --rocm-path: do not compile the kernels of its libMIOpen (by default the stack's
    /// gfx101x checks compile them for the targets).
    #[arg(long)]
    pub no_kernel_checks: bool,
}

pub fn run(ctx: &Context, args: Args) -> CliResult {
    let tree = ctx.tree()?;
    let stack = ctx.stack(&tree)?;
    let cfg = ctx.config()?;
    let req = DoctorRequest {
        recipes: args.recipes,
        targets: args.target.as_deref().map(TargetSet::parse).transpose().map_err(Failure::usage)?,
        jobs: args.jobs.unwrap_or_else(budget::default_jobs).max(1),
        kernel_audit: (!args.no_kernel_checks).then(|| crate::audit::Settings {
            targets: Vec::new(),
            work: PathBuf::new(),
            rocm: None,
            checks: tree.clone(),
            host: "/".into(),
            sweep_only: None,
        }),
        installation: ctx.installation.clone(),
    };
    let d = doctor(&cfg, &stack, &req).map_err(Failure::from_op)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&d).map_err(Failure::failed)?);
    } else {
        print!("{}", render(&d));
    }
    if d.has_problems() {
        let n = d.check.missing().count();
        return Err(Failure::failed(anyhow::anyhow!("{n} host need(s) missing: a build would refuse to start")));
    }
    Ok(())
}

fn render(d: &Doctor) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<10} {v}\n"));
    let os = &d.check.os;
    let pm = if os.is_debian_like() {
        " (dpkg, apt-get)"
    } else {
        " (no package names known: recipes name Debian/Ubuntu packages)"
    };
    line("os", format!("{}{pm}", os.describe()));
    line(
        "libc",
        match &d.glibc {
            Some(g) => g.describe(),
            None => "unknown (no glibc libc.so.6 found)".into(),
        },
    );
    for t in &d.tools {
        let v = match (&t.path, &t.version) {
            (Some(p), Some(v)) => format!("{v} ({})", p.display()),
            (Some(p), None) => format!("{} (no --version)", p.display()),
            (None, _) => "not on PATH".to_string(),
        };
        line(&t.name, v);
    }
    line("memory", d.memory.as_ref().map_or_else(|| "unknown (no /proc/meminfo)".into(), memory));
    line("disk", d.disk.as_ref().map_or_else(|| "unknown".into(), disk));
    for o in &d.other_disks {
        line("disk", format!("{} free at {} ({})", human_size(o.free), o.path.display(), o.what));
    }
    if d.gpus.is_empty() {
        line("gpu", "none seen".into());
    }
    for g in &d.gpus {
        line("gpu", g.describe());
    }
    line("targets", format!("{} (from {})", d.targets, d.targets_from));
    if let Some(i) = &d.installation {
        line("rocm", format!("{} ({})", i.found, i.from));
        line("short night", short_night(i));
    }
    let groups: Vec<String> = d
        .account
        .groups
        .iter()
        .map(|(g, exists, member)| match (exists, member) {
            (false, _) => format!("{g}: no such group"),
            (true, true) => format!("{g}: member"),
            (true, false) => format!("{g}: not a member"),
        })
        .collect();
    line(
        "groups",
        format!("{} ({}){}", d.account.user, groups.join(", "), if d.account.uid == 0 { " [root]" } else { "" }),
    );
    line(
        "compilers",
        match &d.compiler_cache {
            Some(c) if c == "none" => "no compiler cache, no distcc".into(),
            Some(c) => format!("{c} in front of them"),
            None => "a build would refuse to start (below)".into(),
        },
    );
    if let Some(w) = &d.wheels {
        line("wheels", w.clone());
    }
    line(
        "override",
        d.hsa_override
            .as_ref()
            .map(|v| format!("HSA_OVERRIDE_GFX_VERSION={v}"))
            .unwrap_or_else(|| "HSA_OVERRIDE_GFX_VERSION not set".into()),
    );

    s.push_str(&needs(d));
    for n in &d.check.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    if let Some(a) = &d.miopen_audit {
        s.push_str(&format!("MIOpen kernels of the --rocm-path: {}", a.render()));
    }
    for w in &d.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s
}

/// `64.0 GiB total, 60.0 GiB available; pytorch needs 4 GB per job: 8 of 8 jobs at once`.
fn memory(m: &MemoryFit) -> String {
    format!(
        "{} total, {} available; {}",
        human_size(m.memory.total),
        human_size(m.memory.available),
        match &m.heaviest {
            Some((r, gb)) => format!("{r} needs {gb} GB per job: {} of {} jobs at once", m.jobs_that_fit, m.jobs),
            None => format!("{} jobs", m.jobs),
        }
    )
}

/// The work dir's free space, against a whole build of the stack.
fn disk(disk: &Disk) -> String {
    format!(
        "{} free at {}{}{}",
        human_size(disk.free),
        disk.path.display(),
        disk.estimate.map(|e| format!(" (a whole build of the stack: about {})", human_size(e))).unwrap_or_default(),
        if disk.also.is_empty() { String::new() } else { format!("; the {} there too", disk.also.join(" and ")) }
    )
}

/// What a build on the installed ROCm takes from it, builds and refuses.
fn short_night(i: &InstallationReport) -> String {
    format!(
        "takes {} recipe(s) from it ({}); builds {} it has: {}; builds {} it lacks{}",
        i.taken.len(),
        if i.taken.is_empty() { "none".to_string() } else { i.taken.join(", ") },
        i.built.len(),
        if i.built.is_empty() {
            "none".to_string()
        } else {
            i.built.iter().map(|(n, why)| format!("{n} ({why})")).collect::<Vec<_>>().join("; ")
        },
        i.absent.len(),
        if i.refused.is_empty() {
            String::new()
        } else {
            format!(
                "; refuses {} of another version ({}): see `rocmforge plan --rocm-path`",
                i.refused.len(),
                i.refused.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            )
        }
    )
}

/// The host needs of the recipes, each with what was found and what to do, then the install line.
fn needs(d: &Doctor) -> String {
    let mut s = String::new();
    let count = |st: State| d.check.needs.iter().filter(|n| n.state == st).count();
    let (ok, missing, unchecked) = (count(State::Ok), count(State::Missing), count(State::Unchecked));
    s.push_str(&format!(
        "\nhost needs of {} recipe(s) of stack `{}`: {ok} met, {missing} missing{}\n",
        d.recipes,
        d.stack,
        if unchecked > 0 { format!(", {unchecked} not checked") } else { String::new() }
    ));
    for n in &d.check.needs {
        let mark = match n.state {
            State::Ok => "ok     ",
            State::Missing => "MISSING",
            State::Unchecked => "?      ",
        };
        let found = n.found.as_deref().map(|f| format!(" [{f}]")).unwrap_or_default();
        let recipes = match n.recipes.len() {
            0..=4 => n.recipes.join(", "),
            k => format!("{} and {} more", n.recipes[..3].join(", "), k - 3),
        };
        s.push_str(&format!("  {mark} {:<10} {}{found}  ({recipes})\n", n.kind, n.name));
        if let (State::Missing, Some(fix)) = (n.state, &n.fix) {
            s.push_str(&format!("           what to do: {fix}\n"));
        }
    }
    if !d.check.fixes.is_empty() {
        s.push_str("install what is missing (apt-get as root):\n");
        for f in &d.check.fixes {
            s.push_str(&format!("  {f}\n"));
        }
    }
    s
}
