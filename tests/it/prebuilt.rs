//! The `prebuilt-wheel` build system with real parts: a wheel built here by pip (setuptools from
//! the test wheelhouse), served by the HTTP test server on 127.0.0.1 under a URL that spells the
//! local label's `+` as `%2B` (as download.pytorch.org does), a `--recipes` tree pinning it by
//! sha256, `rocmforge build`, then pip and uv installing it from the local index into fresh
//! venvs. Nothing reaches beyond 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::support::http::HttpServer;
use crate::support::wheel::sha256_hex;
use crate::support::{rocmforge, text, tree_bytes, wheelhouse};

const VERSION: &str = "1.0.0+rocm6.2";
const VALUE: &str = "prebuilt and untouched";

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{what} failed: {cmd:?}\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rfprebuilt-1.0.0+rocm6.2-py3-none-any.whl`, built once per test run with pip and the
/// setuptools of the wheelhouse (PEP 517, build isolation, no index), reproducibly.
fn wheel() -> &'static (String, Vec<u8>) {
    static WHEEL: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    WHEEL.get_or_init(|| {
        pip_wheel("rfprebuilt", VERSION, &[("__init__.py", format!("VALUE = {VALUE:?}\n").into_bytes())])
    })
}

/// `rfexec-2.0.0+rocm5.2-py3-none-any.whl`: a package holding `libanswer.so`, linked with
/// `-z execstack` as PyTorch 1.13.1+rocm5.2's `libamdhip64.so` is, which glibc 2.41+ refuses to
/// load, and loading it with ctypes on import.
fn execstack_wheel() -> &'static (String, Vec<u8>) {
    static WHEEL: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    WHEEL.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("execstack-lib");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("answer.c"), "int answer(void) { return 42; }\n").unwrap();
        run_ok(
            Command::new("gcc")
                .args(["-shared", "-fPIC", "-O1", "-Wl,-z,execstack", "-o"])
                .arg(dir.join("libanswer.so"))
                .arg(dir.join("answer.c")),
            "gcc -z execstack",
        );
        let init = "import ctypes, os\nANSWER = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libanswer.so')).answer()\n";
        pip_wheel(
            "rfexec",
            "2.0.0+rocm5.2",
            &[("__init__.py", init.as_bytes().to_vec()), ("libanswer.so", std::fs::read(dir.join("libanswer.so")).unwrap())],
        )
    })
}

/// `<project>-<version>-py3-none-any.whl` of a package `<project>` holding `files`, built with
/// pip wheel from the wheelhouse.
fn pip_wheel(project: &str, version: &str, files: &[(&str, Vec<u8>)]) -> (String, Vec<u8>) {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prebuilt-wheel-{project}"));
    let _ = std::fs::remove_dir_all(&root);
    let src = root.join("src");
    std::fs::create_dir_all(src.join(project)).unwrap();
    std::fs::write(
        src.join("pyproject.toml"),
        format!(
            "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
             [project]\nname = \"{project}\"\nversion = \"{version}\"\nrequires-python = \">=3.8\"\n\n\
             [tool.setuptools]\npackages = [\"{project}\"]\n\n[tool.setuptools.package-data]\n{project} = [\"*.so\"]\n"
        ),
    )
    .unwrap();
    for (name, bytes) in files {
        std::fs::write(src.join(project).join(name), bytes).unwrap();
    }
    let out = root.join("out");
    run_ok(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "wheel",
                "--isolated",
                "--no-index",
                "--no-deps",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "-q",
            ])
            .arg("--find-links")
            .arg(wheelhouse())
            .arg("-w")
            .arg(&out)
            .arg(&src)
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("SOURCE_DATE_EPOCH", "315532800"),
        "building the test wheel with pip wheel",
    );
    let found: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let name = found[0].file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(name, format!("{project}-{version}-py3-none-any.whl"));
    (name, std::fs::read(&found[0]).unwrap())
}

/// A home, a one-recipe `--recipes` tree and the HTTP server serving the wheel.
struct Env {
    home: tempfile::TempDir,
    tree: PathBuf,
    http: HttpServer,
    /// The URL the recipe names: `…/whl/rfprebuilt-1.0.0%2Brocm6.2-py3-none-any.whl`.
    url: String,
    /// The wheel's project, the recipe's name.
    project: String,
}

impl Env {
    /// Serves the wheel and writes a recipe pinning it with `sha256`.
    fn new(sha256: &str) -> Env {
        Env::serving(wheel(), sha256)
    }

    /// Serves `wheel` and writes a recipe of its project pinning it with `sha256`.
    fn serving(wheel: &(String, Vec<u8>), sha256: &str) -> Env {
        let (name, bytes) = wheel;
        let home = tempfile::tempdir().unwrap();
        let http = HttpServer::start();
        let served = format!("whl/{}", name.replace('+', "%2B"));
        http.add(&served, bytes.clone());
        let url = http.url(&served);
        let tree = home.path().join("tree");
        let stack = tree.join("recipes/prebuilt");
        std::fs::create_dir_all(&stack).unwrap();
        std::fs::write(
            stack.join("stack.toml"),
            "[stack]\nname = \"prebuilt\"\nrocm-version = \"6.2.4\"\nsummary = \"one prebuilt wheel\"\ndefault-targets = [\"gfx1010\"]\ndefault = true\n",
        )
        .unwrap();
        let project = name.split('-').next().unwrap().to_string();
        let e = Env { home, tree, http, url, project };
        e.write_recipe(sha256);
        e
    }

    fn write_recipe(&self, sha256: &str) {
        std::fs::write(
            self.tree.join(format!("recipes/prebuilt/{}.toml", self.project)),
            format!(
                "[package]\nname = \"{}\"\nversion = \"1.0.0\"\nsummary = \"a wheel someone else built\"\n\n\
                 [source]\nurl = \"{}\"\nsha256 = \"{sha256}\"\n\n\
                 [build]\nsystem = \"prebuilt-wheel\"\n\n\
                 [targets]\ngpu = false\n",
                self.project, self.url
            ),
        )
        .unwrap();
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    fn prefix(&self) -> PathBuf {
        self.home().join("prefix")
    }

    fn index(&self) -> PathBuf {
        self.home().join("state/rocmforge/index")
    }

    fn downloads(&self) -> PathBuf {
        self.home().join("cache/rocmforge/downloads")
    }

    fn cmd(&self) -> assert_cmd::Command {
        let mut c = rocmforge(self.home());
        c.env("ROCMFORGE_RETRIES", "1")
            .env("ROCMFORGE_RETRY_BASE_MS", "10")
            .env("ROCMFORGE_HTTP_TIMEOUT_SECS", "5")
            .timeout(std::time::Duration::from_secs(60))
            .arg("--recipes")
            .arg(&self.tree);
        c
    }

    fn build(&self) -> Output {
        self.cmd().args(["build", &self.project, "--prefix"]).arg(self.prefix()).output().unwrap()
    }

    /// `rocmforge <args>`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "rocmforge {}: {}", args.join(" "), text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A fresh venv `name` with `spec` installed by pip from the index at `url`; its Python.
    fn pip_install(&self, name: &str, url: &str, spec: &str) -> PathBuf {
        let venv = self.home().join(name);
        run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv");
        run_ok(
            Command::new(venv.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--isolated",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .args(["--timeout", "5", "--retries", "0", "--index-url", url, spec])
                .env("PIP_CONFIG_FILE", "/dev/null"),
            &format!("pip install {spec} from the local index"),
        );
        venv.join("bin/python")
    }

    /// The same with uv.
    fn uv_install(&self, name: &str, url: &str, spec: &str) -> PathBuf {
        let uv = |args: &[&str]| {
            let mut c = Command::new("uv");
            c.env("UV_CACHE_DIR", self.home().join("uv-cache"))
                .env("UV_PYTHON_DOWNLOADS", "never")
                .env("UV_HTTP_TIMEOUT", "5")
                .env("UV_NO_CONFIG", "1")
                .args(args);
            for var in
                ["UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS", "VIRTUAL_ENV"]
            {
                c.env_remove(var);
            }
            c
        };
        let venv = self.home().join(name);
        run_ok(uv(&["venv", "-q", "--python", "python3"]).arg(&venv), "uv venv");
        run_ok(
            uv(&["pip", "install", "--python"]).arg(venv.join("bin/python")).args(["--index-url", url, spec]),
            &format!("uv pip install {spec}"),
        );
        venv.join("bin/python")
    }

    fn wheel_requests(&self) -> usize {
        self.http.with(|s| s.requests.iter().filter(|(p, _)| p.starts_with("/whl/")).count())
    }
}

fn names(v: &[(String, Vec<u8>)]) -> Vec<&str> {
    v.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn prebuilt_wheel_is_verified_deployed_published_and_installable() {
    let (name, bytes) = wheel();
    let e = Env::new(&sha256_hex(bytes));

    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("built 1 recipe(s): rfprebuilt"), "{}", text(&out));
    assert_eq!(e.wheel_requests(), 1, "the wheel is downloaded once");

    // In the prefix under its real file name (`+`, not `%2B`), with the served bytes.
    let deployed = tree_bytes(&e.prefix().join("share/rocmforge/wheels"));
    assert_eq!(names(&deployed), [name.as_str()]);
    assert!(deployed[0].1 == *bytes, "the deployed wheel differs from the served one");

    // Published as is: the same bytes, its own version (no local label added), in the pages.
    let project = e.index().join("simple/rfprebuilt");
    assert!(std::fs::read(project.join(name)).unwrap() == *bytes, "the published wheel differs from the served one");
    let page = std::fs::read_to_string(project.join("index.html")).unwrap();
    assert!(page.contains(&format!("#sha256={}", sha256_hex(bytes))), "{page}");
    let list = e.ok(&["index", "list"]);
    let line = list.lines().find(|l| l.contains(name.as_str())).unwrap_or_else(|| panic!("{name} not listed:\n{list}"));
    assert_eq!(line.split_whitespace().next(), Some(VERSION), "{list}");
    assert!(line.contains(&sha256_hex(bytes)[..12]), "{list}");
    let url = e.ok(&["index", "url"]).trim().to_string();
    assert_eq!(url, format!("file://{}/simple/", e.index().display()));

    // pip and uv install it from the index into fresh venvs, and it imports.
    let check = |python: &Path| {
        let got = run_ok(
            Command::new(python).args([
                "-c",
                "import importlib.metadata as m, rfprebuilt; print(m.version('rfprebuilt'), rfprebuilt.VALUE)",
            ]),
            "importing rfprebuilt",
        );
        assert_eq!(got.trim(), format!("{VERSION} {VALUE}"));
    };
    check(&e.pip_install("pip-venv", &url, "rfprebuilt==1.0.0"));
    check(&e.uv_install("uv-venv", &url, "rfprebuilt==1.0.0"));

    // Again: a cache hit, no download, prefix and index unchanged.
    let (prefix_before, index_before) = (tree_bytes(&e.prefix()), tree_bytes(&e.index()));
    let again = e.build();
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).starts_with("nothing to build: 1 recipe(s) up to date in the cache"),
        "{}",
        text(&again)
    );
    assert_eq!(e.wheel_requests(), 1, "a cache hit downloaded the wheel again");
    assert!(tree_bytes(&e.prefix()) == prefix_before, "a cache hit changed the prefix");
    let index_after = tree_bytes(&e.index());
    assert!(
        index_after == index_before,
        "a cache hit changed the index: {:?} -> {:?}",
        names(&index_before),
        names(&index_after)
    );
}

/// The stack one ELF file asks for, as `readelf -lW` shows its GNU_STACK flags (`RW ` / `RWE`).
fn gnu_stack(lib: &Path) -> String {
    let out = run_ok(Command::new("readelf").arg("-lW").arg(lib), "readelf -lW");
    let line = out.lines().find(|l| l.trim_start().starts_with("GNU_STACK")).unwrap_or_else(|| panic!("{out}"));
    line.split_whitespace().nth(6).unwrap().to_string()
}

#[test]
fn a_prebuilt_wheel_asking_for_an_executable_stack_is_published_with_it_cleared() {
    let (name, bytes) = execstack_wheel();
    let e = Env::serving(execstack_wheel(), &sha256_hex(bytes));
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    let fixed = "rfexec-2.0.0+rocm5.2.noexecstack-py3-none-any.whl";
    assert!(
        all.contains(&format!("{name} asks for an executable stack in 1 library (rfexec/libanswer.so)"))
            && all.contains(&format!("published as {fixed} with the request cleared")),
        "{all}"
    );

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "note: {fixed} is a prebuilt wheel republished with its executable-stack request cleared"
        )),
        "{all}"
    );
    let plan = e.ok(&["plan", "rfexec"]);
    assert!(
        plan.contains("after install: executable stacks (a library asking for one is cleared in the published copy"),
        "{plan}"
    );

    // Deployed and published: only the rewritten copy.
    let deployed = tree_bytes(&e.prefix().join("share/rocmforge/wheels"));
    assert_eq!(names(&deployed), [fixed]);
    let project = e.index().join("simple/rfexec");
    assert!(project.join(fixed).is_file() && !project.join(name).exists());
    // The pin is still the download's.
    let plan: serde_json::Value = serde_json::from_str(&e.ok(&["plan", "rfexec", "--json"])).unwrap();
    let entry = plan["recipes"].as_array().unwrap().iter().find(|r| r["name"] == "rfexec").unwrap().clone();
    let pin = entry["pin"].to_string();
    assert!(pin.contains(&sha256_hex(bytes)), "{pin}");
    // What rocmforge does to the download is in the key, as a tool of its own.
    let toolchain = entry["inputs"]["toolchain"].as_str().unwrap_or_default().to_string();
    assert!(toolchain.ends_with("\nrocmforge prebuilt-wheel: noexecstack 1, gpu-targets record 1"), "{entry}");

    // `wheel unpack` checks every RECORD hash: it accepts the copy; the library in it asks for
    // a non-executable stack, the original's did not; METADATA and .dist-info follow the label.
    let tools_venv = e.home().join("tools-venv");
    run_ok(Command::new("python3").args(["-m", "venv"]).arg(&tools_venv), "python3 -m venv");
    let tools = tools_venv.join("bin/python");
    run_ok(
        Command::new(&tools)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--isolated",
                "--no-index",
                "--disable-pip-version-check",
                "--find-links",
            ])
            .arg(wheelhouse())
            .arg("wheel")
            .env("PIP_CONFIG_FILE", "/dev/null"),
        "pip install wheel from the wheelhouse",
    );
    let unpacked = e.home().join("unpacked");
    run_ok(
        Command::new(&tools).args(["-m", "wheel", "unpack", "-d"]).arg(&unpacked).arg(project.join(fixed)),
        "python -m wheel unpack",
    );
    let root = unpacked.join("rfexec-2.0.0+rocm5.2.noexecstack");
    assert_eq!(gnu_stack(&root.join("rfexec/libanswer.so")), "RW");
    let meta = std::fs::read_to_string(root.join("rfexec-2.0.0+rocm5.2.noexecstack.dist-info/METADATA")).unwrap();
    assert!(meta.contains("\nVersion: 2.0.0+rocm5.2.noexecstack\n"), "{meta}");
    let original = e.home().join("original");
    std::fs::create_dir_all(&original).unwrap();
    std::fs::write(original.join(name), bytes).unwrap();
    run_ok(
        Command::new(&tools).args(["-m", "wheel", "unpack", "-d"]).arg(&original).arg(original.join(name)),
        "unpack",
    );
    assert_eq!(gnu_stack(&original.join("rfexec-2.0.0+rocm5.2/rfexec/libanswer.so")), "RWE");

    // pip and uv install it; the library loads.
    let url = e.ok(&["index", "url"]).trim().to_string();
    for python in [e.pip_install("pip-venv", &url, "rfexec"), e.uv_install("uv-venv", &url, "rfexec")] {
        let got = run_ok(
            Command::new(&python)
                .args(["-c", "import importlib.metadata as m, rfexec; print(m.version('rfexec'), rfexec.ANSWER)"]),
            "importing rfexec",
        );
        assert_eq!(got.trim(), "2.0.0+rocm5.2.noexecstack 42");
    }
}

#[test]
fn prebuilt_wheel_with_a_wrong_sha256_fails_clearly_and_leaves_nothing_behind() {
    let (name, bytes) = wheel();
    let wrong = sha256_hex(b"not the wheel");
    let actual = sha256_hex(bytes);
    let e = Env::new(&wrong);

    let out = e.build();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for part in [
        "1 of the 1 source(s) this build would prepare cannot be used; nothing was built".to_string(),
        format!(
            "  - rfprebuilt: sha256 mismatch for `{}`: expected {wrong}, got {actual} ({} bytes)",
            e.url,
            bytes.len()
        ),
        "nothing was cached".to_string(),
    ] {
        assert!(err.contains(&part), "missing {part:?} in:\n{}", text(&out));
    }
    // Nothing deployed, nothing published, nothing stored, nothing kept in the download cache.
    assert!(tree_bytes(&e.prefix()).iter().all(|(p, _)| !p.ends_with(".whl")), "{:?}", names(&tree_bytes(&e.prefix())));
    assert!(!e.index().join("simple/rfprebuilt").exists());
    let list = e.ok(&["index", "list"]);
    assert!(!list.contains("rfprebuilt"), "{list}");
    assert!(e.ok(&["cache", "list"]).starts_with("0 artifact(s), 0 incomplete"));
    let cached = tree_bytes(&e.downloads());
    assert!(
        cached.iter().all(|(p, _)| p == "CACHEDIR.TAG" || p.ends_with(".lock")),
        "left in the download cache: {:?}",
        names(&cached)
    );

    // With the right digest the same tree builds and publishes.
    e.write_recipe(&actual);
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read(e.prefix().join("share/rocmforge/wheels").join(name)).unwrap() == *bytes);
    assert!(std::fs::read(e.index().join("simple/rfprebuilt").join(name)).unwrap() == *bytes);
}

#[test]
fn prebuilt_wheel_recipes_must_name_a_wheel() {
    let home = tempfile::tempdir().unwrap();
    let tree = home.path().join("tree");
    let stack = tree.join("recipes/prebuilt");
    std::fs::create_dir_all(&stack).unwrap();
    std::fs::create_dir_all(tree.join("patches/prebuilt/patched")).unwrap();
    std::fs::write(tree.join("patches/prebuilt/patched/0001-x.patch"), "").unwrap();
    std::fs::write(
        stack.join("stack.toml"),
        "[stack]\nname = \"prebuilt\"\nrocm-version = \"6.2.4\"\nsummary = \"s\"\ndefault-targets = [\"gfx1010\"]\n",
    )
    .unwrap();
    let sha = "0".repeat(64);
    let recipe = |name: &str, source: &str, extra: &str| {
        let text = format!("[package]\nname = \"{name}\"\nversion = \"1.0\"\nsummary = \"s\"\n\n{source}\n{extra}[build]\nsystem = \"prebuilt-wheel\"\n");
        std::fs::write(stack.join(format!("{name}.toml")), text).unwrap();
    };
    recipe(
        "query",
        &format!(
            "[source]\nurl = \"https://example.invalid/download?file=x-1.0-py3-none-any.whl\"\nsha256 = \"{sha}\""
        ),
        "",
    );
    recipe("plain", &format!("[source]\nurl = \"https://example.invalid/x.whl\"\nsha256 = \"{sha}\""), "");
    recipe(
        "pathy",
        &format!("[source]\nurl = \"https://example.invalid/whl/..%2Fpathy-1.0-py3-none-any.whl\"\nsha256 = \"{sha}\""),
        "",
    );
    recipe("from-git", &format!("[source]\ngit = \"https://example.invalid/x.git\"\nrev = \"{}\"", "a".repeat(40)), "");
    recipe("nothing", "", "");
    recipe(
        "patched",
        &format!("[source]\nurl = \"https://example.invalid/p-1.0%2Bx-py3-none-any.whl\"\nsha256 = \"{sha}\""),
        "[patches]\nseries = [\"0001-x.patch\"]\n\n",
    );
    // Named by project and version in an index: all three are needed, and not beside a `url`.
    recipe("half-named", "[source]\nindex = \"https://example.invalid/whl/\"\nproject = \"torch\"", "");
    recipe(
        "both-named",
        &format!("[source]\nurl = \"https://example.invalid/whl/b-1.0-py3-none-any.whl\"\nsha256 = \"{sha}\"\nproject = \"b\""),
        "",
    );
    recipe(
        "bad-named",
        "[source]\nindex = \"https://example.invalid/whl/\"\nproject = \"torch\"\nversion = \"latest\"",
        "",
    );
    recipe(
        "well-named",
        "[source]\nindex = \"https://example.invalid/whl/\"\nproject = \"torch\"\nversion = \"==2.9.*\"",
        "",
    );
    // Valid: a `%2B`-encoded local label.
    recipe("good", &format!("[source]\nurl = \"https://example.invalid/whl/good-1.0%2Brocm6.2-cp311-cp311-linux_x86_64.whl\"\nsha256 = \"{sha}\""), "");

    let out = rocmforge(home.path()).arg("--recipes").arg(&tree).args(["recipes", "check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for part in [
        "query.toml:7:7",
        "a prebuilt-wheel source must be a wheel: `download` is not a wheel filename: it does not end in `.whl`",
        "pathy.toml:7:7",
        "a prebuilt-wheel source must be a wheel: the URL's last segment `..%2Fpathy-1.0-py3-none-any.whl` decodes to `../pathy-1.0-py3-none-any.whl`, a path, not a file name",
        "plain.toml:7:7",
        "a prebuilt-wheel source must be a wheel: `x.whl` is not a wheel filename: it needs 5 or 6",
        "from-git.toml:",
        "a prebuilt-wheel recipe takes its wheel from a `url` source",
        "nothing.toml",
        "a prebuilt-wheel recipe needs a [source] with the wheel's `url` and `sha256`",
        "patched.toml:",
        "a prebuilt-wheel recipe cannot have patches",
        "half-named.toml:6:1",
        "a wheel named by project and version needs all of `index`, `project` and `version`",
        "both-named.toml:7:7",
        "`project` names a wheel in `index` instead of a `url`: keep one of them",
        "bad-named.toml:9:11",
        "`version` `latest` is not a PEP 440 version",
    ] {
        assert!(err.contains(part), "missing {part:?} in:\n{err}");
    }
    assert!(!err.contains("good.toml") && !err.contains("well-named.toml"), "{err}");
    assert!(!err.contains("pathy.toml:7:7: a prebuilt-wheel source must be a wheel: `download`"), "{err}");
}

/// The same wheel file name with other bytes (one file more in the zip).
fn other_bytes_same_name(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut src = zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for i in 0..src.len() {
        out.raw_copy_file(src.by_index_raw(i).unwrap()).unwrap();
    }
    out.start_file("rfprebuilt/other.txt", zip::write::SimpleFileOptions::default()).unwrap();
    out.write_all(b"another build\n").unwrap();
    out.finish().unwrap().into_inner()
}

#[test]
fn a_wheel_the_index_refuses_is_not_stored_deployed_or_published() {
    let (name, bytes) = wheel();
    let e = Env::new(&sha256_hex(bytes));
    // The index already holds another build under the same file name.
    let other = e.home().join("other").join(name);
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(&other, other_bytes_same_name(bytes)).unwrap();
    e.ok(&["index", "publish", other.to_str().unwrap()]);

    let out = e.build();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rfprebuilt: cannot publish its wheels to the local index"), "{}", text(&out));
    assert!(err.contains(name.as_str()), "the refused file is named: {}", text(&out));
    // Refused before the store: nothing cached (a later build would fail again at publish),
    // nothing deployed, and the index keeps the build it had.
    assert!(e.ok(&["cache", "list"]).starts_with("0 artifact(s), 0 incomplete"), "{}", e.ok(&["cache", "list"]));
    assert!(!e.prefix().join("share/rocmforge/wheels").join(name).exists());
    let published = std::fs::read(e.index().join("simple/rfprebuilt").join(name)).unwrap();
    assert_eq!(published, std::fs::read(&other).unwrap());
}

#[test]
fn cache_verify_re_hashes_the_wheels_of_a_stack_with_its_own_index() {
    let (name, bytes) = wheel();
    let sha = sha256_hex(bytes);
    let e = Env::new(&sha);
    // As the prebuilt fallback stacks do: an index of its own, `<index-dir>/prebuilt-binary/`.
    let stack = e.tree.join("recipes/prebuilt/stack.toml");
    let text_of = std::fs::read_to_string(&stack).unwrap();
    std::fs::write(&stack, format!("{text_of}index-path = \"prebuilt-binary\"\n")).unwrap();
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    let published = e.index().join("prebuilt-binary/simple/rfprebuilt").join(name);
    assert!(published.is_file());
    let verify = || e.cmd().args(["cache", "verify"]).output().unwrap();
    let v = verify();
    assert!(v.status.success(), "{}", text(&v));
    assert!(String::from_utf8_lossy(&v.stdout).contains("1 published file(s) verified"), "{}", text(&v));
    crate::sources::write_in_place(&published, 100, b"altered in place");
    let bad = sha256_hex(&std::fs::read(&published).unwrap());
    let v = verify();
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(
        text(&v).contains(&format!(
            "error: published file `{}` altered on disk: published with sha256 {sha}, now {bad}",
            published.display()
        )),
        "{}",
        text(&v)
    );
}

#[test]
fn an_altered_download_artifact_or_published_wheel_is_caught_and_never_reaches_the_prefix_or_the_index() {
    let (name, bytes) = wheel();
    let sha = sha256_hex(bytes);
    let e = Env::new(&sha);
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    let deployed = e.prefix().join("share/rocmforge/wheels").join(name);
    let published = e.index().join("simple/rfprebuilt").join(name);
    let download = e.downloads().join(&sha);
    let intact = |what: &str| {
        assert!(std::fs::read(&deployed).unwrap() == *bytes, "{what}: altered bytes reached the prefix");
        assert!(std::fs::read(&published).unwrap() == *bytes, "{what}: altered bytes reached the index");
    };
    let verify = || e.cmd().args(["cache", "verify"]).output().unwrap();
    let v = verify();
    assert!(v.status.success(), "{}", text(&v));
    assert!(
        String::from_utf8_lossy(&v.stdout).contains("ok: 1 artifact(s), 1 download(s), 1 published file(s) verified"),
        "{}",
        text(&v)
    );
    let altered = |path: &Path| {
        crate::sources::write_in_place(path, 100, b"altered in place");
        sha256_hex(&std::fs::read(path).unwrap())
    };

    // 1. The published wheel in the index: verify names it; the next build (a no-op otherwise)
    //    puts the published bytes back and says why.
    let bad = altered(&published);
    let v = verify();
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains(&format!("altered on disk: published with sha256 {sha}, now {bad}")), "{}", text(&v));
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "published wheel `{}` was altered on disk in the index (sha256 {bad}, published as {sha}): replaced",
            published.display()
        )),
        "{}",
        text(&out)
    );
    intact("published wheel");

    // 2. The cached download: verify names it; a rebuild that reads it (the work dir cleaned:
    //    a prepared tree is not read from the download again) re-hashes it, fetches it again and
    //    builds from the good bytes.
    let bad = altered(&download);
    e.ok(&["clean"]);
    let v = verify();
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains(&format!("its content has {bad}")), "{}", text(&v));
    let out =
        e.cmd().args(["build", "rfprebuilt", "--rebuild", "rfprebuilt", "--prefix"]).arg(e.prefix()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("was altered on disk (expected sha256 {sha}, found {bad}")), "{}", text(&out));
    assert_eq!(e.wheel_requests(), 2, "the altered download was fetched again");
    intact("download");

    // 3. The artifact, through the hard-linked prefix: verify names it; the build rebuilds it
    //    from the (intact) download and deploys it again; the index is untouched.
    altered(&deployed);
    let v = verify();
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains(&format!("`share/rocmforge/wheels/{name}` is missing or changed")), "{}", text(&v));
    let out = e.build();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "was altered on disk: `share/rocmforge/wheels/{name}` (modified in place after it was stored)"
        )),
        "{}",
        text(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("built 1 recipe(s): rfprebuilt"), "{}", text(&out));
    assert_eq!(e.wheel_requests(), 2, "the intact download was reused");
    intact("artifact");
    let v = verify();
    assert!(v.status.success(), "{}", text(&v));
}

#[test]
fn an_unusable_index_dir_is_named_with_its_setting_before_anything_is_fetched() {
    let (_, bytes) = wheel();
    let e = Env::new(&sha256_hex(bytes));
    let file = e.home().join("index-file");
    std::fs::write(&file, "not a directory").unwrap();
    let out = e
        .cmd()
        .env("ROCMFORGE_INDEX_DIR", &file)
        .args(["build", &e.project, "--prefix"])
        .arg(e.prefix())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        err.contains(&format!(
            "the index dir `{}` is unusable: it is a file, not a directory. Set `index-dir` in the config file",
            file.display()
        )) && err.contains("(or ROCMFORGE_INDEX_DIR)"),
        "{err}"
    );
    // Up front: nothing was downloaded, built or stored before the refusal.
    assert_eq!(e.wheel_requests(), 0);
    assert!(!e.downloads().exists());
    assert!(!e.prefix().exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");
}
