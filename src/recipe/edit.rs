//! Edits of recipe files that keep the author's layout and comments (toml_edit).

use toml_edit::{Array, DocumentMut, Item, Table, Value};

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("the recipe is not valid TOML")]
    Parse(#[from] toml_edit::TomlError),
    #[error("`patches` is not a table")]
    PatchesNotTable,
    #[error("`patches.series` is not an array")]
    SeriesNotArray,
}

/// The recipe `text` with `file` appended to its `[patches] series` (a `[patches]` table or a
/// `series` key is added when missing). Everything else stays as written; a series written one
/// patch per line gets the new patch on a line of its own.
pub fn add_patch_to_series(text: &str, file: &str) -> Result<String, EditError> {
    let mut doc: DocumentMut = text.parse()?;
    let patches = doc.entry("patches").or_insert_with(|| Item::Table(Table::new()));
    if let Some(t) = patches.as_table_mut() {
        t.set_implicit(false);
    }
    let patches = patches.as_table_like_mut().ok_or(EditError::PatchesNotTable)?;
    match patches.get_mut("series") {
        Some(series) => append(series.as_array_mut().ok_or(EditError::SeriesNotArray)?, file),
        None => {
            patches.insert("series", toml_edit::value(Array::from_iter([file])));
        }
    }
    Ok(doc.to_string())
}

fn append(series: &mut Array, file: &str) {
    let text = |r: Option<&toml_edit::RawString>| r.and_then(|r| r.as_str()).unwrap_or("").to_string();
    let last_prefix = text(series.iter().last().and_then(|v| v.decor().prefix()));
    let Some((_, indent)) = last_prefix.rsplit_once('\n') else {
        // Written on one line (or empty): `[..., "file"]`.
        if series.is_empty() && series.trailing().as_str().is_some_and(|t| t.trim().is_empty()) {
            series.set_trailing("");
        }
        series.push(file);
        return;
    };
    // One patch per line. What followed the last patch up to the end of its line (a comment)
    // stays there; what came after (comment lines, the indent of `]`) follows the new patch.
    let comma = series.trailing_comma();
    let tail = if comma {
        text(Some(series.trailing()))
    } else {
        let last = series.iter_mut().last().expect("not empty");
        let suffix = text(last.decor().suffix());
        last.decor_mut().set_suffix("");
        suffix
    };
    let (line_end, after) = match tail.split_once('\n') {
        Some((line, rest)) => (format!("{line}\n"), format!("\n{rest}")),
        None => ("\n".to_string(), tail),
    };
    let mut value = Value::from(file);
    value.decor_mut().set_prefix(format!("{line_end}{indent}"));
    if comma {
        series.set_trailing(after);
    } else {
        value.decor_mut().set_suffix(after);
    }
    series.push_formatted(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(text: &str, file: &str) -> String {
        let out = add_patch_to_series(text, file).unwrap();
        let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert_eq!(v["patches"]["series"].as_array().unwrap().last().unwrap().as_str(), Some(file), "{out}");
        out
    }

    #[test]
    fn appends_to_a_one_line_series() {
        let text = "[package]\nname = \"r\"\n[patches]\nseries = [\"0001-a.patch\"]\n[build]\nsystem = \"cmake\"\n";
        assert_eq!(
            add(text, "0002-b.patch"),
            "[package]\nname = \"r\"\n[patches]\nseries = [\"0001-a.patch\", \"0002-b.patch\"]\n[build]\nsystem = \"cmake\"\n"
        );
        assert_eq!(add("[patches]\nseries = []\n", "0001-a.patch"), "[patches]\nseries = [\"0001-a.patch\"]\n");
    }

    #[test]
    fn adds_the_table_or_the_key_when_missing() {
        let out = add("[package]\nname = \"r\"\n", "0001-b.patch");
        assert!(out.starts_with("[package]\nname = \"r\"\n"), "{out}");
        assert!(out.ends_with("[patches]\nseries = [\"0001-b.patch\"]\n"), "{out}");
        let out =
            add("[package]\nname = \"r\"\n\n[patches]\n# none yet\n\n[build]\nsystem = \"cmake\"\n", "0001-b.patch");
        // (toml_edit keeps a comment above a table header with that header.)
        assert!(
            out.ends_with("[patches]\nseries = [\"0001-b.patch\"]\n# none yet\n\n[build]\nsystem = \"cmake\"\n"),
            "{out}"
        );
    }

    #[test]
    fn appends_on_its_own_line_to_a_multi_line_series_keeping_comments() {
        let text = "# recipe\n[patches]\nseries = [\n    \"0001-a.patch\", # upstream\n    \"0002-b.patch\",\n]\n";
        assert_eq!(
            add(text, "0003-c.patch"),
            "# recipe\n[patches]\nseries = [\n    \"0001-a.patch\", # upstream\n    \"0002-b.patch\",\n    \"0003-c.patch\",\n]\n"
        );
        // A comment after the last patch stays on its line; comment lines stay before `]`.
        let text = "[patches]\nseries = [\n  \"0001-a.patch\",  # the fix\n  # \"0002-off.patch\",\n]  # end\n";
        assert_eq!(
            add(text, "0003-c.patch"),
            "[patches]\nseries = [\n  \"0001-a.patch\",  # the fix\n  \"0003-c.patch\",\n  # \"0002-off.patch\",\n]  # end\n"
        );
        // Without a trailing comma.
        let text = "[patches]\nseries = [\n  \"0001-a.patch\" # one\n]\n";
        assert_eq!(
            add(text, "0002-b.patch"),
            "[patches]\nseries = [\n  \"0001-a.patch\", # one\n  \"0002-b.patch\"\n]\n"
        );
        let text = "[patches]\nseries = [\n  \"0001-a.patch\"]\n";
        assert_eq!(add(text, "0002-b.patch"), "[patches]\nseries = [\n  \"0001-a.patch\",\n  \"0002-b.patch\"]\n");
    }

    #[test]
    fn refuses_what_it_cannot_edit() {
        assert!(matches!(add_patch_to_series("[patches\n", "x.patch"), Err(EditError::Parse(_))));
        assert!(matches!(add_patch_to_series("patches = 1\n", "x.patch"), Err(EditError::PatchesNotTable)));
        assert!(matches!(
            add_patch_to_series("[patches]\nseries = \"a\"\n", "x.patch"),
            Err(EditError::SeriesNotArray)
        ));
    }
}
