//! `verify`: the smoke test RDNA1 users trust (ROCM-GFX1010.md, "A smoke test users trust"),
//! grown from inference to training. Each case runs in a process of its own under a timeout of
//! its own ([`run`]), so a hang is reported as HANG and the run goes on. The matrix, in order:
//!
//! - Conv2d forward at the sizes, channel pairs, kernel sizes and batch sizes where the known
//!   hangs live (`conv-*`, float32);
//! - Conv2d backward (`conv-bwd-*`) at **every** one of those forward sizes: MIOpen picks its
//!   backward-data and backward-weights solvers per size as it picks the forward ones, and no
//!   report says where backward hangs lie, so a subset would be a guess;
//! - batchnorm forward+backward at five channel/size/batch combinations (MIOpen picks among its
//!   batchnorm kernel variants by spatial size, batch and channels; its backward is what gfx1010
//!   breaks), GroupNorm and LayerNorm forward+backward;
//! - `nonzero`, `unique`, `scatter_add`, `sort`/`topk`, `cumsum` (reported broken on gfx1010
//!   by jc1122/pytorch-gfx1010, or built on the same scan and sort kernels);
//! - an LSTM and a GRU forward+backward with biases (MIOpen's backward weights reduces the bias
//!   gradient with `ReduceTensor`, which MIOpen 6.2 as released cannot build for gfx101x),
//!   scaled dot-product attention forward+backward;
//! - matmul forward+backward in float32, float16 and bfloat16;
//! - three AdamW steps on a small CNN, and five SGD steps of a small ResNet on one batch of
//!   random data, whose loss must fall;
//! - an int64 `cumsum`, a `masked_select` and a `nonzero` over 3 million values, eight times per
//!   call, each repetition compared exactly (rocPRIM's decoupled look-back with prefixes over 4
//!   bytes gives wrong results on GFX10 only now and then; a WRONG line names the repetition);
//! - `torch.compile` of a small MLP, forward+backward: Inductor writes Triton kernels for the
//!   GPU, so a torch with no Triton fails with that reason first (`no Triton installed (...)`),
//!   torch before 2.0 has no `torch.compile`, and a Triton error is shown as Triton raised it.
//!
//! Every case ([`CASE_SCRIPT`]) checks its outputs and gradients against a float64 CPU
//! reference computed in the same script from the same inputs (rounded to the case's dtype). A
//! floating tensor passes when `max |got - want| <= atol + rtol * max |want|` over the tensor:
//! float32 rtol 1e-3, atol 1e-5; float16 rtol 1e-2, atol 1e-3; bfloat16 rtol 4e-2, atol 1e-2
//! (`TOLERANCE` in case.py is where they live). Integer results (indices, counts) must be
//! equal. A difference is [`run::Outcome::Wrong`], naming the tensor, the largest difference and
//! the tolerance. An op the case's torch lacks (scaled dot-product attention and `torch.compile`
//! before torch 2.0, Triton for `torch.compile` on the GPU) is an error saying so; a profile
//! lists it in `known-failures`, with the reason in a comment beside it.
//!
//! Only a real GPU verifies the stack: without one every case fails with the reason. CPU mode
//! (`ROCMFORGE_VERIFY_DEVICE=cpu` in the caller's environment, `ci/verify-cpu.sh`) runs the
//! device side on the CPU, which tests the case programs and nothing about a GPU. The cases,
//! the tolerances and a recorded CPU-mode run: docs/verify.md.

pub mod probe;
pub mod run;

use serde::Serialize;

/// The Python script each case runs (`python case.py '<case json>'`).
pub const CASE_SCRIPT: &str = include_str!("case.py");

/// The variable that switches CPU mode on, read by the case script; `verify` passes it only
/// from the caller's environment (a profile may not set it: the recipe loader refuses it).
pub use crate::recipe::VERIFY_DEVICE_VAR as DEVICE_VAR;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float32,
    Float16,
    Bfloat16,
}

impl Dtype {
    fn short(self) -> &'static str {
        match self {
            Dtype::Float32 => "fp32",
            Dtype::Float16 => "fp16",
            Dtype::Bfloat16 => "bf16",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cell {
    Lstm,
    Gru,
}

/// One case of the matrix: the op and the sizes the script reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    Conv {
        cin: u32,
        cout: u32,
        size: u32,
        kernel: u32,
        batch: u32,
    },
    ConvBackward {
        cin: u32,
        cout: u32,
        size: u32,
        kernel: u32,
        batch: u32,
    },
    Batchnorm {
        channels: u32,
        size: u32,
        batch: u32,
    },
    GroupNorm {
        channels: u32,
        groups: u32,
        size: u32,
        batch: u32,
    },
    LayerNorm {
        hidden: u32,
        seq: u32,
        batch: u32,
    },
    /// `n` x `n` values, about 62% zeros.
    Nonzero {
        n: u32,
    },
    Unique {
        n: u32,
    },
    /// `n` values into `bins` (and a 64-row version along dim 1).
    ScatterAdd {
        n: u32,
        bins: u32,
    },
    /// Sort of `n` values; row sort and top-`k` of `rows` x `cols`.
    SortTopk {
        n: u32,
        rows: u32,
        cols: u32,
        k: u32,
    },
    /// `n` values, and as `rows` rows along dim 1; int32 too.
    Cumsum {
        n: u32,
        rows: u32,
    },
    /// Always with biases (`bias` is true): their gradient is the reduction MIOpen's backward
    /// weights does with `ReduceTensor`.
    /// rocFFT through torch.fft: a real transform and its inverse along rows of `n` values (not a
    /// power of two), a 2-D complex transform of `height` x `width`, and the gradient of the first.
    Fft {
        rows: u32,
        n: u32,
        height: u32,
        width: u32,
    },
    Rnn {
        cell: Cell,
        bias: bool,
        input: u32,
        hidden: u32,
        layers: u32,
        seq: u32,
        batch: u32,
    },
    Sdpa {
        batch: u32,
        heads: u32,
        seq: u32,
        dim: u32,
    },
    Matmul {
        n: u32,
        dtype: Dtype,
    },
    Adamw {
        batch: u32,
        size: u32,
        steps: u32,
    },
    TrainResnet {
        batch: u32,
        size: u32,
        steps: u32,
    },
    /// [`Repeat`] over `n` values, `reps` times in each call; every repetition is compared
    /// exactly with the reference.
    Repeated {
        what: Repeat,
        n: u32,
        reps: u32,
    },
    /// `torch.compile` (Inductor) of a small MLP, `features` -> `hidden` -> 10 on a batch of
    /// `batch`, forward and backward.
    Compile {
        features: u32,
        hidden: u32,
        batch: u32,
    },
}

/// The ops of [`Op::Repeated`]: scans whose prefix type is over 4 bytes, or selections built on
/// rocPRIM's decoupled look-back, which gives wrong results on GFX10 only now and then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Repeat {
    /// `torch.cumsum` of int64 values (sums past the int32 range).
    CumsumInt64,
    /// `torch.masked_select` of int64 values by a random mask (about half true).
    MaskedSelect,
    /// `torch.nonzero` of int64 values (about 2/3 zero) as 1000 rows.
    Nonzero,
}

impl Repeat {
    fn name(self) -> &'static str {
        match self {
            Repeat::CumsumInt64 => "cumsum int64",
            Repeat::MaskedSelect => "masked_select int64",
            Repeat::Nonzero => "nonzero int64",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Case {
    pub id: String,
    #[serde(flatten)]
    pub op: Op,
}

impl Case {
    fn new(id: impl Into<String>, op: Op) -> Case {
        Case { id: id.into(), op }
    }

    fn conv(cin: u32, cout: u32, size: u32, kernel: u32, batch: u32) -> Case {
        Case::new(format!("conv-{cin}-{cout}-s{size}-k{kernel}-b{batch}"), Op::Conv { cin, cout, size, kernel, batch })
    }

    fn batchnorm(channels: u32, size: u32, batch: u32) -> Case {
        Case::new(format!("batchnorm-{channels}-s{size}-b{batch}"), Op::Batchnorm { channels, size, batch })
    }

    /// For people: `conv2d 3->64 224x224 k3 b1`.
    pub fn describe(&self) -> String {
        match &self.op {
            Op::Conv { cin, cout, size, kernel, batch } => {
                format!("conv2d {cin}->{cout} {size}x{size} k{kernel} b{batch}")
            }
            Op::ConvBackward { cin, cout, size, kernel, batch } => {
                format!("conv2d fwd+bwd {cin}->{cout} {size}x{size} k{kernel} b{batch}")
            }
            Op::Batchnorm { channels, size, batch } => {
                format!("batchnorm fwd+bwd {channels}ch {size}x{size} b{batch}")
            }
            Op::GroupNorm { channels, groups, size, batch } => {
                format!("groupnorm fwd+bwd {channels}ch {groups} groups {size}x{size} b{batch}")
            }
            Op::LayerNorm { hidden, seq, batch } => format!("layernorm fwd+bwd {seq}x{hidden} b{batch}"),
            Op::Nonzero { n } => format!("nonzero {n}x{n} (exact)"),
            Op::Unique { n } => format!("unique {n} int64+float (exact)"),
            Op::ScatterAdd { n, bins } => format!("scatter_add fwd+bwd {n} -> {bins}"),
            Op::SortTopk { n, rows, cols, k } => format!("sort {n}, topk{k} {rows}x{cols}, bwd"),
            Op::Cumsum { n, rows } => format!("cumsum fwd+bwd {n}, {rows} rows, int32"),
            Op::Fft { rows, n, height, width } => {
                format!("rfft+irfft {rows}x{n}, fft2 {height}x{width}, bwd")
            }
            Op::Rnn { cell, bias, input, hidden, layers, seq, batch } => {
                let name = match cell {
                    Cell::Lstm => "lstm",
                    Cell::Gru => "gru",
                };
                let bias = if *bias { ", with bias" } else { "" };
                format!("{name} fwd+bwd {input}->{hidden} x{layers} seq{seq} b{batch}{bias}")
            }
            Op::Sdpa { batch, heads, seq, dim } => format!("sdpa fwd+bwd {heads}h {seq}x{dim} b{batch}"),
            Op::Matmul { n, dtype } => format!("matmul fwd+bwd {n}x{n} {}", dtype.short()),
            Op::Adamw { batch, size, steps } => format!("adamw {steps} steps, cnn {size}x{size} b{batch}"),
            Op::TrainResnet { batch, size, steps } => {
                format!("train resnet {steps} steps {size}x{size} b{batch}")
            }
            Op::Repeated { what, n, reps } => format!("{} {n}, {reps} times (exact)", what.name()),
            Op::Compile { features, hidden, batch } => {
                format!("torch.compile mlp fwd+bwd {features}->{hidden}->10 b{batch}")
            }
        }
    }

    /// The JSON the case script reads.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a case serialises")
    }
}

/// The Conv2d forward sizes: 3->64 at every size, the channel pairs where the hangs were
/// reported, kernel sizes, batch sizes (cin, cout, size, kernel, batch).
fn conv_sizes() -> Vec<(u32, u32, u32, u32, u32)> {
    let mut v = Vec::new();
    for size in [32, 40, 42, 44, 48, 56, 64, 128, 224, 512] {
        v.push((3, 64, size, 3, 1));
    }
    for (cin, cout, sizes) in [(16, 32, &[32, 48, 64][..]), (32, 64, &[48, 64][..]), (64, 128, &[64, 96][..])] {
        for &size in sizes {
            v.push((cin, cout, size, 3, 1));
        }
    }
    for kernel in [1, 5, 7] {
        v.push((3, 64, 32, kernel, 1));
    }
    for batch in [2, 4, 8, 16] {
        v.push((3, 64, 32, 3, batch));
    }
    v
}

/// The matrix, in the order it runs: the inference cases first (conv forward, the first
/// batchnorm, the float32 matmul: the original smoke test, ids unchanged), then training.
pub fn matrix() -> Vec<Case> {
    let mut cases: Vec<Case> = conv_sizes().into_iter().map(|(i, o, s, k, b)| Case::conv(i, o, s, k, b)).collect();
    cases.push(Case::batchnorm(64, 32, 4));
    cases.push(Case::new("matmul-1024", Op::Matmul { n: 1024, dtype: Dtype::Float32 }));
    for (cin, cout, size, kernel, batch) in conv_sizes() {
        cases.push(Case::new(
            format!("conv-bwd-{cin}-{cout}-s{size}-k{kernel}-b{batch}"),
            Op::ConvBackward { cin, cout, size, kernel, batch },
        ));
    }
    for (channels, size, batch) in [(16, 8, 32), (128, 16, 8), (32, 112, 2), (256, 7, 16)] {
        cases.push(Case::batchnorm(channels, size, batch));
    }
    cases.push(Case::new("groupnorm-64-g8-s32-b4", Op::GroupNorm { channels: 64, groups: 8, size: 32, batch: 4 }));
    cases.push(Case::new("layernorm-512-t128-b8", Op::LayerNorm { hidden: 512, seq: 128, batch: 8 }));
    cases.push(Case::new("nonzero", Op::Nonzero { n: 1000 }));
    cases.push(Case::new("unique", Op::Unique { n: 200_000 }));
    cases.push(Case::new("scatter-add", Op::ScatterAdd { n: 1 << 20, bins: 1000 }));
    cases.push(Case::new("sort-topk", Op::SortTopk { n: 1 << 20, rows: 256, cols: 1000, k: 10 }));
    cases.push(Case::new("cumsum", Op::Cumsum { n: 1 << 20, rows: 64 }));
    // 1000 = 2^3 x 5^3 and 96 x 120: mixed radices, as images and signals have. rocFFT 6.2 is
    // built without its kernel cache (issue 33), so the first call compiles these kernels.
    cases.push(Case::new("fft", Op::Fft { rows: 64, n: 1000, height: 96, width: 120 }));
    for (id, cell) in [("lstm", Cell::Lstm), ("gru", Cell::Gru)] {
        cases.push(Case::new(id, Op::Rnn { cell, bias: true, input: 32, hidden: 64, layers: 2, seq: 50, batch: 8 }));
    }
    cases.push(Case::new("sdpa", Op::Sdpa { batch: 4, heads: 8, seq: 128, dim: 64 }));
    cases.push(Case::new("matmul-fp16-1024", Op::Matmul { n: 1024, dtype: Dtype::Float16 }));
    cases.push(Case::new("matmul-bf16-1024", Op::Matmul { n: 1024, dtype: Dtype::Bfloat16 }));
    cases.push(Case::new("adamw-cnn", Op::Adamw { batch: 16, size: 32, steps: 3 }));
    cases.push(Case::new("train-resnet", Op::TrainResnet { batch: 32, size: 32, steps: 5 }));
    // Over a million values (and not a multiple of any tile), eight times per call.
    for (id, what) in [
        ("cumsum-int64-repeat", Repeat::CumsumInt64),
        ("masked-select-repeat", Repeat::MaskedSelect),
        ("nonzero-repeat", Repeat::Nonzero),
    ] {
        cases.push(Case::new(id, Op::Repeated { what, n: 3_000_017, reps: 8 }));
    }
    cases.push(Case::new("torch-compile", Op::Compile { features: 64, hidden: 128, batch: 32 }));
    cases
}

/// The known hangs and known failures of `stack`'s profiles that are no case of the matrix,
/// each at its line (`recipes check` refuses them, as `verify` would).
pub fn unknown_cases(stack: &crate::recipe::Stack) -> Vec<crate::diagnostic::Diagnostic> {
    let ids: Vec<String> = matrix().into_iter().map(|c| c.id).collect();
    let mut out = Vec::new();
    for p in stack.profiles.values() {
        for (what, list) in p.known.lists() {
            for id in list.iter().filter(|id| !ids.contains(id)) {
                let close = crate::recipe::load_closest(id, ids.iter().map(String::as_str));
                let mut d =
                    p.case_at.get(id).cloned().unwrap_or_else(|| crate::diagnostic::Diagnostic::file(&stack.file, ""));
                d.message = format!("profile `{}` lists {what} `{id}`, which is no case of the verify matrix", p.name);
                d.help = Some(match close.first() {
                    Some(c) => format!("did you mean `{c}`? `rocmforge verify --list` lists the cases"),
                    None => "`rocmforge verify --list` lists the cases".to_string(),
                });
                out.push(d);
            }
        }
    }
    out
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
        // The original smoke test's ids, in its order, come first.
        let first: Vec<&str> = m.iter().take(26).map(|c| c.id.as_str()).collect();
        assert_eq!(first[0], "conv-3-64-s32-k3-b1");
        assert_eq!(&first[24..], ["batchnorm-64-s32-b4", "matmul-1024"]);
    }

    /// Every forward conv has its backward twin, with the same sizes.
    #[test]
    fn every_conv_size_has_a_backward_case() {
        let m = matrix();
        let forward: Vec<&Case> = m.iter().filter(|c| matches!(c.op, Op::Conv { .. })).collect();
        assert_eq!(forward.len(), 24);
        for f in forward {
            let Op::Conv { cin, cout, size, kernel, batch } = f.op else { unreachable!() };
            let id = f.id.replacen("conv-", "conv-bwd-", 1);
            let b = m.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no {id}"));
            assert_eq!(b.op, Op::ConvBackward { cin, cout, size, kernel, batch });
        }
    }

    /// The script has a case for every op of the matrix and a tolerance for every dtype, under
    /// the names the JSON gives them.
    #[test]
    fn the_script_knows_every_op_and_dtype() {
        for c in matrix() {
            let json: serde_json::Value = serde_json::from_str(&c.json()).unwrap();
            let op = json["op"].as_str().unwrap();
            assert!(CASE_SCRIPT.contains(&format!("    \"{op}\": ")), "case.py has no `{op}` in CASES ({})", c.id);
            if let Some(w) = json.get("what") {
                let w = w.as_str().unwrap();
                assert!(CASE_SCRIPT.contains(&format!("    \"{w}\": repeated_")), "case.py has no `{w}` in REPEATED");
            }
            if let Some(d) = json.get("dtype") {
                let d = d.as_str().unwrap();
                assert!(CASE_SCRIPT.contains(&format!("    \"{d}\": (")), "case.py has no tolerance for {d}");
            }
        }
        assert!(CASE_SCRIPT.contains(DEVICE_VAR));
    }

    /// The shipped profiles' known hangs and known failures name cases of this matrix.
    #[test]
    fn known_hangs_of_the_embedded_stacks_are_cases() {
        let tree = crate::recipe::RecipeTree::embedded();
        let ids: Vec<String> = matrix().into_iter().map(|c| c.id).collect();
        let (mut hangs, mut failures) = (0, 0);
        for s in crate::recipe::load_all(&tree).expect("embedded recipes load") {
            for p in s.profiles.values() {
                for h in &p.known.hangs {
                    assert!(ids.contains(h), "{}: profile {} lists unknown case {h}", s.name, p.name);
                    hangs += 1;
                }
                for f in &p.known.failures {
                    assert!(ids.contains(f), "{}: profile {} lists unknown case {f}", s.name, p.name);
                    failures += 1;
                }
            }
        }
        assert!(hangs > 0, "the 5.7 fallback lists its known hangs");
        assert!(failures > 0, "the 5.2 fallback lists sdpa, which torch 1.13 lacks");
    }

    /// The paths the known gfx101x failures touch: RNN backward with biases (MIOpen reduces their
    /// gradient with ReduceTensor), scans and selections over a million values with 8-byte
    /// prefixes, repeated (the look-back failure is sporadic), and torch.compile.
    #[test]
    fn the_matrix_reaches_the_known_gfx101x_failure_paths() {
        let m = matrix();
        let case = |id: &str| m.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no case {id}"));
        for id in ["lstm", "gru"] {
            assert!(matches!(case(id).op, Op::Rnn { bias: true, .. }), "{id} runs without biases");
            assert!(case(id).describe().ends_with(", with bias"), "{}", case(id).describe());
        }
        // The script builds the cell with the case's biases and checks every parameter's gradient.
        assert!(CASE_SCRIPT.contains("num_layers=layers, bias=c[\"bias\"], batch_first=True"));
        assert!(CASE_SCRIPT.contains("out.update(grads(\"grad \", m))"));
        for (id, what) in [
            ("cumsum-int64-repeat", Repeat::CumsumInt64),
            ("masked-select-repeat", Repeat::MaskedSelect),
            ("nonzero-repeat", Repeat::Nonzero),
        ] {
            let Op::Repeated { what: w, n, reps } = case(id).op else { panic!("{id} is no repeated case") };
            assert_eq!(w, what);
            assert!(n > 1_000_000 && reps >= 4, "{id}: {n} values, {reps} repetitions");
        }
        // Each repetition is a result of its own, named in a WRONG line.
        assert!(CASE_SCRIPT.contains("out[f\"{name}, repetition {i + 1} of {reps}\"] = result"));
        assert!(matches!(case("torch-compile").op, Op::Compile { .. }));
        // The new cases run after the existing ones: their ids and order are unchanged.
        let ids: Vec<&str> = m.iter().map(|c| c.id.as_str()).collect();
        let at = ids.iter().position(|&i| i == "train-resnet").unwrap();
        assert_eq!(&ids[at + 1..], ["cumsum-int64-repeat", "masked-select-repeat", "nonzero-repeat", "torch-compile"]);
    }

    #[test]
    fn case_json_is_what_the_script_reads() {
        let c = Case::conv(16, 32, 48, 3, 1);
        assert_eq!(
            c.json(),
            r#"{"id":"conv-16-32-s48-k3-b1","op":"conv","cin":16,"cout":32,"size":48,"kernel":3,"batch":1}"#
        );
        let m = matrix();
        let json = |id: &str| m.iter().find(|c| c.id == id).unwrap().json();
        assert_eq!(json("matmul-bf16-1024"), r#"{"id":"matmul-bf16-1024","op":"matmul","n":1024,"dtype":"bfloat16"}"#);
        assert_eq!(
            json("lstm"),
            r#"{"id":"lstm","op":"rnn","cell":"lstm","bias":true,"input":32,"hidden":64,"layers":2,"seq":50,"batch":8}"#
        );
        assert_eq!(
            json("nonzero-repeat"),
            r#"{"id":"nonzero-repeat","op":"repeated","what":"nonzero","n":3000017,"reps":8}"#
        );
        assert_eq!(
            json("torch-compile"),
            r#"{"id":"torch-compile","op":"compile","features":64,"hidden":128,"batch":32}"#
        );
    }
}
