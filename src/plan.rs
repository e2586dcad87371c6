//! The plan: per recipe of the closure, in build order, what will be built from what, for which
//! targets, and its state with a reason.

use serde::Serialize;

use crate::graph::BuildGraph;
use crate::recipe::{Recipe, SourceSpec, Stack, TargetDecision};
use crate::target::TargetSet;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Not built yet (no cached artifact).
    NotBuilt,
    /// A cached artifact matches the recipe's key.
    Cached,
    /// Will be rebuilt; the reason says what changed.
    Rebuild,
    /// Provided by an installed ROCm (`--rocm-path`).
    External,
    /// Not built for these targets (the recipe says so).
    Skipped,
    /// Cannot be built: an unlocked source, or unsupported targets with no fallback.
    Blocked,
}

impl State {
    pub fn as_str(&self) -> &'static str {
        match self {
            State::NotBuilt => "not built",
            State::Cached => "cached",
            State::Rebuild => "rebuild",
            State::External => "external",
            State::Skipped => "skipped",
            State::Blocked => "blocked",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanEntry {
    pub name: String,
    pub version: String,
    pub system: &'static str,
    pub source: SourceSpec,
    pub locked: bool,
    pub patches: Vec<String>,
    pub deps: Vec<String>,
    pub wave: usize,
    pub targets: TargetDecision,
    pub state: State,
    pub reason: String,
    /// The cache key, when the engine computed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub stack: String,
    pub rocm_version: String,
    pub requested: Vec<String>,
    pub targets: TargetSet,
    pub recipes: Vec<PlanEntry>,
}

/// Decides each recipe's initial state from the recipe alone (no cache consulted).
pub fn initial_state(recipe: &Recipe, decision: &TargetDecision) -> (State, String) {
    if let TargetDecision::Unsupported { reason } = decision {
        return (State::Blocked, format!("none of the requested targets is supported: {reason}"));
    }
    if let TargetDecision::Skip { reason } = decision {
        return (State::Skipped, reason.clone());
    }
    if recipe.source.is_unlocked() {
        return (State::Blocked, "source is unlocked: run `rocmforge lock` to pin its tag to a commit".into());
    }
    if recipe.is_source_only() {
        return (State::NotBuilt, "source tree only: fetched and patched, nothing to compile".into());
    }
    (State::NotBuilt, "no cached artifact".into())
}

impl Plan {
    pub fn new(stack: &Stack, graph: &BuildGraph, targets: &TargetSet) -> Plan {
        let waves = graph.waves();
        let wave_of = |n: &str| waves.iter().position(|w| w.contains(&n)).unwrap_or(0);
        let recipes = graph
            .order()
            .into_iter()
            .map(|name| {
                let r = &stack.recipes[name];
                let decision = if r.is_source_only() { TargetDecision::SourceOnly } else { r.targets.decide(targets) };
                let (state, reason) = initial_state(r, &decision);
                PlanEntry {
                    name: r.name.clone(),
                    version: r.version.clone(),
                    system: r.build.system.as_str(),
                    source: r.source.clone(),
                    locked: !r.source.is_unlocked(),
                    patches: r.patches.iter().map(|p| p.name.clone()).collect(),
                    deps: graph.deps_of(name).into_iter().map(String::from).collect(),
                    wave: wave_of(name),
                    targets: decision,
                    state,
                    reason,
                    key: None,
                }
            })
            .collect();
        Plan {
            stack: stack.name.clone(),
            rocm_version: stack.rocm_version.clone(),
            requested: graph.requested().to_vec(),
            targets: targets.clone(),
            recipes,
        }
    }

    /// Sets each recipe's state from the engine's decisions (cache hits and why things rebuild).
    pub fn apply(&mut self, decisions: &[crate::engine::Decision]) {
        use crate::engine::Status;
        for e in &mut self.recipes {
            let Some(d) = decisions.iter().find(|d| d.name == e.name) else { continue };
            if let Status::External(reason) = &d.status {
                e.state = State::External;
                e.reason = reason.clone();
                e.key = Some(d.key.0.clone());
                continue;
            }
            if matches!(e.state, State::Blocked | State::Skipped) {
                continue;
            }
            e.key = Some(d.key.0.clone());
            match &d.status {
                Status::Cached => {
                    e.state = State::Cached;
                    e.reason = format!("artifact {} in the cache", d.key.short());
                }
                Status::Build(why) if !why.is_empty() => {
                    e.state = State::Rebuild;
                    e.reason = why.join(", ");
                }
                _ => {}
            }
        }
    }

    /// The human-readable plan.
    pub fn render(&self) -> String {
        let mut s = format!(
            "plan for {} on stack {} (ROCm {}), targets {}: {} recipes\n\n",
            self.requested.join(", "),
            self.stack,
            self.rocm_version,
            self.targets.comma_list(),
            self.recipes.len()
        );
        for (i, e) in self.recipes.iter().enumerate() {
            s.push_str(&format!("{:>3}. {} {} [{}] wave {}\n", i + 1, e.name, e.version, e.system, e.wave));
            s.push_str(&format!("     source:  {}\n", e.source.describe()));
            if !e.patches.is_empty() {
                s.push_str(&format!("     patches: {}\n", e.patches.join(", ")));
            }
            if !e.deps.is_empty() {
                s.push_str(&format!("     deps:    {}\n", e.deps.join(", ")));
            }
            s.push_str(&format!("     targets: {}\n", e.targets.describe()));
            s.push_str(&format!("     state:   {} ({})\n", e.state.as_str(), e.reason));
        }
        let blocked: Vec<&str> =
            self.recipes.iter().filter(|e| e.state == State::Blocked).map(|e| e.name.as_str()).collect();
        if !blocked.is_empty() {
            s.push_str(&format!("\n{} blocked: {}\n", blocked.len(), blocked.join(", ")));
        }
        s
    }
}
