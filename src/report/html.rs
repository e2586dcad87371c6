//! `timeline.html`: the build on one page, no scripts and no external assets, so it opens from
//! a file anywhere. One row per recipe, one bar per step on a shared time axis, coloured by how
//! the step ended, then a table with each recipe's outcome, cache hit or miss, time and logs.

use std::fmt::Write;

use super::BuildRecord;
use crate::progress::{human_secs, Outcome};

const LABEL_W: f64 = 190.0;
const CHART_W: f64 = 940.0;
const ROW_H: f64 = 28.0;
const BAR_H: f64 = 18.0;
const TOP: f64 = 34.0;

/// At most `n` characters of `s`, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

fn color(status: &str) -> &'static str {
    match status {
        "ok" | "built" => "#3a9d5d",
        "failed" => "#d64545",
        "running" | "interrupted" => "#e3a32b",
        _ => "#9aa3ad",
    }
}

/// A round tick interval giving at most ~10 ticks over `span` seconds.
pub fn tick_step(span: f64) -> f64 {
    const STEPS: [f64; 22] = [
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0,
        600.0, 900.0, 1800.0, 3600.0,
    ];
    STEPS.iter().copied().find(|s| span / s <= 10.0).unwrap_or_else(|| (span / 10.0 / 3600.0).ceil() * 3600.0)
}

fn tick_label(t: f64, step: f64) -> String {
    if t == 0.0 {
        "0".into()
    } else if step < 1.0 {
        let digits = if step < 0.01 {
            3
        } else if step < 0.1 {
            2
        } else {
            1
        };
        format!("{t:.digits$}s")
    } else if t < 60.0 {
        format!("{t:.0}s")
    } else if t < 3600.0 {
        let m = (t / 60.0).floor();
        let s = t - m * 60.0;
        if s.round() == 0.0 {
            format!("{m:.0}m")
        } else {
            format!("{m:.0}m{s:02.0}s")
        }
    } else {
        let h = (t / 3600.0).floor();
        let m = ((t - h * 3600.0) / 60.0).round();
        if m == 0.0 {
            format!("{h:.0}h")
        } else {
            format!("{h:.0}h{m:02.0}m")
        }
    }
}

/// The build's page: a heading with the counts, the timeline, the table.
pub fn render(rec: &BuildRecord) -> String {
    let span = rec.span_secs().max(0.001);
    let svg = timeline(rec, span);
    let table = table(rec);
    let count = |o: Outcome| rec.recipes.iter().filter(|r| r.outcome == Some(o)).count();
    page(rec, span, &svg, &table, count)
}

/// The timeline: a row per recipe, its steps as bars over `span` seconds (a recipe with no
/// step, a mark labelled with its outcome).
fn timeline(rec: &BuildRecord, span: f64) -> String {
    let x = |t: f64| LABEL_W + t / span * CHART_W;
    let rows: Vec<_> = rec.recipes.iter().collect();
    let height = TOP + rows.len() as f64 * ROW_H + 10.0;
    let width = LABEL_W + CHART_W + 30.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" font-family="system-ui, sans-serif" font-size="12">"#
    );
    for (i, _) in rows.iter().enumerate() {
        if i % 2 == 0 {
            let _ = write!(
                svg,
                r##"<rect x="0" y="{}" width="{width}" height="{ROW_H}" fill="#f4f6f8"/>"##,
                TOP + i as f64 * ROW_H
            );
        }
    }
    let step = tick_step(span);
    let mut t = 0.0;
    while t <= span + step * 1e-9 {
        let tx = x(t);
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{}" stroke="#d5dae0"/><text x="{tx:.1}" y="{}" text-anchor="middle" fill="#56606b">{}</text>"##,
            TOP - 6.0,
            height - 10.0,
            TOP - 12.0,
            tick_label(t, step)
        );
        t += step;
    }
    for (i, r) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H;
        let outcome = r.outcome.map_or(if r.start_secs.is_some() { "running" } else { "not started" }, Outcome::as_str);
        let _ = write!(
            svg,
            r##"<text x="10" y="{:.1}" font-weight="600" fill="#1f2933">{}</text><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{}" font-size="11">{}</text>"##,
            y + ROW_H / 2.0 + 4.0,
            esc(&r.name),
            LABEL_W - 10.0,
            y + ROW_H / 2.0 + 4.0,
            if r.outcome == Some(Outcome::Failed) { "#d64545" } else { "#6b7580" },
            esc(outcome)
        );
        let by = y + (ROW_H - BAR_H) / 2.0;
        if r.steps.is_empty() {
            if let Some(s) = r.start_secs {
                // A recipe that failed before any step ran: a red mark labelled with the reason.
                let (label, fill, text_fill) = match (r.outcome, &r.error) {
                    (Some(Outcome::Cached), _) => ("cached (cache hit)".to_string(), "#9aa3ad", "#6b7580"),
                    (Some(Outcome::Downloaded), _) => {
                        ("downloaded (shared cache hit)".to_string(), "#9aa3ad", "#6b7580")
                    }
                    (Some(Outcome::Failed), Some(e)) => {
                        (format!("failed: {}", clip(e, 110)), color("failed"), color("failed"))
                    }
                    (Some(Outcome::Failed), None) => ("failed".to_string(), color("failed"), color("failed")),
                    _ => (outcome.to_string(), "#9aa3ad", "#6b7580"),
                };
                let _ = write!(
                    svg,
                    r##"<g><title>{}</title><rect x="{:.1}" y="{by:.1}" width="6" height="{BAR_H}" rx="2" fill="{fill}"/><text x="{:.1}" y="{:.1}" fill="{text_fill}" font-style="italic">{}</text></g>"##,
                    esc(r.error.as_deref().unwrap_or(outcome)),
                    x(s),
                    x(s) + 10.0,
                    by + BAR_H - 5.0,
                    esc(&label)
                );
            }
        }
        for s in &r.steps {
            let end = s.end_secs.unwrap_or(span).max(s.start_secs);
            let (bx, bw) = (x(s.start_secs), (x(end) - x(s.start_secs)).max(2.0));
            let dur = human_secs(end - s.start_secs);
            let _ = write!(
                svg,
                r##"<g><title>{} / {}: {dur} ({})&#10;log: {}</title><rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{BAR_H}" rx="3" fill="{}" stroke="#ffffff" stroke-width="1"/>"##,
                esc(&r.name),
                esc(&s.name),
                esc(&s.status),
                esc(&s.log.display().to_string()),
                color(&s.status)
            );
            let text = format!("{} {dur}", s.name);
            if bw > text.len() as f64 * 6.6 + 8.0 {
                let _ = write!(
                    svg,
                    r##"<text x="{:.1}" y="{:.1}" fill="#ffffff" font-size="11">{}</text>"##,
                    bx + 4.0,
                    by + BAR_H - 5.0,
                    esc(&text)
                );
            }
            svg.push_str("</g>");
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The table: per recipe its outcome, cache, time, steps, GPU code and logs.
fn table(rec: &BuildRecord) -> String {
    let mut table = String::from(
        "<table><tr><th>recipe</th><th>outcome</th><th>cache</th><th>time</th><th>steps</th><th>GPU code</th><th>logs</th></tr>",
    );
    for r in &rec.recipes {
        let steps: Vec<String> = r
            .steps
            .iter()
            .map(|s| {
                format!(
                    r#"<span class="st {}">{} {}</span>"#,
                    esc(&s.status),
                    esc(&s.name),
                    s.duration_secs.map(human_secs).unwrap_or_default()
                )
            })
            .collect();
        // What its installed files carry, as checked against its `[targets]` declarations.
        let coverage: Vec<String> = r
            .coverage
            .iter()
            .map(|c| format!(r#"<div class="{}">{}</div>"#, if c.ok { "cov" } else { "why" }, esc(&c.describe())))
            .collect();
        let _ = write!(
            table,
            r#"<tr><td>{}</td><td class="{}">{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>"#,
            esc(&r.name),
            r.outcome.map_or("", Outcome::as_str),
            r.outcome.map_or(if r.start_secs.is_some() { "running" } else { "-" }, Outcome::as_str),
            r.error.as_deref().map(|e| format!(r#"<div class="why">{}</div>"#, esc(e))).unwrap_or_default(),
            esc(r.cache.as_deref().unwrap_or("-"))
                + &r.compiler_cache
                    .as_ref()
                    .map(|c| format!(r#"<div class="why">{}</div>"#, esc(&c.summary())))
                    .unwrap_or_default(),
            r.duration_secs.map(human_secs).unwrap_or_default(),
            steps.join(" "),
            coverage.join(""),
            esc(&r.log_dir.as_ref().map(|p| p.display().to_string()).unwrap_or_default())
        );
    }
    table.push_str("</table>");
    table
}

fn page(rec: &BuildRecord, span: f64, svg: &str, table: &str, count: impl Fn(Outcome) -> usize) -> String {
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rocmforge build {stack}: {state}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 20px; color: #1f2933; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }}
.sub {{ color: #56606b; margin-bottom: 14px; }}
.badge {{ display: inline-block; padding: 1px 8px; border-radius: 9px; color: #fff; background: {badge}; }}
.legend span {{ display: inline-block; margin-right: 14px; font-size: 12px; }}
.legend i {{ display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px; vertical-align: -2px; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ text-align: left; padding: 3px 10px; border-bottom: 1px solid #e4e7eb; }}
td.failed {{ color: #d64545; font-weight: 600; }}
.cov {{ color: #3a9d5d; font-size: 12px; max-width: 420px; }}
.why {{ color: #d64545; font-weight: 400; font-size: 12px; max-width: 520px; white-space: pre-wrap; }}
.st {{ display: inline-block; padding: 0 5px; margin: 1px; border-radius: 3px; color: #fff; background: #3a9d5d; font-size: 11px; }}
.st.failed {{ background: #d64545; }} .st.running, .st.interrupted {{ background: #e3a32b; }}
code {{ font-size: 11px; color: #56606b; }}
</style></head><body>
<h1>rocmforge build: stack {stack}</h1>
<div class="sub"><span class="badge">{state}</span> started {started} (UTC) &middot; {total} &middot; {n} recipes: {built} built, {cached} cached, {downloaded} downloaded, {failed} failed</div>
<div class="legend"><span><i style="background:#3a9d5d"></i>step ok</span><span><i style="background:#d64545"></i>failed</span><span><i style="background:#e3a32b"></i>running / interrupted</span><span><i style="background:#9aa3ad"></i>cache hit</span></div>
{svg}
{table}
</body></html>
"##,
        stack = esc(&rec.stack),
        state = rec.state.as_str(),
        badge = match rec.state.as_str() {
            "succeeded" => "#3a9d5d",
            "failed" => "#d64545",
            _ => "#e3a32b",
        },
        started = esc(&rec.started_at),
        total = human_secs(rec.duration_secs.unwrap_or(span)),
        n = rec.recipes.len(),
        built = count(Outcome::Built),
        cached = count(Outcome::Cached),
        downloaded = count(Outcome::Downloaded),
        failed = count(Outcome::Failed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(0.3), 0.05);
        assert_eq!(tick_step(45.0), 5.0);
        assert_eq!(tick_step(5400.0), 600.0);
        assert_eq!(tick_step(50_000.0), 7200.0);
        assert_eq!(tick_label(90.0, 30.0), "1m30s");
        assert_eq!(tick_label(7200.0, 3600.0), "2h");
        assert_eq!(tick_label(0.25, 0.05), "0.25s");
    }

    #[test]
    fn names_are_escaped() {
        let rec = BuildRecord {
            stack: "<s>".into(),
            recipes: vec![crate::report::RecipeRecord { name: "a&b".into(), ..Default::default() }],
            ..Default::default()
        };
        let html = render(&rec);
        assert!(html.contains("stack &lt;s&gt;") && html.contains("a&amp;b"), "{html}");
        assert!(!html.contains("<s>"));
    }

    #[test]
    fn a_recipe_failed_before_any_step_is_red_and_says_why() {
        let rec = BuildRecord {
            stack: "s".into(),
            recipes: vec![crate::report::RecipeRecord {
                name: "hipvec".into(),
                outcome: Some(Outcome::Failed),
                start_secs: Some(0.0),
                end_secs: Some(0.002),
                error: Some("patch 0001-x.patch does not apply: hunk 1 of `a.h`".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let page = render(&rec);
        assert!(page.contains(r##"fill="#d64545"/><text"##), "a red mark: {page}");
        assert!(page.contains("failed: patch 0001-x.patch does not apply"), "{page}");
        assert!(page.contains(r#"<div class="why">patch 0001-x.patch"#), "{page}");
    }
}
