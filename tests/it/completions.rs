//! `rocmforge completions <shell>` and `rocmforge man`: generated from the parser, so they name
//! every command; bash parses the bash script and `man -l` renders the page.

use std::io::Write;

use crate::support::rocmforge;

/// The visible subcommands, as `rocmforge --help` lists them.
fn subcommands() -> Vec<String> {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path()).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let list: Vec<String> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        // Wrapped descriptions continue on lines indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    for c in ["build", "plan", "doctor", "completions", "man", "cache", "index"] {
        assert!(list.iter().any(|x| x == c), "{c} not in --help: {list:?}");
    }
    list
}

fn run(args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = rocmforge(home.path()).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_name_every_command_and_bash_parses_them() {
    let commands = subcommands();
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell} completions lack `{c}`");
        }
        // Options of a subcommand too.
        assert!(script.contains("keep-going") && script.contains("json"), "{shell}");
    }
    let script = run(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rocmforge.bash");
    std::fs::write(&file, &script).unwrap();
    let out = std::process::Command::new("bash").arg("-n").arg(&file).output().expect("bash is needed");
    assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
    // Sourced in a real bash, it registers the completion function for `rocmforge`.
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("source {} && complete -p rocmforge", file.display())])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("rocmforge"), "{}", String::from_utf8_lossy(&out.stderr));
    // An unknown shell is bad usage.
    let home = tempfile::tempdir().unwrap();
    assert_eq!(rocmforge(home.path()).args(["completions", "tcsh"]).output().unwrap().status.code(), Some(2));
}

#[test]
fn man_page_renders_with_every_command() {
    let page = run(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH rocmforge"), "{}", &page[..200.min(page.len())]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rocmforge.1");
    std::fs::File::create(&file).unwrap().write_all(page.as_bytes()).unwrap();
    let out = std::process::Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .expect("man (man-db) is needed: ci/setup.sh installs it");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("NAME") && text.contains("rocmforge"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for c in subcommands() {
        assert!(
            text.contains(&format!("ROCMFORGE {}", c.to_uppercase())),
            "man page lacks a section for `{c}`:\n{text}"
        );
    }
    // Subcommands of subcommands, and options of a command.
    assert!(text.contains("ROCMFORGE CACHE GC") && text.contains("--keep-going"), "{text}");
}
