//! `rocmforge completions <shell>` and `rocmforge man`: what users of a cargo-style CLI expect,
//! generated from the same clap definition the parser uses (clap_complete, clap_mangen), so they
//! never drift from the commands.

use clap::CommandFactory;

use super::{Cli, CliResult, Failure};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {}

pub fn run(args: Args) -> CliResult {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "rocmforge", &mut std::io::stdout());
    Ok(())
}

/// The man page of `rocmforge`, with a section for every subcommand (`rocmforge-build(1)` is not
/// a separate page: one page, as `man rocmforge` finds it).
pub fn man(_args: ManArgs) -> CliResult {
    let cmd = Cli::command();
    let mut out: Vec<u8> = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut out).map_err(Failure::failed)?;
    man.render_name_section(&mut out).map_err(Failure::failed)?;
    man.render_synopsis_section(&mut out).map_err(Failure::failed)?;
    man.render_description_section(&mut out).map_err(Failure::failed)?;
    man.render_options_section(&mut out).map_err(Failure::failed)?;
    man.render_subcommands_section(&mut out).map_err(Failure::failed)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_command(&mut out, &format!("rocmforge {}", sub.get_name()), sub)?;
    }
    man.render_extra_section(&mut out).map_err(Failure::failed)?;
    man.render_version_section(&mut out).map_err(Failure::failed)?;
    man.render_authors_section(&mut out).map_err(Failure::failed)?;
    std::io::Write::write_all(&mut std::io::stdout(), &out).map_err(Failure::failed)?;
    Ok(())
}

/// One subcommand as a section of the page: its usage, what it does, its options, and its own
/// subcommands (`rocmforge cache list`).
fn render_command(out: &mut Vec<u8>, title: &str, cmd: &clap::Command) -> CliResult {
    let mut roff = clap_mangen::roff::Roff::new();
    roff.control("SH", [title.to_uppercase().as_str()]);
    let about = cmd.get_long_about().or(cmd.get_about()).map(|a| a.to_string()).unwrap_or_default();
    let usage = cmd.clone().bin_name(title).render_usage().to_string();
    roff.text([clap_mangen::roff::bold(usage.trim_start_matches("Usage: "))]);
    roff.control("PP", []);
    roff.text([clap_mangen::roff::roman(about)]);
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set()) {
        let name = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("-{s}, --{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => format!(
                "<{}>",
                arg.get_value_names().and_then(|v| v.first()).map(|v| v.as_str()).unwrap_or(arg.get_id().as_str())
            ),
        };
        roff.control("TP", []);
        roff.text([clap_mangen::roff::bold(name)]);
        roff.text([clap_mangen::roff::roman(arg.get_help().map(|h| h.to_string()).unwrap_or_default())]);
    }
    roff.to_writer(out).map_err(Failure::failed)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_command(out, &format!("{title} {}", sub.get_name()), sub)?;
    }
    Ok(())
}
