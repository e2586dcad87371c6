//! Who may put artifacts into a shared cache: ed25519 key pairs (`ed25519-dalek`), named like
//! Nix's binary-cache keys. A key is `<name>:<base64>`: the public one goes into other machines'
//! `trusted-keys`, the secret one stays in a 0600 file (`rocmforge cache keygen`). Every uploaded
//! manifest is signed; a remote artifact is accepted only with a valid signature by a trusted key
//! over the text [`signed_text`], which names the key the artifact is stored under and the
//! blob's sha256 and size, so neither an altered manifest nor a valid one copied to another
//! key's path passes.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{what} `{text}`: {problem} (expected `<name>:<base64 of 32 bytes>`, as `rocmforge cache keygen` prints)")]
    BadKey { what: String, text: String, problem: String },
    #[error("cannot read the signing key `{path}`")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the signing key `{path}` already exists; remove it first to make a new one (every machine trusting its public key must then be given the new one)")]
    Exists { path: PathBuf },
    #[error("cannot write the signing key `{path}`")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot get random bytes from the system for a new key: {0}")]
    Random(String),
}

/// A public key with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub name: String,
    key: VerifyingKey,
}

impl PublicKey {
    /// Parses `<name>:<base64>`; `what` names where it came from, for the error.
    pub fn parse(text: &str, what: &str) -> Result<PublicKey, TrustError> {
        let (name, bytes) = split_key(text, what)?;
        let bad = |problem: String| TrustError::BadKey { what: what.into(), text: text.into(), problem };
        let key = VerifyingKey::from_bytes(&bytes).map_err(|e| bad(format!("not an ed25519 public key ({e})")))?;
        Ok(PublicKey { name, key })
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, B64.encode(self.key.as_bytes()))
    }
}

/// A secret key with its name. `Debug` does not show the key.
pub struct SecretKey {
    pub name: String,
    key: SigningKey,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({}, <redacted>)", self.name)
    }
}

fn split_key(text: &str, what: &str) -> Result<(String, [u8; 32]), TrustError> {
    let bad = |problem: &str| TrustError::BadKey { what: what.into(), text: text.into(), problem: problem.into() };
    let (name, b64) = text.trim().split_once(':').ok_or_else(|| bad("no `:` between name and key"))?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace()) {
        return Err(bad("the name is empty or holds whitespace"));
    }
    let bytes = B64.decode(b64.trim()).map_err(|_| bad("the key is not base64"))?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad("the key is not 32 bytes long"))?;
    Ok((name.to_string(), bytes))
}

impl SecretKey {
    /// A new random key named `name`.
    pub fn generate(name: &str) -> Result<SecretKey, TrustError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| TrustError::Random(e.to_string()))?;
        Ok(SecretKey { name: name.to_string(), key: SigningKey::from_bytes(&seed) })
    }

    /// Reads a key file written by [`SecretKey::write_new`]. The error names the file but never
    /// shows its content.
    pub fn read(path: &Path) -> Result<SecretKey, TrustError> {
        let text = std::fs::read_to_string(path).map_err(|source| TrustError::Read { path: path.into(), source })?;
        let (name, seed) = split_key(&text, &format!("signing key file {}", path.display())).map_err(|e| match e {
            TrustError::BadKey { what, problem, .. } => TrustError::BadKey { what, text: "<secret>".into(), problem },
            e => e,
        })?;
        Ok(SecretKey { name, key: SigningKey::from_bytes(&seed) })
    }

    /// Writes the key to a new file readable by its owner only (mode 0600), never over an
    /// existing one.
    pub fn write_new(&self, path: &Path) -> Result<(), TrustError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |source| TrustError::Write { path: path.into(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut f =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| {
                match e.kind() {
                    std::io::ErrorKind::AlreadyExists => TrustError::Exists { path: path.into() },
                    _ => err(e),
                }
            })?;
        writeln!(f, "{}:{}", self.name, B64.encode(self.key.to_bytes())).map_err(err)?;
        f.sync_all().map_err(err)
    }

    pub fn public(&self) -> PublicKey {
        PublicKey { name: self.name.clone(), key: self.key.verifying_key() }
    }

    /// The signature of `text`, base64.
    pub fn sign(&self, text: &str) -> String {
        B64.encode(self.key.sign(text.as_bytes()).to_bytes())
    }
}

/// The text a manifest's signature covers: the cache key the artifact is stored under and the
/// blob that holds it.
pub fn signed_text(key: &str, sha256: &str, size: u64, compression: &str) -> String {
    format!("rocmforge artifact v1\nkey {key}\nblob sha256 {sha256}\nblob size {size}\ncompression {compression}\n")
}

/// The keys a machine accepts artifacts from.
#[derive(Debug, Clone, Default)]
pub struct Trusted(pub Vec<PublicKey>);

impl Trusted {
    /// Checks that `signature` (base64) by the key named `signer` is valid for `text`: `Err` says
    /// why not, in words for the user.
    pub fn check(&self, signer: &str, signature: &str, text: &str) -> Result<(), String> {
        let Some(k) = self.0.iter().find(|k| k.name == signer) else {
            return Err(if self.0.is_empty() {
                format!("signed by `{signer}`, but `trusted-keys` in the config is empty")
            } else {
                format!(
                    "signed by `{signer}`, which is not in `trusted-keys` ({})",
                    self.0.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
                )
            });
        };
        let sig = B64
            .decode(signature.trim())
            .ok()
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .map(|b| Signature::from_bytes(&b))
            .ok_or_else(|| format!("the signature by `{signer}` is not a well-formed ed25519 signature"))?;
        k.key.verify(text.as_bytes(), &sig).map_err(|_| {
            format!("the signature by `{signer}` does not match the manifest (altered after it was signed?)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_and_refuse() {
        let a = SecretKey::generate("a-1").unwrap();
        let b = SecretKey::generate("b-1").unwrap();
        let text = signed_text("k1", "00ff", 3, "zstd");
        let sig = a.sign(&text);
        let pa = PublicKey::parse(&a.public().to_string(), "trusted-keys entry").unwrap();
        assert_eq!(pa, a.public());
        let trusted = Trusted(vec![pa]);
        trusted.check("a-1", &sig, &text).unwrap();
        let e = trusted.check("a-1", &sig, &signed_text("k2", "00ff", 3, "zstd")).unwrap_err();
        assert!(e.contains("does not match the manifest"), "{e}");
        let e = trusted.check("b-1", &b.sign(&text), &text).unwrap_err();
        assert!(e.contains("`b-1`, which is not in `trusted-keys` (a-1)"), "{e}");
        let e = trusted.check("a-1", "bm90IGEgc2ln", &text).unwrap_err();
        assert!(e.contains("not a well-formed"), "{e}");
        // b's key under a's name: the signature is a's to check, and fails.
        let e = trusted.check("a-1", &b.sign(&text), &text).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        assert!(Trusted::default().check("a-1", &sig, &text).unwrap_err().contains("is empty"));
    }

    #[test]
    fn key_files_are_private_and_round_trip() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state/cache-signing.key");
        let k = SecretKey::generate("box-1").unwrap();
        k.write_new(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let back = SecretKey::read(&p).unwrap();
        assert_eq!(back.public(), k.public());
        assert!(!format!("{back:?}").contains(&B64.encode(k.key.to_bytes())));
        assert!(matches!(k.write_new(&p), Err(TrustError::Exists { .. })));
        std::fs::write(&p, "box-1:c2VjcmV0\n").unwrap();
        let e = SecretKey::read(&p).unwrap_err().to_string();
        assert!(e.contains("not 32 bytes") && !e.contains("c2VjcmV0"), "{e}");
    }

    #[test]
    fn bad_public_keys_are_named() {
        for (text, want) in
            [("nokey", "no `:`"), (":AAAA", "name is empty"), ("x:%%%", "not base64"), ("x:AAAA", "not 32 bytes")]
        {
            let e = PublicKey::parse(text, "trusted-keys entry").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(text), "{e}");
        }
    }
}
