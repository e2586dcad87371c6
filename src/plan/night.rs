//! The night: in what order ready recipes start, and how long a build will take on some jobs.
//!
//! Every recipe has an estimated duration (its last build's, else the recipe's `[estimate]`:
//! serial minutes plus compile core-hours divided by its jobs, else [`DEFAULT_ESTIMATE_SECS`]). Its priority is the longest remaining
//! path: its own duration plus the longest chain of dependents after it. Ready recipes start in
//! priority order ([`Order::CriticalPath`], the default), so the head of the longest chain starts
//! first; `ROCMFORGE_SCHEDULE=name|reverse-name` forces another order (a testing aid).
//!
//! The decision which ready recipe starts, with how many jobs ([`next`]), is a pure function: the
//! engine calls it on real events, [`simulate`] on a simulated clock, so `plan` can say how long
//! the night will be and the benches can measure an order without building anything.

use std::collections::BTreeSet;

use serde::Serialize;

/// The estimate of a recipe that builds and has neither a last build nor `[estimate]`: ten
/// minutes (a stated default, not a measurement; equal estimates make the priority the length of
/// the chain in recipes).
pub const DEFAULT_ESTIMATE_SECS: f64 = 600.0;

/// The environment variable forcing the order ready recipes start in.
pub const SCHEDULE_ENV: &str = "ROCMFORGE_SCHEDULE";

/// The order in which ready recipes start.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// Longest remaining path first (ties by name).
    #[default]
    CriticalPath,
    /// By name (how rocmforge started them before).
    Name,
    /// By name, backwards (to find tests that rely on an order).
    ReverseName,
}

impl Order {
    pub fn as_str(self) -> &'static str {
        match self {
            Order::CriticalPath => "critical-path",
            Order::Name => "name",
            Order::ReverseName => "reverse-name",
        }
    }
    pub fn parse(s: &str) -> Option<Order> {
        [Order::CriticalPath, Order::Name, Order::ReverseName].into_iter().find(|o| o.as_str() == s)
    }
    /// `ROCMFORGE_SCHEDULE`, if set (an unknown value is an error naming the known ones).
    pub fn from_env() -> Result<Order, String> {
        match std::env::var(SCHEDULE_ENV) {
            Ok(v) if !v.is_empty() => Order::parse(&v)
                .ok_or_else(|| format!("{SCHEDULE_ENV}={v}: unknown order; known: critical-path, name, reverse-name")),
            _ => Ok(Order::default()),
        }
    }
}

/// A recipe's work: seconds that do not shrink with more jobs (configure, link, a step that is
/// one process) and core-seconds that do (compiling). A recorded duration is all `serial_secs`:
/// it was measured at whatever jobs that build had.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Work {
    pub serial_secs: f64,
    pub parallel_secs: f64,
}

impl Work {
    pub fn fixed(secs: f64) -> Work {
        Work { serial_secs: secs, parallel_secs: 0.0 }
    }
    /// Wall seconds with `jobs` jobs.
    pub fn secs(&self, jobs: usize) -> f64 {
        self.serial_secs + self.parallel_secs / jobs.max(1) as f64
    }
}

/// One recipe as the schedule sees it.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    /// Indexes of the tasks it waits for.
    pub deps: Vec<usize>,
    pub work: Work,
    /// The jobs it asks for (the engine's budget per recipe, capped by memory).
    pub want: usize,
}

/// Each task's longest remaining path: its own seconds (at the jobs it wants) plus the longest
/// remaining path among the tasks waiting for it.
pub fn longest_remaining(tasks: &[Task]) -> Vec<f64> {
    let mut memo: Vec<Option<f64>> = vec![None; tasks.len()];
    let dependents = dependents(tasks);
    fn visit(i: usize, tasks: &[Task], dependents: &[Vec<usize>], memo: &mut Vec<Option<f64>>) -> f64 {
        if let Some(v) = memo[i] {
            return v;
        }
        let tail = dependents[i].iter().map(|&j| visit(j, tasks, dependents, memo)).fold(0.0, f64::max);
        let v = tasks[i].work.secs(tasks[i].want) + tail;
        memo[i] = Some(v);
        v
    }
    (0..tasks.len()).map(|i| visit(i, tasks, &dependents, &mut memo)).collect()
}

fn dependents(tasks: &[Task]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        for &d in &t.deps {
            out[d].push(i);
        }
    }
    out
}

/// Each task's rank under `order`: ready tasks start lowest rank first.
pub fn ranks(tasks: &[Task], order: Order) -> Vec<usize> {
    let prio = longest_remaining(tasks);
    let mut idx: Vec<usize> = (0..tasks.len()).collect();
    match order {
        Order::CriticalPath => {
            idx.sort_by(|&a, &b| prio[b].total_cmp(&prio[a]).then(tasks[a].name.cmp(&tasks[b].name)))
        }
        Order::Name => idx.sort_by(|&a, &b| tasks[a].name.cmp(&tasks[b].name)),
        Order::ReverseName => idx.sort_by(|&a, &b| tasks[b].name.cmp(&tasks[a].name)),
    }
    let mut rank = vec![0; tasks.len()];
    for (r, i) in idx.into_iter().enumerate() {
        rank[i] = r;
    }
    rank
}

/// The critical path: from the task with the longest remaining path, each time the dependent
/// with the longest remaining path. Returns the tasks and the path's seconds.
pub fn critical_path(tasks: &[Task]) -> (Vec<usize>, f64) {
    let prio = longest_remaining(tasks);
    let dependents = dependents(tasks);
    let best = |c: &mut dyn Iterator<Item = usize>| c.max_by(|&a, &b| prio[a].total_cmp(&prio[b]).then(b.cmp(&a)));
    let Some(mut at) = best(&mut (0..tasks.len())) else { return (Vec::new(), 0.0) };
    let total = prio[at];
    let mut path = vec![at];
    while let Some(next) = best(&mut dependents[at].iter().copied()) {
        path.push(next);
        at = next;
    }
    (path, total)
}

/// The scheduling decision: the first ready task (in rank order) starts now with the jobs it
/// wants, if they are free, or with the whole budget's rest if nothing runs; otherwise nothing
/// starts until a running task ends (the most critical ready task gets its jobs first; nothing
/// overtakes it). `ready` holds (rank, task). Returns (task, jobs).
pub fn next(
    ready: &BTreeSet<(usize, usize)>,
    want: impl Fn(usize) -> usize,
    free: usize,
    running: usize,
) -> Option<(usize, usize)> {
    let &(_, i) = ready.first()?;
    let wanted = want(i);
    if wanted > free && running > 0 {
        return None;
    }
    Some((i, wanted.min(free).max(1)))
}

/// A simulated build: when each task ran and with how many jobs.
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    /// Seconds from the start to the last task's end.
    pub makespan_secs: f64,
    /// Per task: (start, end, jobs).
    pub runs: Vec<(f64, f64, usize)>,
}

/// Runs `tasks` on a simulated clock under a budget of `jobs`, deciding with [`next`] exactly as
/// the engine does, each task taking `work.secs(jobs it got)`.
pub fn simulate(tasks: &[Task], jobs: usize, rank: &[usize]) -> Simulation {
    let dependents = dependents(tasks);
    let mut waiting: Vec<usize> = tasks.iter().map(|t| t.deps.len()).collect();
    let mut ready: BTreeSet<(usize, usize)> =
        (0..tasks.len()).filter(|&i| waiting[i] == 0).map(|i| (rank[i], i)).collect();
    let mut runs = vec![(0.0, 0.0, 0); tasks.len()];
    // Running tasks by end time (then index, for determinism).
    let mut running: Vec<(f64, usize)> = Vec::new();
    let (mut now, mut free) = (0.0f64, jobs.max(1));
    loop {
        while let Some((i, got)) = next(&ready, |i| tasks[i].want.min(jobs.max(1)), free, running.len()) {
            ready.remove(&(rank[i], i));
            free -= got.min(free);
            let end = now + tasks[i].work.secs(got);
            runs[i] = (now, end, got);
            running.push((end, i));
        }
        let Some(pos) = (0..running.len())
            .min_by(|&a, &b| running[a].0.total_cmp(&running[b].0).then(running[a].1.cmp(&running[b].1)))
        else {
            break;
        };
        let (end, i) = running.swap_remove(pos);
        now = end;
        free += runs[i].2;
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert((rank[j], j));
            }
        }
    }
    Simulation { makespan_secs: runs.iter().map(|r| r.1).fold(0.0, f64::max), runs }
}

/// A lower bound of any build of `tasks` where each task holds the jobs it wants: the critical
/// path, and the job-seconds held divided by the budget (for tasks of one job: total work / jobs).
pub fn lower_bound(tasks: &[Task], jobs: usize) -> f64 {
    let jobs = jobs.max(1);
    let area: f64 = tasks.iter().map(|t| t.work.secs(t.want.min(jobs)) * t.want.min(jobs) as f64).sum();
    critical_path(tasks).1.max(area / jobs as f64)
}

/// A fixed sequential order, as a shell-script builder runs: one recipe after another, each with
/// the jobs it wants.
pub fn sequential(tasks: &[Task], jobs: usize) -> f64 {
    tasks.iter().map(|t| t.work.secs(t.want.min(jobs.max(1)))).sum()
}

/// The estimate of a night: `plan` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Night {
    /// The job budget it is for.
    pub jobs: usize,
    /// The simulated build's length.
    pub estimated_secs: f64,
    /// No order can do better than this (see [`lower_bound`]).
    pub lower_bound_secs: f64,
    pub critical_path: Vec<String>,
    pub critical_path_secs: f64,
    /// The memory it was estimated for (`plan --memory-gb`); `None`: this host's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
}

impl Night {
    pub fn of(tasks: &[Task], jobs: usize, rank: &[usize]) -> Night {
        let (path, cp) = critical_path(tasks);
        Night {
            jobs,
            estimated_secs: simulate(tasks, jobs, rank).makespan_secs,
            lower_bound_secs: lower_bound(tasks, jobs),
            critical_path: path
                .into_iter()
                .filter(|&i| tasks[i].work.secs(1) > 0.0)
                .map(|i| tasks[i].name.clone())
                .collect(),
            critical_path_secs: cp,
            memory_gb: None,
        }
    }
}

/// The 16-recipe graph of the scheduling tests and bench: a chain of four 3-unit recipes whose
/// head sorts last by name (`zeta-1` .. `zeta-4`), and twelve independent 2-unit recipes
/// (`a` .. `l`), all of one job. On 3 jobs the bound is 12 units; by name it takes 20.
pub fn test_graph(unit_secs: f64) -> Vec<Task> {
    let mut tasks: Vec<Task> = ('a'..='l')
        .map(|c| Task { name: c.to_string(), deps: Vec::new(), work: Work::fixed(2.0 * unit_secs), want: 1 })
        .collect();
    for k in 1..=4 {
        let deps = if k == 1 { Vec::new() } else { vec![tasks.len() - 1] };
        tasks.push(Task { name: format!("zeta-{k}"), deps, work: Work::fixed(3.0 * unit_secs), want: 1 });
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_path_first_meets_the_bound_on_the_test_graph() {
        let tasks = test_graph(1.0);
        assert_eq!(lower_bound(&tasks, 3), 12.0);
        let by_name = simulate(&tasks, 3, &ranks(&tasks, Order::Name)).makespan_secs;
        let critical = simulate(&tasks, 3, &ranks(&tasks, Order::CriticalPath)).makespan_secs;
        assert_eq!(by_name, 20.0);
        assert!(critical <= 1.05 * 12.0, "{critical}");
        let (path, cp) = critical_path(&tasks);
        assert_eq!(
            path.iter().map(|&i| tasks[i].name.as_str()).collect::<Vec<_>>(),
            ["zeta-1", "zeta-2", "zeta-3", "zeta-4"]
        );
        assert_eq!(cp, 12.0);
        assert_eq!(sequential(&tasks, 3), 36.0);
    }

    #[test]
    fn the_most_critical_ready_task_gets_its_jobs_first() {
        // b (the longest) starts first with all 4 jobs; a and c, ready too, wait for them.
        let tasks = vec![
            Task { name: "a".into(), deps: vec![], work: Work::fixed(1.0), want: 2 },
            Task { name: "b".into(), deps: vec![], work: Work::fixed(10.0), want: 4 },
            Task { name: "c".into(), deps: vec![], work: Work::fixed(1.0), want: 1 },
        ];
        let sim = simulate(&tasks, 4, &ranks(&tasks, Order::CriticalPath));
        assert_eq!(sim.runs[1], (0.0, 10.0, 4));
        assert_eq!(sim.runs[0], (10.0, 11.0, 2));
        assert_eq!(sim.runs[2], (10.0, 11.0, 1));
    }

    #[test]
    fn parallel_work_shrinks_with_jobs() {
        let w = Work { serial_secs: 10.0, parallel_secs: 80.0 };
        assert_eq!(w.secs(1), 90.0);
        assert_eq!(w.secs(8), 20.0);
    }

    #[test]
    fn orders_parse_and_rank() {
        assert_eq!(Order::parse("reverse-name"), Some(Order::ReverseName));
        assert_eq!(Order::parse("random"), None);
        let tasks = test_graph(1.0);
        let r = ranks(&tasks, Order::ReverseName);
        assert_eq!(r[15], 0, "zeta-4 first backwards");
        assert_eq!(ranks(&tasks, Order::CriticalPath)[12], 0, "zeta-1 first by critical path");
    }
}
