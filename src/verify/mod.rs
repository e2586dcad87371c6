//! `verify`: the smoke test RDNA1 users trust (ROCM-GFX1010.md, "A smoke test users trust"):
//! Conv2d forward at the sizes, channel pairs, kernel sizes and batch sizes where the known
//! hangs live, a batchnorm forward/backward and a matmul, float32, each case in a process of
//! its own under a timeout of its own ([`run`]), so a hang is reported as HANG and the run goes
//! on. Only a real GPU proves the stack; without one every case fails with the reason.

pub mod run;

use serde::Serialize;

/// The Python script each case runs (`python case.py '<case json>'`).
pub const CASE_SCRIPT: &str = include_str!("case.py");

/// One case of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    Conv { cin: u32, cout: u32, size: u32, kernel: u32, batch: u32 },
    Batchnorm { channels: u32, size: u32, batch: u32 },
    Matmul { n: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Case {
    pub id: String,
    #[serde(flatten)]
    pub op: Op,
}

impl Case {
    fn conv(cin: u32, cout: u32, size: u32, kernel: u32, batch: u32) -> Case {
        Case {
            id: format!("conv-{cin}-{cout}-s{size}-k{kernel}-b{batch}"),
            op: Op::Conv { cin, cout, size, kernel, batch },
        }
    }

    /// For people: `conv2d 3->64 224x224 k3 b1`.
    pub fn describe(&self) -> String {
        match &self.op {
            Op::Conv { cin, cout, size, kernel, batch } => {
                format!("conv2d {cin}->{cout} {size}x{size} k{kernel} b{batch}")
            }
            Op::Batchnorm { channels, size, batch } => {
                format!("batchnorm fwd+bwd {channels}ch {size}x{size} b{batch}")
            }
            Op::Matmul { n } => format!("matmul {n}x{n}"),
        }
    }

    /// The JSON the case script reads.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a case serialises")
    }
}

/// The matrix, in the order it runs: 3->64 at every size, the channel pairs where the hangs
/// were reported, kernel sizes, batch sizes, then batchnorm and a matmul.
pub fn matrix() -> Vec<Case> {
    let mut cases = Vec::new();
    for size in [32, 40, 42, 44, 48, 56, 64, 128, 224, 512] {
        cases.push(Case::conv(3, 64, size, 3, 1));
    }
    for (cin, cout, sizes) in [(16, 32, &[32, 48, 64][..]), (32, 64, &[48, 64][..]), (64, 128, &[64, 96][..])] {
        for &size in sizes {
            cases.push(Case::conv(cin, cout, size, 3, 1));
        }
    }
    for kernel in [1, 5, 7] {
        cases.push(Case::conv(3, 64, 32, kernel, 1));
    }
    for batch in [2, 4, 8, 16] {
        cases.push(Case::conv(3, 64, 32, 3, batch));
    }
    cases.push(Case { id: "batchnorm-64-s32-b4".into(), op: Op::Batchnorm { channels: 64, size: 32, batch: 4 } });
    cases.push(Case { id: "matmul-1024".into(), op: Op::Matmul { n: 1024 } });
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ids_are_unique_and_cover_the_reported_matrix() {
        let m = matrix();
        let mut ids: Vec<&str> = m.iter().map(|c| c.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), m.len(), "duplicate case ids");
        for id in ["conv-3-64-s512-k3-b1", "conv-16-32-s48-k3-b1", "conv-64-128-s96-k3-b1", "conv-3-64-s32-k7-b1"] {
            assert!(ids.contains(&id), "{id} missing");
        }
        assert!(ids.contains(&"conv-3-64-s32-k3-b16"));
    }

    /// The shipped profiles' known hangs name cases of this matrix.
    #[test]
    fn known_hangs_of_the_embedded_stacks_are_cases() {
        let tree = crate::recipe::RecipeTree::embedded();
        let ids: Vec<String> = matrix().into_iter().map(|c| c.id).collect();
        let mut seen = 0;
        for s in crate::recipe::load_all(&tree).expect("embedded recipes load") {
            for p in s.profiles.values() {
                for h in &p.known_hangs {
                    assert!(ids.contains(h), "{}: profile {} lists unknown case {h}", s.name, p.name);
                    seen += 1;
                }
            }
        }
        assert!(seen > 0, "the 5.7 fallback lists its known hangs");
    }

    #[test]
    fn case_json_is_what_the_script_reads() {
        let c = Case::conv(16, 32, 48, 3, 1);
        assert_eq!(
            c.json(),
            r#"{"id":"conv-16-32-s48-k3-b1","op":"conv","cin":16,"cout":32,"size":48,"kernel":3,"batch":1}"#
        );
    }
}
