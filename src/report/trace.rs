//! The build as a Chrome trace-event file (`trace.json`): open it in https://ui.perfetto.dev or
//! chrome://tracing. One process (the build), one track (tid) per recipe so recipes that ran in
//! parallel sit on separate rows, one complete ("X") event per step, times in microseconds.

use serde_json::{json, Value};

use super::BuildRecord;

pub fn render(rec: &BuildRecord) -> Value {
    let us = |secs: f64| (secs * 1e6).round() as u64;
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
        "args": { "name": format!("rocmforge build {} ({})", rec.stack, rec.state.as_str()) },
    })];
    for (i, r) in rec.recipes.iter().filter(|r| r.start_secs.is_some()).enumerate() {
        let tid = i + 1;
        events.push(json!({ "name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": { "name": r.name } }));
        events.push(
            json!({ "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid, "args": { "sort_index": tid } }),
        );
        if r.cache.as_deref() == Some("hit") {
            events.push(json!({
                "name": "cached", "cat": "cache", "ph": "i", "s": "t", "pid": 1, "tid": tid,
                "ts": us(r.start_secs.unwrap_or(0.0)),
            }));
        }
        for s in &r.steps {
            let end = s.end_secs.unwrap_or_else(|| rec.span_secs()).max(s.start_secs);
            events.push(json!({
                "name": s.name, "cat": "step", "ph": "X", "pid": 1, "tid": tid,
                "ts": us(s.start_secs), "dur": us(end) - us(s.start_secs),
                "args": { "recipe": r.name, "status": s.status, "log": s.log },
            }));
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": { "stack": rec.stack, "started_at": rec.started_at, "state": rec.state.as_str() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{BuildState, RecipeRecord, StepRecord};

    fn step(name: &str, start: f64, end: Option<f64>, status: &str) -> StepRecord {
        StepRecord {
            name: name.into(),
            status: status.into(),
            start_secs: start,
            end_secs: end,
            log: format!("/w/{name}.log").into(),
            ..Default::default()
        }
    }

    #[test]
    fn one_complete_event_per_step_on_one_track_per_recipe() {
        let rec = BuildRecord {
            stack: "s".into(),
            state: BuildState::Interrupted,
            duration_secs: Some(9.0),
            recipes: vec![
                RecipeRecord {
                    name: "hit".into(),
                    cache: Some("hit".into()),
                    start_secs: Some(0.0),
                    outcome: Some(crate::progress::Outcome::Cached),
                    ..Default::default()
                },
                RecipeRecord {
                    name: "a".into(),
                    cache: Some("miss".into()),
                    start_secs: Some(0.5),
                    steps: vec![step("configure", 0.5, Some(1.25), "ok"), step("build", 1.25, None, "running")],
                    ..Default::default()
                },
                RecipeRecord {
                    name: "b".into(),
                    start_secs: Some(0.5),
                    steps: vec![step("build", 0.5, Some(2.0), "failed")],
                    ..Default::default()
                },
                RecipeRecord { name: "never-started".into(), ..Default::default() },
            ],
            ..Default::default()
        };
        let v = render(&rec);
        let events = v["traceEvents"].as_array().unwrap();
        let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(spans.len(), 3);
        assert_eq!(
            (&spans[0]["name"], &spans[0]["ts"], &spans[0]["dur"]),
            (&json!("configure"), &json!(500_000), &json!(750_000))
        );
        // A step still running when the build stopped ends with the build.
        assert_eq!((&spans[1]["ts"], &spans[1]["dur"]), (&json!(1_250_000), &json!(7_750_000)));
        // Recipes a and b ran at the same time: distinct tracks, each named after its recipe.
        assert_ne!(spans[1]["tid"], spans[2]["tid"]);
        let name_of = |tid: &Value| {
            events.iter().find(|e| e["name"] == "thread_name" && &e["tid"] == tid).unwrap()["args"]["name"].clone()
        };
        assert_eq!(name_of(&spans[2]["tid"]), json!("b"));
        assert_eq!(spans[2]["args"]["status"], "failed");
        assert!(events.iter().any(|e| e["ph"] == "i" && e["cat"] == "cache"));
        assert!(!events.iter().any(|e| e["args"]["name"] == "never-started"));
    }
}
