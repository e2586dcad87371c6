//! The dependency graph (petgraph): the closure of what was asked for, a deterministic
//! topological order, and the waves of recipes that can build side by side. Cycles are found by
//! the recipe layer, which refuses a stack that has one ([`find_cycles`]).

use std::collections::{BTreeMap, BTreeSet};

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction;

pub use crate::recipe::find_cycles;
use crate::recipe::Stack;

#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("no recipe named `{name}` in stack `{stack}`{hint}\nrun `rocmforge recipes list --stack {stack}` to see them all")]
    UnknownRecipe { name: String, stack: String, hint: String },
}

impl GraphError {
    /// `name` is not a recipe of `stack`: the error names the closest one.
    pub fn unknown(stack: &Stack, name: &str) -> GraphError {
        let close = crate::recipe::load_closest(name, stack.recipes.keys().map(String::as_str));
        GraphError::UnknownRecipe {
            name: name.to_string(),
            stack: stack.name.clone(),
            hint: close.first().map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default(),
        }
    }
}

/// The closure of the requested recipes, with edges dependency -> dependent.
#[derive(Debug)]
pub struct BuildGraph {
    graph: DiGraph<String, ()>,
    index: BTreeMap<String, NodeIndex>,
    requested: Vec<String>,
}

impl BuildGraph {
    /// Everything `roots` need, transitively. The stack is already validated (no cycles).
    pub fn closure(stack: &Stack, roots: &[String]) -> Result<BuildGraph, GraphError> {
        let mut graph = DiGraph::new();
        let mut index = BTreeMap::new();
        let mut todo: Vec<String> = Vec::new();
        for r in roots {
            if stack.recipe(r).is_none() {
                return Err(GraphError::unknown(stack, r));
            }
            todo.push(r.clone());
        }
        let mut seen = BTreeSet::new();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            let recipe = &stack.recipes[&name];
            for dep in recipe.all_deps() {
                todo.push(dep.to_string());
            }
        }
        for name in &seen {
            index.insert(name.clone(), graph.add_node(name.clone()));
        }
        for name in &seen {
            for dep in stack.recipes[name].all_deps() {
                graph.update_edge(index[dep], index[name], ());
            }
        }
        Ok(BuildGraph { graph, index, requested: roots.to_vec() })
    }

    pub fn requested(&self) -> &[String] {
        &self.requested
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Direct dependencies of `name` inside the closure, sorted.
    pub fn deps_of(&self, name: &str) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .graph
            .neighbors_directed(self.index[name], Direction::Incoming)
            .map(|n| self.graph[n].as_str())
            .collect();
        v.sort();
        v
    }

    /// Direct dependents of `name` inside the closure, sorted.
    pub fn dependents_of(&self, name: &str) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .graph
            .neighbors_directed(self.index[name], Direction::Outgoing)
            .map(|n| self.graph[n].as_str())
            .collect();
        v.sort();
        v
    }

    /// Waves: wave 0 has no dependencies; every recipe of wave n depends only on waves < n, so
    /// the recipes of one wave can build side by side. Within a wave, names are sorted.
    pub fn waves(&self) -> Vec<Vec<&str>> {
        let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
        for name in self.order() {
            let d = self.deps_of(name).iter().map(|dep| depth[dep] + 1).max().unwrap_or(0);
            depth.insert(name, d);
        }
        let mut waves: Vec<Vec<&str>> = Vec::new();
        for (name, d) in depth {
            if waves.len() <= d {
                waves.resize(d + 1, Vec::new());
            }
            waves[d].push(name);
        }
        waves
    }

    /// A deterministic topological order: Kahn's algorithm taking the alphabetically smallest
    /// ready recipe each time, so the same graph always gives the same order.
    pub fn order(&self) -> Vec<&str> {
        let mut indeg: BTreeMap<&str, usize> = self
            .index
            .iter()
            .map(|(n, &i)| (n.as_str(), self.graph.neighbors_directed(i, Direction::Incoming).count()))
            .collect();
        let mut ready: BTreeSet<&str> = indeg.iter().filter(|(_, d)| **d == 0).map(|(n, _)| *n).collect();
        let mut out = Vec::with_capacity(indeg.len());
        while let Some(n) = ready.pop_first() {
            out.push(n);
            for m in self.dependents_of(n) {
                let d = indeg.get_mut(m).expect("node is in graph");
                *d -= 1;
                if *d == 0 {
                    ready.insert(m);
                }
            }
        }
        out
    }

    /// Everything downstream of `name` (not including it).
    pub fn downstream_of(&self, name: &str) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        let mut todo = vec![name];
        while let Some(n) = todo.pop() {
            for m in self.dependents_of(n) {
                if out.insert(m) {
                    todo.push(m);
                }
            }
        }
        out
    }

    /// Graphviz text.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph rocmforge {\n  rankdir=LR;\n  node [shape=box];\n");
        for n in self.order() {
            s.push_str(&format!("  \"{n}\";\n"));
        }
        for n in self.order() {
            for d in self.deps_of(n) {
                s.push_str(&format!("  \"{d}\" -> \"{n}\";\n"));
            }
        }
        s.push_str("}\n");
        s
    }

    pub fn to_json(&self) -> serde_json::Value {
        let nodes: Vec<serde_json::Value> =
            self.order().into_iter().map(|n| serde_json::json!({ "name": n, "deps": self.deps_of(n) })).collect();
        let edges: Vec<serde_json::Value> = self
            .order()
            .into_iter()
            .flat_map(|n| self.deps_of(n).into_iter().map(move |d| serde_json::json!({ "from": d, "to": n })))
            .collect();
        serde_json::json!({ "requested": self.requested, "nodes": nodes, "edges": edges, "waves": self.waves() })
    }
}
