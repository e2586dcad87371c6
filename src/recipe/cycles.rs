//! Cycle finding among the recipes of a stack: a stack with a cycle is invalid, and the loader
//! reports each cycle as a path (`a -> b -> a`) at its first edge.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use petgraph::graph::{DiGraph, NodeIndex};

use super::Recipe;

/// Every cycle among `recipes` (one per strongly connected component), each as a path that
/// starts and ends at the alphabetically first member: `["a", "b", "c", "a"]`.
/// Dependencies on missing recipes are ignored here (reported elsewhere).
pub fn find_cycles(recipes: &BTreeMap<String, Recipe>) -> Vec<Vec<String>> {
    let mut graph: DiGraph<&str, ()> = DiGraph::new();
    let idx: BTreeMap<&str, NodeIndex> = recipes.keys().map(|n| (n.as_str(), graph.add_node(n.as_str()))).collect();
    // Edge recipe -> dependency, so following edges walks "a needs b needs c".
    for (name, r) in recipes {
        for dep in r.all_deps() {
            if dep != name {
                if let Some(&d) = idx.get(dep) {
                    graph.update_edge(idx[name.as_str()], d, ());
                }
            }
        }
    }
    let mut cycles = Vec::new();
    for scc in petgraph::algo::tarjan_scc(&graph) {
        if scc.len() < 2 {
            continue;
        }
        let members: BTreeSet<&str> = scc.iter().map(|i| graph[*i]).collect();
        if let Some(path) = shortest_cycle(&graph, &idx, &members) {
            cycles.push(path);
        }
    }
    cycles.sort();
    cycles
}

/// The shortest path from the first of `members` (one strongly connected component) back to
/// itself inside the component: BFS, neighbours in name order.
fn shortest_cycle(
    graph: &DiGraph<&str, ()>,
    idx: &BTreeMap<&str, NodeIndex>,
    members: &BTreeSet<&str>,
) -> Option<Vec<String>> {
    let start = *members.iter().next().expect("non-empty");
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut found = None;
    'bfs: while let Some(n) = queue.pop_front() {
        let mut next: Vec<&str> = graph.neighbors(idx[n]).map(|i| graph[i]).filter(|m| members.contains(m)).collect();
        next.sort();
        for m in next {
            if m == start {
                found = Some(n);
                break 'bfs;
            }
            if !prev.contains_key(m) {
                prev.insert(m, n);
                queue.push_back(m);
            }
        }
    }
    let mut last = found?;
    let mut path = vec![start.to_string()];
    let mut back = vec![last];
    while last != start {
        last = prev[last];
        if last != start {
            back.push(last);
        }
    }
    back.reverse();
    path.extend(back.into_iter().map(String::from));
    path.push(start.to_string());
    Some(path)
}
