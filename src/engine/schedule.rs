//! The scheduler: each recipe of the plan starts once its dependencies are done, side by side
//! with others, holding as many jobs of the shared budget as it runs compile jobs. Ready recipes
//! start in the plan's rank order (longest remaining path first), decided by `plan::night::next`,
//! the function the night's simulation runs too. After a
//! failure nothing new starts, unless the build keeps going; then everything not downstream of a
//! failure is built and every failure is reported at the end.

use std::collections::{BTreeMap, BTreeSet};

use super::{BuildError, Outcome};
use crate::plan::night;
use crate::plan::PlanEntry;

/// Runs `run_one(entry, jobs)` for every entry in dependency order under a budget of `jobs`.
/// `want(entry)` is how many jobs an entry would like. Returns each finished entry's outcome, in
/// plan order.
pub(super) fn run(
    entries: &[PlanEntry],
    jobs: usize,
    keep_going: bool,
    want: &(dyn Fn(&PlanEntry) -> usize + Sync),
    run_one: &(dyn Fn(&PlanEntry, usize) -> Result<Outcome, BuildError> + Sync),
) -> Result<Vec<(String, Outcome)>, BuildError> {
    let in_plan: BTreeSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let mut waiting: BTreeMap<usize, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.deps.iter().filter(|d| in_plan.contains(d.as_str())).count()))
        .collect();
    // (rank, index): the first is the one to start.
    let mut ready: BTreeSet<(usize, usize)> =
        waiting.iter().filter(|(_, n)| **n == 0).map(|(i, _)| (entries[*i].rank, *i)).collect();
    waiting.retain(|_, n| *n > 0);
    let mut failures: Vec<(String, BuildError)> = Vec::new();
    let mut done: Vec<(usize, Outcome)> = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Outcome, BuildError>)>();
    let mut free = jobs;
    let mut held: BTreeMap<usize, usize> = BTreeMap::new();
    std::thread::scope(|scope| {
        let mut running = 0usize;
        loop {
            let may_start = failures.is_empty() || keep_going;
            // A recipe starts when its share of the budget is free; else the scheduler waits for
            // a running one to finish (and sees failures before starting more).
            while let Some((i, got)) =
                if may_start { night::next(&ready, |i| want(&entries[i]), free, running) } else { None }
            {
                ready.remove(&(entries[i].rank, i));
                free -= got.min(free);
                held.insert(i, got);
                let tx = tx.clone();
                running += 1;
                let entry = &entries[i];
                scope.spawn(move || {
                    let _ = tx.send((i, run_one(entry, got)));
                });
            }
            if running == 0 {
                break;
            }
            let Ok((i, result)) = rx.recv() else { break };
            running -= 1;
            free += held.remove(&i).unwrap_or(0);
            let name = entries[i].name.as_str();
            match result {
                Ok(outcome) => {
                    done.push((i, outcome));
                    for (j, n) in waiting.iter_mut() {
                        if entries[*j].deps.iter().any(|d| d == name) {
                            *n -= 1;
                        }
                    }
                    let now_ready: Vec<usize> = waiting.iter().filter(|(_, n)| **n == 0).map(|(j, _)| *j).collect();
                    for j in now_ready {
                        waiting.remove(&j);
                        ready.insert((entries[j].rank, j));
                    }
                }
                Err(e) => failures.push((name.to_string(), e)),
            }
        }
    });
    // Whatever never became ready is downstream of a failure (or was not started).
    let not_built: Vec<String> =
        waiting.keys().chain(ready.iter().map(|(_, j)| j)).map(|j| entries[*j].name.clone()).collect();
    done.sort_by_key(|(i, _)| *i);
    // In plan order, not in the order they happened to fail.
    let index_of = |n: &str| entries.iter().position(|e| e.name == n);
    failures.sort_by_key(|(n, _)| index_of(n));
    let outcomes = done.into_iter().map(|(i, o)| (entries[i].name.clone(), o)).collect();
    match failures.len() {
        0 => Ok(outcomes),
        1 if not_built.is_empty() || !keep_going => Err(failures.pop().expect("one failure").1),
        _ => Err(BuildError::Several { failed: failures, not_built }),
    }
}
