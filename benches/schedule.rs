//! The schedule's order measured in simulation (no build runs): the engine's own decision
//! function (`plan::night::next`) on a simulated clock, against the lower bound and against a
//! fixed sequential order as shell-script builders use.
//!
//!   cargo bench --bench schedule            (ci/bench.sh runs it)
//!
//! 1. The 16-recipe test graph (`plan::night::test_graph`, the `tests/fixtures/night` stack):
//!    one job per recipe, 3 jobs.
//! 2. The embedded rocm-6.2 stack, every recipe, with the estimates its recipes state
//!    (`[estimate]`, derived in docs/night-estimate.md), on three machines: each recipe asks for
//!    the job budget capped by its `memory-per-job-gb`, as the engine does.
//!
//! Lines starting `sched ` are collected by ci/bench.sh.

use std::collections::BTreeMap;

use rocmforge::engine::budget;
use rocmforge::graph::BuildGraph;
use rocmforge::plan::night::{self, Order, Task, Work};
use rocmforge::recipe::{load_stack, RecipeTree};

fn main() {
    let orders = [Order::CriticalPath, Order::Name, Order::ReverseName];

    let tasks = night::test_graph(1.0);
    let bound = night::lower_bound(&tasks, 3);
    for o in orders {
        let t = night::simulate(&tasks, 3, &night::ranks(&tasks, o)).makespan_secs;
        println!("sched test-graph {} {:.3} ({t} units; bound {bound}, 3 jobs)", o.as_str(), t / bound);
    }
    println!(
        "sched test-graph sequential {:.3} ({} units)",
        night::sequential(&tasks, 3) / bound,
        night::sequential(&tasks, 3)
    );

    let tree = RecipeTree::embedded();
    let stack = load_stack(&tree, "rocm-6.2").unwrap_or_else(|e| panic!("{e:?}"));
    let all: Vec<String> = stack.recipes.keys().cloned().collect();
    let graph = BuildGraph::closure(&stack, &all).unwrap();
    let order = graph.order();
    let index: BTreeMap<&str, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let gib = 1u64 << 30;
    for (jobs, ram_gib) in [(16usize, 64u64), (16, 32), (8, 16)] {
        let tasks: Vec<Task> = order
            .iter()
            .map(|n| {
                let r = &stack.recipes[*n];
                let work = match &r.estimate {
                    Some(e) => {
                        Work { serial_secs: e.serial_minutes * 60.0, parallel_secs: e.parallel_core_hours * 3600.0 }
                    }
                    None if r.is_source_only() => Work::default(),
                    None => panic!("recipe `{n}` has no [estimate]"),
                };
                Task {
                    name: n.to_string(),
                    deps: graph.deps_of(n).iter().map(|d| index[d]).collect(),
                    work,
                    want: budget::jobs_for(jobs, r.build.memory_per_job_gb, Some(ram_gib * gib)),
                }
            })
            .collect();
        let bound = night::lower_bound(&tasks, jobs);
        let seq = night::sequential(&tasks, jobs);
        let (path, cp) = night::critical_path(&tasks);
        let machine = format!("{jobs} jobs, {ram_gib} GiB");
        println!(
            "sched real-stack [{machine}] bound {} (critical path {}: {}; {} recipes)",
            rocmforge::progress::human_secs(bound),
            rocmforge::progress::human_secs(cp),
            path.iter()
                .map(|&i| tasks[i].name.as_str())
                .filter(|n| !stack.recipes[*n].is_source_only())
                .collect::<Vec<_>>()
                .join(" -> "),
            tasks.len()
        );
        for o in orders {
            let t = night::simulate(&tasks, jobs, &night::ranks(&tasks, o)).makespan_secs;
            println!(
                "sched real-stack [{machine}] {} {:.3} ({}; {:.3}x sequential)",
                o.as_str(),
                t / bound,
                rocmforge::progress::human_secs(t),
                t / seq
            );
        }
        println!(
            "sched real-stack [{machine}] sequential {:.3} ({})",
            seq / bound,
            rocmforge::progress::human_secs(seq)
        );
    }
}
