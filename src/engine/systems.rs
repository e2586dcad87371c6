//! Build systems: turn a recipe's `[build]` into steps, with the environment and placeholder
//! expansion decided here, in one place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::recipe::{BuildSystem, Recipe};
use crate::target::TargetSet;

use super::step::{shell_quote, Step};

/// Fixed timestamp for reproducible archives and wheels (1980-01-02: zip's epoch + 1 day).
pub const SOURCE_DATE_EPOCH: &str = "315619200";

/// What the work dir is called in what compilers record (debug info, `__FILE__`): every build
/// passes `-ffile-prefix-map=<work-dir>=/rocmforge-work` in `CFLAGS`, `CXXFLAGS` and `HIPFLAGS`,
/// so two work dirs (two machines) make the same bytes. To debug, tell the debugger where the
/// sources are: `gdb -ex 'set substitute-path /rocmforge-work <work-dir>'`.
pub const STABLE_WORK_DIR: &str = "/rocmforge-work";

/// Host variables passed to steps without entering the cache key (they change where things
/// come from, not what is built).
const PASS_THROUGH_PREFIXES: &[&str] = &["PIP_", "UV_", "CCACHE_", "SCCACHE_", "DISTCC_"];
const PASS_THROUGH: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Everything placeholders and environments are made from, for one recipe.
#[derive(Debug, Clone)]
pub struct Vars {
    pub prefix: PathBuf,
    pub targets: Option<TargetSet>,
    pub jobs: usize,
    pub src: PathBuf,
    pub build: PathBuf,
    pub stage: PathBuf,
    /// The steps' temp dir (`TMPDIR`, `TMP`, `TEMP`), inside the recipe's work dir: what hipcc,
    /// pip and the rest leave there, a killed step's too, goes with the work dir, never into the
    /// user's `$TMPDIR`.
    pub tmp: PathBuf,
    /// `{installed}`: where the recipe's installed files are before they are stored (the stage,
    /// or for cmake the prefix's path inside it), which `[[check]]` steps test.
    pub installed: PathBuf,
    /// The targets the build was asked for: what `{targets}` means in the `[[check]]` steps of
    /// a host-only recipe (a toolchain's check compiles for them).
    pub requested: Option<TargetSet>,
    /// The whole work dir (every recipe's `src`, `build` and `stage` lie under it): mapped to
    /// [`STABLE_WORK_DIR`] in what compilers record.
    pub work_dir: PathBuf,
    /// The Python steps use: the recipe's venv for python-wheel, else the host Python.
    pub python: Option<PathBuf>,
    pub host_python: Option<PathBuf>,
    pub version: String,
    pub wheel_version: String,
    /// `{src:<recipe>}`: prepared trees of source dependencies.
    pub source_trees: BTreeMap<String, PathBuf>,
    /// An installed ROCm providing some components (`--rocm-path`): searched after the prefix.
    pub rocm_path: Option<PathBuf>,
    /// `{rocm}`: the ROCm root the recipe builds against: the installation when something it
    /// depends on is taken from there, else the prefix. `{rocm_llvm}` and `{rocm_device_libs}`:
    /// the LLVM and the device libraries, where they lie (`lib/llvm-21` in Debian's layout).
    pub rocm: PathBuf,
    pub rocm_llvm: PathBuf,
    pub rocm_device_libs: PathBuf,
    /// On an installation: the CMake packages of the rebuilt recipes it depends on, each set as
    /// `<package>_ROOT=<prefix>` so `find_package` takes the rebuilt copy even where the project
    /// puts the installation first in its own `CMAKE_PREFIX_PATH` (PyTorch appends `ROCM_PATH`).
    pub package_roots: Vec<String>,
    /// `<package>_DIR=<folder>` for each CMake package taken from an installation
    /// (`Plan::taken_cmake_dirs`): found wherever the installation keeps it.
    pub package_dirs: BTreeMap<String, PathBuf>,
    /// `{root:<recipe>}`: for each build dependency, the root holding its files: the
    /// installation when the plan takes it from there, else the prefix.
    pub dep_roots: BTreeMap<String, PathBuf>,
    /// python-wheel: a folder holding the wheels of the recipe's build dependencies, offered to
    /// pip with `--find-links`.
    pub find_links: Option<PathBuf>,
    /// python-wheel: the dependency wheel files `install-wheels` names, installed by path.
    pub install_wheels: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExpandError {
    #[error("{recipe}: unknown placeholder `{{{name}}}` in `{text}`; known: {known}", known = crate::recipe::placeholders::known_list())]
    Unknown { recipe: String, name: String, text: String },
    #[error("{recipe}: `{{src:{dep}}}` names a recipe that is not among its source dependencies; add it to `[dependencies] source`")]
    NotASourceDep { recipe: String, dep: String },
    #[error("{recipe}: `{{root:{dep}}}` names a recipe that is not among its build dependencies; add it to `[dependencies] build`")]
    NotABuildDep { recipe: String, dep: String },
    #[error("{recipe}: `{{python}}` is used but no Python was found; set `python` in the stack or ROCMFORGE_PYTHON")]
    NoPython { recipe: String },
}

impl Vars {
    /// Expands `{name}` placeholders; `{{` and `}}` are literal braces
    /// ([`crate::recipe::placeholders`]).
    pub fn expand(&self, recipe: &str, text: &str) -> Result<String, ExpandError> {
        let mut out = String::with_capacity(text.len());
        for p in crate::recipe::placeholders::pieces(text) {
            match p {
                crate::recipe::placeholders::Piece::Text(t) | crate::recipe::placeholders::Piece::Unclosed(t) => {
                    out.push_str(t)
                }
                crate::recipe::placeholders::Piece::Name(name) => out.push_str(&self.value(recipe, name, text)?),
            }
        }
        Ok(out)
    }

    fn value(&self, recipe: &str, name: &str, text: &str) -> Result<String, ExpandError> {
        let p = |p: &Path| p.display().to_string();
        Ok(match name {
            "prefix" => p(&self.prefix),
            "targets" => self.targets.as_ref().map(TargetSet::cmake_list).unwrap_or_default(),
            "targets_comma" => self.targets.as_ref().map(TargetSet::comma_list).unwrap_or_default(),
            "jobs" => self.jobs.to_string(),
            "src" => p(&self.src),
            "build" => p(&self.build),
            "stage" => p(&self.stage),
            "installed" => p(&self.installed),
            "rocm" => p(&self.rocm),
            "rocm_llvm" => p(&self.rocm_llvm),
            "rocm_device_libs" => p(&self.rocm_device_libs),
            "version" => self.version.clone(),
            "wheel_version" => self.wheel_version.clone(),
            "python" => p(self.python.as_deref().ok_or_else(|| ExpandError::NoPython { recipe: recipe.into() })?),
            other if other.starts_with("root:") => {
                let dep = &other["root:".len()..];
                p(self
                    .dep_roots
                    .get(dep)
                    .ok_or_else(|| ExpandError::NotABuildDep { recipe: recipe.into(), dep: dep.into() })?)
            }
            other => match other.strip_prefix("src:") {
                Some(dep) => p(self
                    .source_trees
                    .get(dep)
                    .ok_or_else(|| ExpandError::NotASourceDep { recipe: recipe.into(), dep: dep.into() })?),
                None => {
                    return Err(ExpandError::Unknown { recipe: recipe.into(), name: other.into(), text: text.into() })
                }
            },
        })
    }
}

/// The environment every step of `recipe` runs in: a small, explicit set.
pub fn step_env(
    recipe: &Recipe,
    vars: &Vars,
    keyed_env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ExpandError> {
    let mut env = BTreeMap::new();
    for (k, v) in std::env::vars() {
        if PASS_THROUGH.contains(&k.as_str()) || PASS_THROUGH_PREFIXES.iter().any(|p| k.starts_with(p)) {
            env.insert(k, v);
        }
    }
    env.extend(keyed_env.clone());
    let host_path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let prefix = vars.prefix.display().to_string();
    let mut path = format!("{prefix}/bin:{host_path}");
    if let Some(py) = vars.python.as_deref().and_then(Path::parent) {
        path = format!("{}:{path}", py.display());
    }
    env.insert("PATH".into(), path);
    if uses_venv(recipe) {
        // Tools look for an active venv first (and CMake is also told its Python: `steps`).
        env.insert("VIRTUAL_ENV".into(), vars.build.join("venv").display().to_string());
    }
    env.insert("LANG".into(), "C.UTF-8".into());
    for var in ["TMPDIR", "TMP", "TEMP"] {
        env.insert(var.into(), vars.tmp.display().to_string());
    }
    let cmake_prefix_path = match &vars.rocm_path {
        Some(rocm) => format!("{prefix}:{}", rocm.display()),
        None => prefix.clone(),
    };
    env.insert("CMAKE_PREFIX_PATH".into(), cmake_prefix_path);
    for pkg in &vars.package_roots {
        env.insert(format!("{pkg}_ROOT"), prefix.clone());
    }
    for (pkg, dir) in &vars.package_dirs {
        env.insert(format!("{pkg}_DIR"), dir.display().to_string());
    }
    // Device libraries taken from an installation: clang looks for them under `--rocm-path`
    // (hipcc passes `$ROCM_PATH`), which fails where a distribution keeps them apart (Debian:
    // `ROCM_PATH=/usr`, libraries in `lib/llvm-21/lib/clang/21/amdgcn/bitcode`). Clang's own
    // `HIP_DEVICE_LIB_PATH` names them wherever they lie. So too for device libraries built
    // into the prefix when the compiler is taken: clang looks beside its own installation
    // (the rocm-5.4 night: Debian 12's clang-15, ROCR's blit kernels).
    // ROCm 5.x's perl hipcc passes `--hip-device-lib-path=$DEVICE_LIB_PATH`, which wins over
    // clang's variable, defaulting it to `$ROCM_PATH/amdgcn/bitcode` or else `$ROCM_PATH/lib`
    // (HIP rocm-5.4.3 bin/hipcc.pl:78,138-146,716-719): it gets the same folder.
    if !vars.rocm_device_libs.starts_with(&vars.prefix) || !vars.rocm_llvm.starts_with(&vars.prefix) {
        env.insert("HIP_DEVICE_LIB_PATH".into(), vars.rocm_device_libs.display().to_string());
        env.insert("DEVICE_LIB_PATH".into(), vars.rocm_device_libs.display().to_string());
    }
    env.insert("LD_LIBRARY_PATH".into(), format!("{prefix}/lib"));
    env.insert("PKG_CONFIG_PATH".into(), format!("{prefix}/lib/pkgconfig:{prefix}/share/pkgconfig"));
    env.insert("SOURCE_DATE_EPOCH".into(), SOURCE_DATE_EPOCH.into());
    env.insert("MAX_JOBS".into(), vars.jobs.to_string());
    env.insert("CMAKE_BUILD_PARALLEL_LEVEL".into(), vars.jobs.to_string());
    if let Some(t) = &vars.targets {
        for (k, v) in t.build_variables() {
            env.insert(k.into(), v);
        }
    }
    for (k, v) in &recipe.build.env {
        env.insert(k.clone(), vars.expand(&recipe.name, v)?);
    }
    // Reproducible debug info: the work dir's path is not recorded (CMake, setuptools and
    // hipcc read these; appended, so the user's and the recipe's flags stay). A path with blanks
    // cannot be passed in a flags variable: then the bytes name the work dir.
    let work = vars.work_dir.display().to_string();
    if !work.is_empty() && !work.contains(char::is_whitespace) {
        let map = format!("-ffile-prefix-map={work}={STABLE_WORK_DIR}");
        for var in ["CFLAGS", "CXXFLAGS", "HIPFLAGS"] {
            let v = match env.get(var).filter(|v| !v.trim().is_empty()) {
                Some(old) => format!("{old} {map}"),
                None => map.clone(),
            };
            env.insert(var.into(), v);
        }
    }
    Ok(env)
}

/// The steps of a recipe, in order. `src` is already the folder to build from.
pub fn steps(recipe: &Recipe, vars: &Vars, env: &BTreeMap<String, String>) -> Result<Vec<Step>, ExpandError> {
    let x = |t: &str| vars.expand(&recipe.name, t);
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let step = |name: &str, command: String, cwd: &Path| Step {
        name: name.into(),
        fills_stage: command.starts_with(&format!("rm -rf {}", q(&vars.stage))),
        command,
        cwd: cwd.to_path_buf(),
        env: env.clone(),
        fresh_dir: None,
    };
    let mut steps = Vec::new();
    match recipe.build.system {
        BuildSystem::SourceOnly => {}
        BuildSystem::Cmake => cmake_steps(recipe, vars, &mut steps, &step)?,
        BuildSystem::PythonWheel => python_wheel_steps(recipe, vars, &mut steps, &step)?,
        BuildSystem::Script => {
            if uses_venv(recipe) {
                venv_steps(recipe, vars, &mut steps, &step)?;
            }
            steps.push(clean_stage_step(vars, &step));
            for (i, s) in recipe.build.steps.iter().enumerate() {
                steps.push(step(&format!("step{}", i + 1), x(s)?, &vars.build));
            }
        }
        // The wheel is written by rocmforge after the steps (`Engine::make_runtime_wheel`), into
        // a fresh stage.
        BuildSystem::RuntimeWheel => steps.push(clean_stage_step(vars, &step)),
        BuildSystem::PrebuiltWheel => {
            // The source is the verified wheel file; it is collected as the output.
            steps.push(step(
                "collect",
                format!(
                    "rm -rf {stage} && mkdir -p {w} && cp {}/*.whl {w}/",
                    q(&vars.src),
                    stage = q(&vars.stage),
                    w = q(&vars.stage.join(WHEEL_DIR))
                ),
                &vars.build,
            ));
        }
    }
    check_steps(recipe, vars, &mut steps, &step)?;
    Ok(steps)
}

/// A cmake recipe's: the venv (if it has one), its own `steps` (in the source), then
/// configure, build and install (into the stage).
fn cmake_steps(
    recipe: &Recipe,
    vars: &Vars,
    steps: &mut Vec<Step>,
    step: &dyn Fn(&str, String, &Path) -> Step,
) -> Result<(), ExpandError> {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let mut configure = format!(
        "cmake -G Ninja -S {} -B {} -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX={} -DCMAKE_PREFIX_PATH={} -DCMAKE_INSTALL_LIBDIR=lib",
        q(&vars.src),
        q(&vars.build),
        q(&vars.prefix),
        q(&vars.prefix)
    );
    if uses_venv(recipe) {
        venv_steps(recipe, vars, steps, step)?;
    }
    // The Python steps use (the venv's; else the stack's, which a stack with `python` gives only
    // to recipes that use `{python}`), named to CMake: FindPython otherwise takes another. Where
    // a CMakeLists asks for less than CMake 3.15 (CMP0094 OLD) it takes the newest on PATH even
    // over VIRTUAL_ENV: clr's hipamd/src found /usr/bin/python3.14 without CppHeaderParser on
    // the night (rocBLAS, which made Tensile's virtualenv from it, names `{python}` itself).
    // Before `args`, which may override it.
    if let Some(py) = &vars.python {
        let py = q(py);
        configure.push_str(&format!(" -DPython3_EXECUTABLE={py} -DPython_EXECUTABLE={py}"));
    }
    configure.push_str(&expanded_args(recipe, vars)?);
    user_steps(recipe, vars, steps, step)?;
    steps.push(step("configure", configure, &vars.build));
    steps.push(step("build", format!("cmake --build {} --parallel {}", q(&vars.build), vars.jobs), &vars.build));
    steps.push(step(
        "install",
        format!("rm -rf {stage} && DESTDIR={stage} cmake --install {}", q(&vars.build), stage = q(&vars.stage)),
        &vars.build,
    ));
    Ok(())
}

/// A python-wheel recipe's: its venv, its own `steps` (in the source), then `pip wheel` of the
/// source into the stage.
fn python_wheel_steps(
    recipe: &Recipe,
    vars: &Vars,
    steps: &mut Vec<Step>,
    step: &dyn Fn(&str, String, &Path) -> Step,
) -> Result<(), ExpandError> {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let venv = venv_steps(recipe, vars, steps, step)?;
    user_steps(recipe, vars, steps, step)?;
    let wheels = vars.stage.join(WHEEL_DIR);
    let extra = expanded_args(recipe, vars)?;
    steps.push(step(
        "wheel",
        format!(
            "rm -rf {stage} && {} -m pip wheel --disable-pip-version-check --no-input --no-build-isolation --no-deps{extra} -w {} {}",
            q(&venv.join("bin/python")),
            q(&wheels),
            q(&vars.src),
            stage = q(&vars.stage)
        ),
        &vars.src,
    ));
    Ok(())
}

/// The recipe's `args`, expanded and quoted, each after a space.
fn expanded_args(recipe: &Recipe, vars: &Vars) -> Result<String, ExpandError> {
    let mut out = String::new();
    for a in &recipe.build.args {
        out.push(' ');
        out.push_str(&shell_quote(&vars.expand(&recipe.name, a)?));
    }
    Ok(out)
}

/// The recipe's own `steps` (`step1`, `step2`...), run in the source.
fn user_steps(
    recipe: &Recipe,
    vars: &Vars,
    steps: &mut Vec<Step>,
    step: &dyn Fn(&str, String, &Path) -> Step,
) -> Result<(), ExpandError> {
    for (i, s) in recipe.build.steps.iter().enumerate() {
        steps.push(step(&format!("step{}", i + 1), vars.expand(&recipe.name, s)?, &vars.src));
    }
    Ok(())
}

/// `clean-stage`: the stage emptied, by rocmforge itself (`fresh_dir`).
fn clean_stage_step(vars: &Vars, step: &dyn Fn(&str, String, &Path) -> Step) -> Step {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    Step {
        fresh_dir: Some(vars.stage.clone()),
        ..step("clean-stage", format!("rm -rf {} && mkdir -p {}", q(&vars.stage), q(&vars.stage)), &vars.build)
    }
}

/// Checks after install: each line a step, in the check's own directory under {build}. A
/// host-only recipe's checks compile for the requested targets.
fn check_steps(
    recipe: &Recipe,
    vars: &Vars,
    steps: &mut Vec<Step>,
    step: &dyn Fn(&str, String, &Path) -> Step,
) -> Result<(), ExpandError> {
    let vars = &Vars { targets: vars.targets.clone().or_else(|| vars.requested.clone()), ..vars.clone() };
    for c in &recipe.checks {
        let dir = vars.build.join("checks").join(&c.name);
        for (name, line) in super::proofs::check_step_names(c).iter().zip(&c.steps) {
            steps.push(step(name, vars.expand(&recipe.name, line)?, &dir));
        }
    }
    Ok(())
}

/// Does the recipe build in a venv of its own (`{build}/venv`, first on PATH, `{python}`)?
/// python-wheel recipes always; cmake and script recipes when they list `requirements` (a
/// CMake that runs a Python script needing a module, as roctracer's does).
pub fn uses_venv(recipe: &Recipe) -> bool {
    recipe.build.system == BuildSystem::PythonWheel
        || (matches!(recipe.build.system, BuildSystem::Cmake | BuildSystem::Script)
            && !recipe.build.requirements.is_empty())
}

/// The `venv` step (a fresh venv of the host Python) and, when there is anything to install,
/// the `requirements` step. Returns the venv's path.
fn venv_steps(
    recipe: &Recipe,
    vars: &Vars,
    steps: &mut Vec<Step>,
    step: &dyn Fn(&str, String, &Path) -> Step,
) -> Result<PathBuf, ExpandError> {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let host = vars.host_python.as_deref().ok_or_else(|| ExpandError::NoPython { recipe: recipe.name.clone() })?;
    let venv = vars.build.join("venv");
    steps.push(step("venv", format!("{} -m venv --clear {}", q(host), q(&venv)), &vars.build));
    if !recipe.build.requirements.is_empty() || !vars.install_wheels.is_empty() {
        // One pip run, so one resolver sees both: requirements from the index (and the
        // dependencies' wheels), `install-wheels` as the exact files the dependencies built.
        let mut command =
            format!("{} -m pip install --disable-pip-version-check --no-input -q", q(&venv.join("bin/python")));
        if let Some(dir) = &vars.find_links {
            command.push_str(&format!(" --find-links {}", q(dir)));
        }
        for r in &recipe.build.requirements {
            command.push(' ');
            command.push_str(&shell_quote(&vars.expand(&recipe.name, r)?));
        }
        for w in &vars.install_wheels {
            command.push(' ');
            command.push_str(&q(w));
        }
        steps.push(step("requirements", command, &vars.build));
    }
    Ok(venv)
}

/// Where wheels sit inside an artifact (relative to the prefix).
pub const WHEEL_DIR: &str = "share/rocmforge/wheels";

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars {
            prefix: "/opt/rf".into(),
            targets: Some(TargetSet::parse("gfx1010,gfx1012").unwrap()),
            jobs: 6,
            src: "/w/src".into(),
            build: "/w/build".into(),
            stage: "/w/stage".into(),
            tmp: "/w/tmp".into(),
            installed: "/w/stage/opt/rf".into(),
            requested: None,
            work_dir: "/w".into(),
            python: None,
            host_python: None,
            version: "1.0".into(),
            wheel_version: "1.0+x".into(),
            source_trees: BTreeMap::from([("hip".into(), "/w/hip/src".into())]),
            rocm_path: None,
            rocm: PathBuf::from("/p"),
            rocm_llvm: PathBuf::from("/p/llvm"),
            rocm_device_libs: PathBuf::from("/p/amdgcn/bitcode"),
            package_roots: Vec::new(),
            package_dirs: BTreeMap::new(),
            dep_roots: BTreeMap::from([
                ("half".into(), "/opt/rocm-5.4.3".into()),
                ("rocblas".into(), "/opt/rf".into()),
            ]),
            find_links: None,
            install_wheels: Vec::new(),
        }
    }

    fn python_wheel_recipe() -> Recipe {
        let files = BTreeMap::from([
            ("recipes/t/stack.toml".to_string(), b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n".to_vec()),
            ("recipes/t/torch.toml".to_string(), b"[package]\nname = \"torch\"\nversion = \"1\"\nsummary = \"t\"\n[build]\nsystem = \"script\"\nsteps = [\"true\"]\n".to_vec()),
            (
                "recipes/t/vision.toml".to_string(),
                b"[package]\nname = \"vision\"\nversion = \"1\"\nsummary = \"v\"\n[dependencies]\nbuild = [\"torch\"]\n[build]\nsystem = \"python-wheel\"\nrequirements = [\"numpy==2.2.1\"]\ninstall-wheels = [\"torch\"]\n".to_vec(),
            ),
        ]);
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        crate::recipe::load_stack(&tree, "t").unwrap_or_else(|d| panic!("{d}")).recipes["vision"].clone()
    }

    #[test]
    fn cmake_recipe_with_requirements_configures_inside_its_venv() {
        let files = BTreeMap::from([
            ("recipes/t/stack.toml".to_string(), b"[stack]\nname = \"t\"\nrocm-version = \"6.2.4\"\nsummary = \"t\"\ndefault-targets = [\"gfx1010\"]\n".to_vec()),
            (
                "recipes/t/tracer.toml".to_string(),
                b"[package]\nname = \"tracer\"\nversion = \"1\"\nsummary = \"t\"\n[build]\nsystem = \"cmake\"\nrequirements = [\"CppHeaderParser==2.7.4\"]\n".to_vec(),
            ),
            ("recipes/t/plain.toml".to_string(), b"[package]\nname = \"plain\"\nversion = \"1\"\nsummary = \"t\"\n[build]\nsystem = \"cmake\"\n".to_vec()),
            (
                "recipes/t/py.toml".to_string(),
                b"[package]\nname = \"py\"\nversion = \"1\"\nsummary = \"t\"\n[build]\nsystem = \"cmake\"\nargs = [\"-DPython3_EXECUTABLE={python}\"]\n".to_vec(),
            ),
        ]);
        let tree = crate::recipe::RecipeTree::from_files(crate::recipe::Origin::Embedded, files);
        let stack = crate::recipe::load_stack(&tree, "t").unwrap_or_else(|d| panic!("{d}"));
        let (tracer, plain) = (&stack.recipes["tracer"], &stack.recipes["plain"]);
        assert!(uses_venv(tracer) && !uses_venv(plain));
        assert!(tracer.uses_stack_python() && stack.recipes["py"].uses_stack_python());
        assert!(!plain.uses_stack_python(), "the host is not asked for the stack's Python for it");
        assert!(python_wheel_recipe().uses_stack_python());
        let mut v = vars();
        v.host_python = Some("/usr/bin/python3.11".into());
        v.python = Some("/w/build/venv/bin/python".into());
        let env = step_env(tracer, &v, &BTreeMap::new()).unwrap();
        assert!(env["PATH"].starts_with("/w/build/venv/bin:/opt/rf/bin:"), "{}", env["PATH"]);
        assert_eq!(env["VIRTUAL_ENV"], "/w/build/venv");
        assert_eq!(env["CFLAGS"], "-ffile-prefix-map=/w=/rocmforge-work");
        assert_eq!(env["HIPFLAGS"], "-ffile-prefix-map=/w=/rocmforge-work");
        let env = step_env(tracer, &v, &BTreeMap::from([("CXXFLAGS".into(), "-O1".into())])).unwrap();
        assert_eq!(env["CXXFLAGS"], "-O1 -ffile-prefix-map=/w=/rocmforge-work", "the user's flags stay");
        let s = steps(tracer, &v, &env).unwrap();
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["venv", "requirements", "configure", "build", "install"]);
        assert_eq!(
            s[1].command,
            "/w/build/venv/bin/python -m pip install --disable-pip-version-check --no-input -q CppHeaderParser==2.7.4"
        );
        // Without requirements: no venv, the host Python.
        let mut v = vars();
        v.host_python = Some("/usr/bin/python3.11".into());
        v.python = v.host_python.clone();
        let env = step_env(plain, &v, &BTreeMap::new()).unwrap();
        assert!(!env.contains_key("VIRTUAL_ENV"));
        assert_eq!(
            steps(plain, &v, &env).unwrap().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["configure", "build", "install"]
        );
    }

    #[test]
    fn device_libraries_of_an_installation_are_named_to_clang() {
        let r = python_wheel_recipe();
        let mut v = vars();
        v.rocm_device_libs = "/opt/rf/amdgcn/bitcode".into();
        v.rocm_llvm = "/opt/rf/llvm".into();
        assert!(
            !step_env(&r, &v, &BTreeMap::new()).unwrap().contains_key("HIP_DEVICE_LIB_PATH"),
            "built ones with the built compiler: ROCM_PATH finds them"
        );
        v.rocm_llvm = "/usr/lib/llvm-15".into();
        assert_eq!(
            step_env(&r, &v, &BTreeMap::new()).unwrap()["HIP_DEVICE_LIB_PATH"],
            "/opt/rf/amdgcn/bitcode",
            "built ones with a taken compiler"
        );
        assert_eq!(
            step_env(&r, &v, &BTreeMap::new()).unwrap()["DEVICE_LIB_PATH"],
            "/opt/rf/amdgcn/bitcode",
            "the perl hipcc's own variable"
        );
        v.rocm = "/usr".into();
        v.rocm_device_libs = "/usr/lib/llvm-21/lib/clang/21/amdgcn/bitcode".into();
        let env = step_env(&r, &v, &BTreeMap::new()).unwrap();
        assert_eq!(env["HIP_DEVICE_LIB_PATH"], "/usr/lib/llvm-21/lib/clang/21/amdgcn/bitcode");
    }

    #[test]
    fn requirements_and_dependency_wheels_in_one_pip_run() {
        let r = python_wheel_recipe();
        assert_eq!(r.build.install_wheels, vec!["torch".to_string()]);
        let mut v = vars();
        v.host_python = Some("/usr/bin/python3.11".into());
        v.find_links = Some("/w/build/dependency-wheels".into());
        v.install_wheels =
            vec!["/w/build/dependency-wheels/torch-2.6.0+rocm6.2.4.k1-cp311-cp311-linux_x86_64.whl".into()];
        let with = steps(&r, &v, &BTreeMap::new()).unwrap();
        let names: Vec<&str> = with.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["venv", "requirements", "wheel"]);
        assert_eq!(
            with[1].command,
            "/w/build/venv/bin/python -m pip install --disable-pip-version-check --no-input -q --find-links /w/build/dependency-wheels numpy==2.2.1 /w/build/dependency-wheels/torch-2.6.0+rocm6.2.4.k1-cp311-cp311-linux_x86_64.whl"
        );
        // No dependency wheels: the plain requirements run, as before.
        let mut v = vars();
        v.host_python = Some("/usr/bin/python3.11".into());
        let without = steps(&r, &v, &BTreeMap::new()).unwrap();
        assert_eq!(
            without[1].command,
            "/w/build/venv/bin/python -m pip install --disable-pip-version-check --no-input -q numpy==2.2.1"
        );
    }

    #[test]
    fn every_placeholder_the_loader_knows_expands() {
        let v = Vars { python: Some("/w/venv/bin/python".into()), ..vars() };
        for k in crate::recipe::placeholders::KNOWN {
            assert!(v.expand("r", &format!("{{{k}}}")).is_ok(), "{{{k}}} is known to the loader but does not expand");
        }
    }

    #[test]
    fn expands_placeholders_in_one_place() {
        let v = vars();
        assert_eq!(v.expand("r", "-DGPU_TARGETS={targets} -j{jobs}").unwrap(), "-DGPU_TARGETS=gfx1010;gfx1012 -j6");
        assert_eq!(
            v.expand("r", "{src:hip}/include {prefix} {{literal}}").unwrap(),
            "/w/hip/src/include /opt/rf {literal}"
        );
        assert_eq!(v.expand("r", "{targets_comma}").unwrap(), "gfx1010,gfx1012");
        let e = v.expand("clr", "{src:rocr}").unwrap_err().to_string();
        assert!(e.contains("`{src:rocr}` names a recipe that is not among its source dependencies"), "{e}");
        assert_eq!(
            v.expand("miopen", "-DHALF_INCLUDE_DIR={root:half}/include {root:rocblas}").unwrap(),
            "-DHALF_INCLUDE_DIR=/opt/rocm-5.4.3/include /opt/rf"
        );
        let e = v.expand("miopen", "{root:comgr}").unwrap_err().to_string();
        assert!(e.contains("`{root:comgr}` names a recipe that is not among its build dependencies"), "{e}");
        let e = v.expand("clr", "x {bogus} y").unwrap_err().to_string();
        assert!(e.starts_with("clr: unknown placeholder `{bogus}` in `x {bogus} y`"), "{e}");
    }
}
