//! `plan`: the resolved build of some recipes, for some targets, into a prefix.

use std::path::PathBuf;

use crate::cache::Store;
use crate::config::Config;
use crate::engine::budget;
use crate::graph::BuildGraph;
use crate::history::History;
use crate::plan::night::Order;
use crate::plan::{self, Host, Plan, PlanOptions};
use crate::recipe::{RecipeTree, Stack};
use crate::target::TargetSet;

#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The recipes asked for (their closure is planned).
    pub recipes: Vec<String>,
    pub targets: TargetSet,
    /// The install prefix (absolute: it is part of every key).
    pub prefix: PathBuf,
    /// Recipes forced to rebuild (with everything downstream of them).
    pub rebuild: Vec<String>,
    /// The order ready recipes start in (`night::Order::from_env()` for `ROCMFORGE_SCHEDULE`).
    pub order: Order,
}

/// Plans the closure of `req.recipes` against the artifact store (local, then the remote cache
/// if one is set: "remote hit") and the stack's history,
/// with the night's estimate for a budget of `jobs` (capped by memory per recipe, as a build is:
/// this host's available memory, or `memory_gb` to plan for another machine).
pub fn plan(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    req: &PlanRequest,
    jobs: usize,
    memory_gb: Option<f64>,
) -> Result<Plan, anyhow::Error> {
    let graph = BuildGraph::closure(stack, &req.recipes)?;
    let store = crate::cache::open(cfg, std::sync::Arc::new(crate::progress::Silent))?;
    let mut plan = plan_graph(cfg, tree, stack, &graph, req, store.as_ref());
    let memory = match memory_gb {
        Some(g) => Some((g * (1u64 << 30) as f64) as u64),
        None => budget::available_memory(),
    };
    let want = |e: &plan::PlanEntry| budget::jobs_for(jobs, stack.recipes[&e.name].build.memory_per_job_gb, memory);
    plan.estimate_night(jobs, memory_gb, want);
    if cfg.rocm_path.is_some() {
        // The short night beside the full one: the same plan with nothing taken.
        let full_cfg = Config { rocm_path: None, ..cfg.clone() };
        let mut full = plan_graph(&full_cfg, tree, stack, &graph, req, store.as_ref());
        full.estimate_night(jobs, memory_gb, want);
        plan.full_night_secs = full.night.map(|n| n.estimated_secs);
    }
    Ok(plan)
}

pub(crate) fn plan_graph(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    graph: &BuildGraph,
    req: &PlanRequest,
    store: &dyn Store,
) -> Plan {
    let opts = PlanOptions {
        targets: req.targets.clone(),
        prefix: req.prefix.clone(),
        rebuild: req.rebuild.clone(),
        work_dir: cfg.work_dir.clone(),
        durations: crate::report::load_durations(&cfg.state_dir, &stack.name),
        order: req.order,
        installation: cfg.installation.clone(),
    };
    let host = Host::detect(cfg.rocm_path.as_deref(), &cfg.state_dir);
    let history = History::new(&cfg.state_dir, &stack.name);
    plan::resolve(tree, stack, graph, &opts, &host, store, &history)
}
