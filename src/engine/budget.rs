//! How many compile jobs a recipe may run: the job budget, capped by memory
//! (memory-per-job x jobs <= available RAM, from the cgroup limit where one applies).

use std::fs;

/// Bytes of memory this process may use: the smaller of MemAvailable and the cgroup v2 limit.
pub fn available_memory() -> Option<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cgroup = cgroup_limit();
    match (meminfo, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The cgroup v2 memory limit minus current usage, if this process is in a limited cgroup.
fn cgroup_limit() -> Option<u64> {
    let rel = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = rel.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let max = fs::read_to_string(dir.join("memory.max")).ok()?;
    let max: u64 = max.trim().parse().ok()?; // "max" = unlimited -> None
    let current: u64 =
        fs::read_to_string(dir.join("memory.current")).ok().and_then(|c| c.trim().parse().ok()).unwrap_or(0);
    Some(max.saturating_sub(current))
}

/// The cgroup's count of OOM kills (`memory.events`), to tell a memory kill from a crash.
pub fn oom_kills() -> Option<u64> {
    let rel = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = rel.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let events = fs::read_to_string(dir.join("memory.events")).ok()?;
    events.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|v| v.trim().parse().ok())
}

pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Jobs for one recipe: at most `budget`, and no more than memory allows (at least 1).
pub fn jobs_for(budget: usize, memory_per_job_gb: f64, available: Option<u64>) -> usize {
    let by_memory = match available {
        Some(bytes) if memory_per_job_gb > 0.0 => {
            ((bytes as f64) / (memory_per_job_gb * 1024.0 * 1024.0 * 1024.0)).floor() as usize
        }
        _ => budget,
    };
    budget.min(by_memory).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_caps_jobs() {
        let gb = 1024 * 1024 * 1024u64;
        assert_eq!(jobs_for(16, 4.0, Some(32 * gb)), 8);
        assert_eq!(jobs_for(16, 1.0, Some(32 * gb)), 16);
        assert_eq!(jobs_for(16, 8.0, Some(4 * gb)), 1);
        assert_eq!(jobs_for(4, 2.0, None), 4);
    }
}
