//! Problems found in user-written files, each pointing at a file, line and column, rendered with
//! the offending source line under it (the way cargo and rattler-build show them).

use std::fmt;

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Path as the user should read it (absolute for a directory tree, `<embedded>/...` otherwise).
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// The source line the problem is on (no trailing newline), if known.
    pub snippet: Option<String>,
    /// How long the underline should be.
    pub width: usize,
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at byte range `span` of `text`.
    pub fn at(file: &str, text: &str, span: std::ops::Range<usize>, message: impl Into<String>) -> Self {
        let start = span.start.min(text.len());
        let (line, column) = line_col(text, start);
        let line_text = text[..].lines().nth(line - 1).map(|l| l.trim_end_matches('\r').to_string());
        let width = {
            let end = span.end.min(text.len()).max(start);
            let within = &text[start..end];
            let first = within.lines().next().unwrap_or("");
            first.chars().count().max(1)
        };
        Diagnostic {
            file: file.to_string(),
            line,
            column,
            message: message.into(),
            snippet: line_text,
            width,
            help: None,
        }
    }

    /// A problem about a whole file (line 1, column 1, no snippet).
    pub fn file(file: &str, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.to_string(),
            line: 1,
            column: 1,
            message: message.into(),
            snippet: None,
            width: 1,
            help: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// 1-based line and column (in characters) of byte offset `at`.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        writeln!(f, "  --> {}:{}:{}", self.file, self.line, self.column)?;
        if let Some(src) = &self.snippet {
            let num = self.line.to_string();
            let pad = " ".repeat(num.len());
            writeln!(f, "{pad} |")?;
            writeln!(f, "{num} | {src}")?;
            writeln!(f, "{pad} | {}{}", " ".repeat(self.column.saturating_sub(1)), "^".repeat(self.width))?;
        }
        if let Some(help) = &self.help {
            writeln!(f, "  = help: {help}")?;
        }
        Ok(())
    }
}

/// Every problem found in one pass over a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }
    /// Files in order, then position: the order a person fixes them in.
    pub fn sort(&mut self) {
        self.0.sort_by(|a, b| (&a.file, a.line, a.column, &a.message).cmp(&(&b.file, b.line, b.column, &b.message)));
        self.0.dedup();
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{d}")?;
        }
        let n = self.0.len();
        write!(f, "{n} problem{} found in the recipe tree", if n == 1 { "" } else { "s" })
    }
}

impl std::error::Error for Diagnostics {}

/// An error and its causes on one line (`a: b: c`), for lists of failures.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(&format!(": {t}"));
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, 9), (2, 4));
    }

    #[test]
    fn renders_snippet_and_underline() {
        let text = "[package]\nnmae = \"x\"\n";
        let d = Diagnostic::at("r.toml", text, 10..14, "unknown field `nmae`").with_help("did you mean `name`?");
        assert_eq!(
            d.to_string(),
            "error: unknown field `nmae`\n  --> r.toml:2:1\n  |\n2 | nmae = \"x\"\n  | ^^^^\n  = help: did you mean `name`?\n"
        );
    }
}
