//! User configuration: where the cache, work and state dirs live (XDG defaults, each overridable
//! by config file, environment and flag) and URL rewrites (git's `insteadOf`, for mirrors).
//!
//! The file is `$ROCMFORGE_CONFIG`, else `$XDG_CONFIG_HOME/rocmforge/config.toml`:
//!
//! ```toml
//! cache-dir = "/big/disk/rocmforge/cache"
//! work-dir = "/big/disk/rocmforge/work"
//! state-dir = "/home/me/.local/state/rocmforge"
//! prefix = "/opt/rocmforge"
//! rocm-path = "/opt/rocm"
//! index-dir = "/srv/wheels"          # the local wheel index; default <state-dir>/index
//! link-mode = "auto"                 # how cached files reach the prefix: "auto" or "copy"
//! compiler-cache = "auto"            # ccache | sccache | none | auto (the first installed)
//! download-retries = 5               # a download's or git fetch's attempts in a row without progress
//! download-timeout-secs = 60         # the longest wait for data before an attempt is given up (git too)
//!
//! [url-rewrite]
//! "https://github.com/" = "file:///srv/git/"
//!
//! [compiler-cache-env]               # the compiler cache's own settings, passed to every step
//! CCACHE_REMOTE_STORAGE = "http://cache.lan/ccache/"
//!
//! [distributed]
//! distcc-hosts = ["buildbox/16", "127.0.0.1:3632/4"]   # DISTCC_HOSTS overrides
//! ```
//!
//! A team's shared artifact cache (`cache::remote`; README "A team's shared cache"):
//!
//! ```toml
//! cache-url = "https://cache.lab.example/rocmforge/"   # ROCMFORGE_CACHE_URL, --cache-url
//! cache-read-only = false                  # only take, never upload (--cache-read-only)
//! cache-token = "..."                      # bearer token (ROCMFORGE_CACHE_TOKEN); or basic auth:
//! cache-user = "lab"                       # ROCMFORGE_CACHE_USER
//! cache-password = "..."                   # ROCMFORGE_CACHE_PASSWORD
//! signing-key = "/home/me/.local/state/rocmforge/cache-signing.key"   # `rocmforge cache keygen`
//! trusted-keys = ["buildbox-1:BASE64..."]   # accept remote artifacts signed by these only
//! ```
//!
//! `ROCMFORGE_CACHE_CONNECT_TIMEOUT_SECS` (default 3) and `ROCMFORGE_CACHE_BLOB_TIMEOUT_SECS`
//! (default 3600) bound the remote cache's requests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawConfig {
    cache_dir: Option<Spanned<PathBuf>>,
    work_dir: Option<Spanned<PathBuf>>,
    state_dir: Option<Spanned<PathBuf>>,
    prefix: Option<Spanned<PathBuf>>,
    rocm_path: Option<Spanned<PathBuf>>,
    index_dir: Option<Spanned<PathBuf>>,
    link_mode: Option<LinkMode>,
    #[serde(default)]
    url_rewrite: BTreeMap<String, String>,
    cache_url: Option<String>,
    cache_read_only: Option<bool>,
    cache_token: Option<String>,
    cache_user: Option<String>,
    cache_password: Option<String>,
    signing_key: Option<Spanned<PathBuf>>,
    #[serde(default)]
    trusted_keys: Vec<String>,
    compiler_cache: Option<CompilerCacheChoice>,
    download_retries: Option<Spanned<u32>>,
    download_timeout_secs: Option<Spanned<u64>>,
    #[serde(default)]
    compiler_cache_env: BTreeMap<String, String>,
    #[serde(default)]
    distributed: Distributed,
}

/// Which compiler cache builds put in front of their compilers (`compiler-cache`,
/// `ROCMFORGE_COMPILER_CACHE`, `build --compiler-cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompilerCacheChoice {
    /// ccache if it is installed, else sccache if it is, else none.
    #[default]
    Auto,
    Ccache,
    Sccache,
    None,
}

impl CompilerCacheChoice {
    pub fn parse(s: &str) -> Option<CompilerCacheChoice> {
        Some(match s {
            "auto" => CompilerCacheChoice::Auto,
            "ccache" => CompilerCacheChoice::Ccache,
            "sccache" => CompilerCacheChoice::Sccache,
            "none" => CompilerCacheChoice::None,
            _ => return None,
        })
    }
}

/// `[distributed]`: compiling on other machines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Distributed {
    /// distcc host specs (`host`, `host/N`, `host:port/N`, `@host/N`), as `DISTCC_HOSTS` lists
    /// them; `DISTCC_HOSTS` in the environment overrides.
    #[serde(default)]
    pub distcc_hosts: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the config file `{0}` named by ROCMFORGE_CONFIG does not exist: create it, or unset ROCMFORGE_CONFIG to use the default ($XDG_CONFIG_HOME/rocmforge/config.toml)")]
    Missing(PathBuf),
    #[error("{0}")]
    Invalid(crate::diagnostic::Diagnostic),
    #[error("{name}=`{value}` is not valid: use {expected}")]
    BadEnv { name: &'static str, value: String, expected: &'static str },
    #[error(
        "{name}=`{value}` is not valid: use a whole number of {unit}, at least {min} (or unset it for the default)"
    )]
    BadEnvNumber { name: &'static str, value: String, unit: &'static str, min: u64 },
    #[error("the {what} `{path}` is unusable: {why}. Set `{setting}` in the config file `{file}` (or {env}) to a directory you can write, then run the command again")]
    Unusable { what: &'static str, path: PathBuf, why: String, setting: &'static str, env: &'static str, file: PathBuf },
}

/// How files of cached artifacts are laid into the prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkMode {
    /// A copy-on-write clone where the filesystem can (btrfs, XFS), else a hard link to the
    /// cache's file when both are on one filesystem, else a copy. Restoring a multi-GB artifact
    /// then takes moments; prefix files must not be edited in place (they are the cache's).
    #[default]
    Auto,
    /// Always independent copies.
    Copy,
}

/// The resolved configuration every command works with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Content-addressed artifacts, git mirrors, downloads.
    pub cache_dir: PathBuf,
    /// Per-recipe source and build trees (large: a real stack needs ~100 GB).
    pub work_dir: PathBuf,
    /// Build state, locks of the embedded recipes, the running build's status.
    pub state_dir: PathBuf,
    /// Where the stack is deployed; `None`: `<state>/prefix/<stack>`.
    pub prefix: Option<PathBuf>,
    /// An installed ROCm whose components are used instead of building them (`--rocm-path`
    /// overrides it; what to take from it is the run's request, `installation::Choices`).
    pub rocm_path: Option<PathBuf>,
    /// The local wheel index; `None`: `<state>/index`.
    pub index_dir: Option<PathBuf>,
    /// How cached files reach the prefix.
    pub link_mode: LinkMode,
    /// URL prefix rewrites, longest prefix first.
    pub url_rewrites: Vec<(String, String)>,
    /// Use only what is cached.
    pub offline: bool,
    /// The compiler cache builds use.
    pub compiler_cache: CompilerCacheChoice,
    /// Source downloads and git fetches: attempts in a row without progress before one fails
    /// (`download-retries`), and the longest wait for data (`download-timeout-secs`);
    /// `ROCMFORGE_RETRIES` and `ROCMFORGE_HTTP_TIMEOUT_SECS` override them.
    pub download_retries: Option<u32>,
    pub download_timeout_secs: Option<u64>,
    /// The compiler cache's own settings (`CCACHE_*`, `SCCACHE_*`), given to every step; the
    /// environment's own `CCACHE_*`/`SCCACHE_*` variables pass through too.
    pub compiler_cache_env: BTreeMap<String, String>,
    /// Compiling on other machines.
    pub distributed: Distributed,
    /// The file this came from, if any.
    pub file: Option<PathBuf>,
    /// The shared artifact cache over HTTP, if one is set.
    pub remote: RemoteCacheConfig,
}

/// The settings of a shared artifact cache (`cache-url` and friends). `Debug` shows the URL
/// without its userinfo.
#[derive(Clone, Default)]
pub struct RemoteCacheConfig {
    /// The server's base URL (`/cas/` and `/ac/` lie below it); `None`: no remote cache.
    pub url: Option<String>,
    /// Take artifacts, never upload.
    pub read_only: bool,
    /// A bearer token (`Authorization: Bearer`).
    pub token: Option<Secret>,
    /// Basic auth: user and password.
    pub user: Option<String>,
    pub password: Option<Secret>,
    /// The secret key uploads are signed with; `None`: `<state-dir>/cache-signing.key`.
    pub signing_key: Option<PathBuf>,
    /// Public keys (`name:base64`) whose signatures make a remote artifact acceptable.
    pub trusted_keys: Vec<String>,
}

impl std::fmt::Debug for RemoteCacheConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = self.url.as_deref().map(|u| match url::Url::parse(u) {
            Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
                let _ = u.set_password(None);
                let _ = u.set_username("***");
                u.to_string()
            }
            Ok(u) => u.to_string(),
            Err(_) => "<cache-url>".into(),
        });
        f.debug_struct("RemoteCacheConfig")
            .field("url", &url)
            .field("read_only", &self.read_only)
            .field("token", &self.token)
            .field("user", &self.user)
            .field("password", &self.password)
            .field("signing_key", &self.signing_key)
            .field("trusted_keys", &self.trusted_keys)
            .finish()
    }
}

impl RemoteCacheConfig {
    /// The secret key file uploads are signed with.
    pub fn signing_key_file(&self, state_dir: &Path) -> PathBuf {
        self.signing_key.clone().unwrap_or_else(|| state_dir.join("cache-signing.key"))
    }
}

/// A credential: never shown by `Debug` (configs are printed in errors and logs).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn env_string(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn home() -> PathBuf {
    dirs::home_dir().unwrap_or_else(|| PathBuf::from("/"))
}

impl Config {
    /// The config file path: `$ROCMFORGE_CONFIG`, else `$XDG_CONFIG_HOME/rocmforge/config.toml`.
    pub fn default_file() -> PathBuf {
        env_path("ROCMFORGE_CONFIG").unwrap_or_else(|| {
            env_path("XDG_CONFIG_HOME").unwrap_or_else(|| home().join(".config")).join("rocmforge/config.toml")
        })
    }

    /// Before a command that fetches or builds: the cache, work and state dirs are directories
    /// this process can write, or can be created where they are missing. Else which one, why, and the setting that
    /// moves it, instead of a failure in the first source or step that writes there.
    pub fn check_writable(&self) -> Result<(), ConfigError> {
        let dirs = [
            ("cache dir", &self.cache_dir, "cache-dir", "ROCMFORGE_CACHE_DIR"),
            ("work dir", &self.work_dir, "work-dir", "ROCMFORGE_WORK_DIR"),
            ("state dir", &self.state_dir, "state-dir", "ROCMFORGE_STATE_DIR"),
        ];
        for (what, path, setting, env) in dirs {
            Self::check_dir(what, path, setting, env)?;
        }
        Ok(())
    }

    /// Before a build that publishes wheels: the index it publishes into (`dir`: the index dir,
    /// or the stack's `index-path` in it) is writable, as [`Config::check_writable`] checks the
    /// other dirs, so an unusable `index-dir` is named before the night, not at its end.
    pub fn check_index_writable(&self, dir: &Path) -> Result<(), ConfigError> {
        Self::check_dir("index dir", dir, "index-dir", "ROCMFORGE_INDEX_DIR")
    }

    fn check_dir(what: &'static str, path: &Path, setting: &'static str, env: &'static str) -> Result<(), ConfigError> {
        let unusable = |why: String| ConfigError::Unusable {
            what,
            path: path.to_path_buf(),
            why,
            setting,
            env,
            file: Self::default_file(),
        };
        // Nothing is created here (a build that downloads everything makes no work dir):
        // the dir, or the nearest part of its path that exists, must be a directory this
        // process may write in (access(2), not a probe file).
        let Some(existing) = path.ancestors().find(|p| p.exists()) else { return Ok(()) };
        if !existing.is_dir() {
            return Err(unusable(if existing == path {
                "it is a file, not a directory".into()
            } else {
                format!("`{}` in its path is a file, not a directory", existing.display())
            }));
        }
        if let Err(e) = rustix::fs::access(existing, rustix::fs::Access::WRITE_OK) {
            return Err(unusable(if existing == path {
                format!("nothing can be written in it ({e})")
            } else {
                format!("it cannot be created in `{}` ({e})", existing.display())
            }));
        }
        Ok(())
    }

    /// Loads the config file (if it exists) and applies environment overrides
    /// (`ROCMFORGE_CACHE_DIR`, `ROCMFORGE_WORK_DIR`, `ROCMFORGE_STATE_DIR`, `ROCMFORGE_PREFIX`,
    /// `ROCMFORGE_ROCM_PATH`, `ROCMFORGE_INDEX_DIR`, `ROCMFORGE_LINK_MODE`). Flags are applied by the caller on top.
    pub fn load() -> Result<Config, ConfigError> {
        let path = Self::default_file();
        // A file the user named must be there; the default one may be absent.
        if env_path("ROCMFORGE_CONFIG").is_some() && !path.exists() {
            return Err(ConfigError::Missing(path));
        }
        Self::load_from(&path)
    }

    pub fn load_from(path: &Path) -> Result<Config, ConfigError> {
        let (raw, file, text) = read_file(path)?;
        // A relative path in the file means the same wherever the command runs: it is read
        // against the file's own directory. An empty one would mean the current directory.
        let base = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_default();
        let values = FileValues { shown: path.display().to_string(), text: &text, base };
        let cache_dir = values.dir(raw.cache_dir, "cache-dir")?;
        let work_dir = values.dir(raw.work_dir, "work-dir")?;
        let state_dir = values.dir(raw.state_dir, "state-dir")?;
        let prefix = values.dir(raw.prefix, "prefix")?;
        let rocm_path = values.dir(raw.rocm_path, "rocm-path")?;
        let index_dir = values.dir(raw.index_dir, "index-dir")?;
        let signing_key = values.dir(raw.signing_key, "signing-key")?;
        let download_retries = values
            .at_least_one(
                raw.download_retries.map(|v| Spanned::new(v.span(), u64::from(*v.get_ref()))),
                "download-retries",
            )?
            .map(|n| n.min(u64::from(u32::MAX)) as u32);
        let download_timeout_secs = values.at_least_one(raw.download_timeout_secs, "download-timeout-secs")?;
        check_env_numbers()?;
        let env_read_only = env_cache_read_only()?;
        let xdg_cache = env_path("XDG_CACHE_HOME").unwrap_or_else(|| home().join(".cache"));
        let xdg_state = env_path("XDG_STATE_HOME").unwrap_or_else(|| home().join(".local/state"));
        let mut rewrites: Vec<(String, String)> = raw.url_rewrite.into_iter().collect();
        rewrites.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        let link_mode = link_mode(raw.link_mode)?;
        let compiler_cache = compiler_cache(raw.compiler_cache)?;
        check_compiler_cache_env(path, &raw.compiler_cache_env)?;
        Ok(Config {
            cache_dir: env_path("ROCMFORGE_CACHE_DIR").or(cache_dir).unwrap_or_else(|| xdg_cache.join("rocmforge")),
            work_dir: env_path("ROCMFORGE_WORK_DIR").or(work_dir).unwrap_or_else(|| xdg_cache.join("rocmforge/work")),
            state_dir: env_path("ROCMFORGE_STATE_DIR").or(state_dir).unwrap_or_else(|| xdg_state.join("rocmforge")),
            prefix: env_path("ROCMFORGE_PREFIX").or(prefix),
            rocm_path: env_path("ROCMFORGE_ROCM_PATH").or(rocm_path),
            index_dir: env_path("ROCMFORGE_INDEX_DIR").or(index_dir),
            link_mode,
            url_rewrites: rewrites,
            offline: false,
            compiler_cache,
            download_retries,
            download_timeout_secs,
            compiler_cache_env: raw.compiler_cache_env,
            distributed: raw.distributed,
            file,
            remote: RemoteCacheConfig {
                url: env_string("ROCMFORGE_CACHE_URL").or(raw.cache_url).filter(|u| !u.is_empty()),
                read_only: raw.cache_read_only.unwrap_or(false) || env_read_only,
                token: env_string("ROCMFORGE_CACHE_TOKEN").or(raw.cache_token).map(Secret),
                user: env_string("ROCMFORGE_CACHE_USER").or(raw.cache_user),
                password: env_string("ROCMFORGE_CACHE_PASSWORD").or(raw.cache_password).map(Secret),
                signing_key: env_path("ROCMFORGE_SIGNING_KEY").or(signing_key),
                trusted_keys: raw.trusted_keys,
            },
        })
    }

    /// Applies the longest matching URL rewrite (like git's `url.<base>.insteadOf`).
    pub fn rewrite_url(&self, url: &str) -> String {
        for (from, to) in &self.url_rewrites {
            if let Some(rest) = url.strip_prefix(from.as_str()) {
                return format!("{to}{rest}");
            }
        }
        url.to_string()
    }

    /// A URL reached through a rewrite, as the recipe would name it: the longest rewrite target it
    /// starts with turned back into that rewrite's prefix (a redirect's final URL, so what is
    /// pinned from it goes through the rewrite again); unchanged when it starts with none.
    pub fn unrewrite_url(&self, url: &str) -> String {
        let back = self
            .url_rewrites
            .iter()
            .filter_map(|(from, to)| url.strip_prefix(to.as_str()).map(|rest| (to.len(), format!("{from}{rest}"))))
            .max_by_key(|(len, _)| *len);
        back.map(|(_, u)| u).unwrap_or_else(|| url.to_string())
    }

    /// The local wheel index directory.
    pub fn index_dir(&self) -> PathBuf {
        self.index_dir.clone().unwrap_or_else(|| self.state_dir.join("index"))
    }

    /// The deploy prefix of a stack.
    pub fn prefix_for(&self, stack: &str) -> PathBuf {
        self.prefix.clone().unwrap_or_else(|| self.state_dir.join("prefix").join(stack))
    }
}

/// The config file's settings, the file (`None`: there is none) and its text.
fn read_file(path: &Path) -> Result<(RawConfig, Option<PathBuf>, String), ConfigError> {
    let shown = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let raw: RawConfig = toml::from_str(&text).map_err(|e| {
                ConfigError::Invalid(match e.span() {
                    Some(span) => crate::diagnostic::Diagnostic::at(&shown, &text, span, e.message().trim_end()),
                    None => crate::diagnostic::Diagnostic::file(&shown, e.message().trim_end()),
                })
            })?;
            Ok((raw, Some(path.to_path_buf()), text))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((RawConfig::default(), None, String::new())),
        Err(source) => Err(ConfigError::Read { path: path.to_path_buf(), source }),
    }
}

/// Reads the config file's values that must be checked against their place in it.
struct FileValues<'a> {
    shown: String,
    text: &'a str,
    /// The file's directory, which relative paths are read against.
    base: PathBuf,
}

impl FileValues<'_> {
    /// A directory setting, never empty, against the file's directory.
    fn dir(&self, v: Option<Spanned<PathBuf>>, setting: &str) -> Result<Option<PathBuf>, ConfigError> {
        let Some(v) = v else { return Ok(None) };
        if v.get_ref().as_os_str().to_string_lossy().trim().is_empty() {
            return Err(ConfigError::Invalid(
                crate::diagnostic::Diagnostic::at(&self.shown, self.text, v.span(), format!("`{setting}` is empty"))
                    .with_help(format!("name a directory, or remove `{setting}` to use its default")),
            ));
        }
        Ok(Some(self.base.join(v.into_inner())))
    }

    /// A count that must be at least 1.
    fn at_least_one(&self, v: Option<Spanned<u64>>, setting: &str) -> Result<Option<u64>, ConfigError> {
        match v {
            Some(v) if *v.get_ref() == 0 => Err(ConfigError::Invalid(
                crate::diagnostic::Diagnostic::at(
                    &self.shown,
                    self.text,
                    v.span(),
                    format!("`{setting}` must be at least 1"),
                )
                .with_help(format!("remove `{setting}` to use its default")),
            )),
            v => Ok(v.map(Spanned::into_inner)),
        }
    }
}

/// `ROCMFORGE_CACHE_READ_ONLY`, read as clap reads ROCMFORGE_OFFLINE: a word that is neither yes
/// nor no is refused, not no.
fn env_cache_read_only() -> Result<bool, ConfigError> {
    match std::env::var("ROCMFORGE_CACHE_READ_ONLY").ok().filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(ConfigError::BadEnv {
                name: "ROCMFORGE_CACHE_READ_ONLY",
                value: v,
                expected: "`1`, `true`, `yes` or `on` (or `0`, `false`, `no`, `off`)",
            }),
        },
    }
}

/// `ROCMFORGE_LINK_MODE`, else the file's `link-mode`.
fn link_mode(file: Option<LinkMode>) -> Result<LinkMode, ConfigError> {
    match std::env::var("ROCMFORGE_LINK_MODE").ok().filter(|v| !v.is_empty()) {
        None => Ok(file.unwrap_or_default()),
        Some(v) if v == "auto" => Ok(LinkMode::Auto),
        Some(v) if v == "copy" => Ok(LinkMode::Copy),
        Some(value) => Err(ConfigError::BadEnv { name: "ROCMFORGE_LINK_MODE", value, expected: "`auto` or `copy`" }),
    }
}

/// `ROCMFORGE_COMPILER_CACHE`, else the file's `compiler-cache`.
fn compiler_cache(file: Option<CompilerCacheChoice>) -> Result<CompilerCacheChoice, ConfigError> {
    match std::env::var("ROCMFORGE_COMPILER_CACHE").ok().filter(|v| !v.is_empty()) {
        None => Ok(file.unwrap_or_default()),
        Some(v) => CompilerCacheChoice::parse(&v).ok_or(ConfigError::BadEnv {
            name: "ROCMFORGE_COMPILER_CACHE",
            value: v,
            expected: "`ccache`, `sccache`, `none` or `auto`",
        }),
    }
}

/// `[compiler-cache-env]` holds only the compiler caches' own settings.
fn check_compiler_cache_env(path: &Path, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    match env.keys().find(|k| !k.starts_with("CCACHE_") && !k.starts_with("SCCACHE_")) {
        Some(bad) => Err(ConfigError::Invalid(crate::diagnostic::Diagnostic::file(
            &path.display().to_string(),
            format!("[compiler-cache-env] holds `{bad}`: only CCACHE_* and SCCACHE_* settings belong there"),
        ))),
        None => Ok(()),
    }
}

/// The numeric environment settings, each with the unit it counts and its least value that
/// means something (no attempt at all, or a timeout of nothing, fails every download unsaid).
pub const ENV_NUMBERS: [(&str, &str, u64); 5] = [
    ("ROCMFORGE_RETRIES", "attempts", 1),
    ("ROCMFORGE_RETRY_BASE_MS", "milliseconds", 0),
    ("ROCMFORGE_HTTP_TIMEOUT_SECS", "seconds", 1),
    ("ROCMFORGE_CACHE_CONNECT_TIMEOUT_SECS", "seconds", 1),
    ("ROCMFORGE_CACHE_BLOB_TIMEOUT_SECS", "seconds", 1),
];

/// `name`'s value as a number, `None` when it is unset or empty; one that does not parse or is
/// below its least is refused naming the variable, never taken as the default unsaid.
pub fn env_number(name: &str) -> Result<Option<u64>, ConfigError> {
    let Some(&(name, unit, min)) = ENV_NUMBERS.iter().find(|(n, ..)| *n == name) else { return Ok(None) };
    let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) else { return Ok(None) };
    let value = value.to_string_lossy().into_owned();
    match value.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(Some(n)),
        _ => Err(ConfigError::BadEnvNumber { name, value, unit, min }),
    }
}

fn check_env_numbers() -> Result<(), ConfigError> {
    for (name, ..) in ENV_NUMBERS {
        env_number(name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_rewrite_wins() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "[url-rewrite]\n\"https://github.com/\" = \"file:///srv/git/\"\n\"https://github.com/ROCm/\" = \"git://127.0.0.1/rocm/\"\n",
        )
        .unwrap();
        let c = Config::load_from(&f).unwrap();
        assert_eq!(c.rewrite_url("https://github.com/ROCm/clr.git"), "git://127.0.0.1/rocm/clr.git");
        assert_eq!(c.rewrite_url("https://github.com/pytorch/vision.git"), "file:///srv/git/pytorch/vision.git");
        assert_eq!(c.rewrite_url("https://example.org/x"), "https://example.org/x");
    }

    #[test]
    fn link_mode_from_the_file_and_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "link-mode = \"copy\"\n").unwrap();
        assert_eq!(Config::load_from(&f).unwrap().link_mode, LinkMode::Copy);
        std::fs::write(&f, "cache-dir = \"/x\"\n").unwrap();
        assert_eq!(Config::load_from(&f).unwrap().link_mode, LinkMode::Auto);
        std::fs::write(&f, "cache-dir = \"/x\"\nlink-mode = \"symlink\"\n").unwrap();
        let e = Config::load_from(&f).unwrap_err().to_string();
        assert!(e.contains("c.toml:2:13"), "{e}");
        assert!(e.contains("unknown variant `symlink`, expected `auto` or `copy`"), "{e}");
    }

    #[test]
    fn compiler_cache_and_distcc_hosts_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "compiler-cache = \"ccache\"\n[compiler-cache-env]\nCCACHE_REMOTE_STORAGE = \"http://127.0.0.1:1/ccache/\"\n[distributed]\ndistcc-hosts = [\"a/4\", \"b:3633/2\"]\n",
        )
        .unwrap();
        let c = Config::load_from(&f).unwrap();
        assert_eq!(c.compiler_cache, CompilerCacheChoice::Ccache);
        assert_eq!(c.compiler_cache_env["CCACHE_REMOTE_STORAGE"], "http://127.0.0.1:1/ccache/");
        assert_eq!(c.distributed.distcc_hosts, ["a/4", "b:3633/2"]);
        std::fs::write(&f, "[compiler-cache-env]\nPATH = \"/x\"\n").unwrap();
        let e = Config::load_from(&f).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("`PATH`: only CCACHE_* and SCCACHE_*"), "{e}");
        std::fs::write(&f, "compiler-cache = \"distcc\"\n").unwrap();
        let e = Config::load_from(&f).unwrap_err().to_string();
        assert!(e.contains("c.toml:1:18") && e.contains("unknown variant `distcc`"), "{e}");
    }

    #[test]
    fn remote_cache_settings_never_show_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "cache-url = \"https://lab:pw-in-url@cache.example/rf/\"\ncache-token = \"tok-123\"\ncache-password = \"pw-456\"\ntrusted-keys = [\"a:AAAA\"]\n",
        )
        .unwrap();
        let c = Config::load_from(&f).unwrap();
        assert_eq!(c.remote.token, Some(Secret("tok-123".into())));
        assert_eq!(c.remote.trusted_keys, ["a:AAAA"]);
        let shown = format!("{c:?}");
        for secret in ["pw-in-url", "tok-123", "pw-456"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("https://***@cache.example/rf/"), "{shown}");
    }

    /// An empty dir setting would put the cache (or work, state...) in whatever directory the
    /// command runs from; a relative one is the config file's, not the current directory's.
    #[test]
    fn dir_settings_empty_refused_relative_read_against_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        for setting in ["cache-dir", "work-dir", "state-dir", "prefix", "rocm-path", "index-dir", "signing-key"] {
            std::fs::write(&f, format!("link-mode = \"copy\"\n{setting} = \"\"\n")).unwrap();
            let e = Config::load_from(&f).unwrap_err().to_string();
            assert!(e.contains(&format!("`{setting}` is empty")) && e.contains("c.toml:2:"), "{setting}: {e}");
        }
        std::fs::write(
            &f,
            "cache-dir = \"big/cache\"\nwork-dir = \"/abs/work\"\nindex-dir = \"../wheels\"\nsigning-key = \"k.key\"\n",
        )
        .unwrap();
        let c = Config::load_from(&f).unwrap();
        assert_eq!(c.cache_dir, dir.path().join("big/cache"));
        assert_eq!(c.work_dir, Path::new("/abs/work"));
        assert_eq!(c.index_dir, Some(dir.path().join("../wheels")));
        assert_eq!(c.remote.signing_key, Some(dir.path().join("k.key")));
    }

    #[test]
    fn zero_download_retries_or_timeout_refused_at_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        for setting in ["download-retries", "download-timeout-secs"] {
            std::fs::write(&f, format!("{setting} = 0\n")).unwrap();
            let e = Config::load_from(&f).unwrap_err().to_string();
            assert!(e.contains(&format!("`{setting}` must be at least 1")) && e.contains("c.toml:1:"), "{e}");
            std::fs::write(&f, format!("{setting} = 2\n")).unwrap();
            Config::load_from(&f).unwrap();
        }
    }

    #[test]
    fn bad_config_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "cache-dir = \"/x\"\ncahce-dir = 3\n").unwrap();
        let e = Config::load_from(&f).unwrap_err().to_string();
        assert!(e.contains("c.toml:2:1"), "{e}");
        assert!(e.contains("unknown field `cahce-dir`"), "{e}");
    }
}
