//! `plan`: the resolved build of some recipes, for some targets, into a prefix.

use crate::cache::Store;
use crate::config::Config;
use crate::engine::budget;
use crate::graph::BuildGraph;
use crate::history::History;
use crate::plan::{self, Host, Plan, PlanOptions, Request};
use crate::recipe::{RecipeTree, Stack};

/// Plans the closure of `req.recipes` against the artifact store (local, then the remote cache
/// if one is set: "remote hit") and the stack's history,
/// with the night's estimate for a budget of `jobs` (capped by memory per recipe, as a build is:
/// this host's available memory, or `memory_gb` to plan for another machine).
pub fn plan(
    cfg: &Config,
    tree: &RecipeTree,
    stack: &Stack,
    req: &Request,
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
    if req.rocm_path.is_some() {
        // The short night beside the full one: the same plan with nothing taken.
        let full_req = Request { rocm_path: None, ..req.clone() };
        let mut full = plan_graph(cfg, tree, stack, &graph, &full_req, store.as_ref());
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
    req: &Request,
    store: &dyn Store,
) -> Plan {
    let opts = PlanOptions {
        request: req,
        work_dir: cfg.work_dir.clone(),
        durations: crate::report::load_durations(&cfg.state_dir, &stack.name),
    };
    let host = Host::detect(req.rocm_path.as_deref(), &cfg.state_dir);
    let history = History::new(&cfg.state_dir, &stack.name);
    plan::resolve(tree, stack, graph, &opts, &host, store, &history)
}
