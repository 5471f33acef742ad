//! Agent card signatures: roostd's card-signing key (ECDSA P-256, kept in
//! the state dir), the JWS (ES256) over the canonical card (RFC 8785) that
//! goes into a card's `signatures`, and the JWKS publishing the public keys
//! (the current one and those retired by a rotation).

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The current key, below the directory given to [`CardSigner::open`].
pub const KEY_FILE: &str = "card-signing.p8";
/// Keys retired by a rotation: still published, no longer used.
pub const RETIRED_DIR: &str = "card-signing.retired";
/// Where the gateway serves the public keys (the `jku` of every signature).
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// Why the card-signing key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("card-signing key {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "card-signing key {}: {why}; move it aside (a new key is made at the next start) or restore it from a backup",
        path.display()
    )]
    Key { path: PathBuf, why: String },
}

/// Signs cards with the current key.
pub struct CardSigner {
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
    /// The current key and the retired ones, as a JWK Set.
    jwks: Value,
}

impl std::fmt::Debug for CardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner")
            .field("kid", &self.kid)
            .finish()
    }
}

impl CardSigner {
    /// Opens the key in `dir` (roostd's `<state_dir>/keys`), making one
    /// (mode 0600) on first use, and reads the retired ones beside it.
    pub fn open(dir: &Path) -> Result<Self, SigningError> {
        let rng = SystemRandom::new();
        let path = dir.join(KEY_FILE);
        let io = |source| SigningError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let bytes = match crate::fsx::read(dir, &path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let made = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| SigningError::Key {
                        path: path.clone(),
                        why: "no randomness to make a key".into(),
                    })?;
                write_private(dir, &path, made.as_ref()).map_err(io)?;
                tracing::info!(path = %path.display(), "made a card-signing key");
                made.as_ref().to_vec()
            }
            Err(e) => return Err(io(e)),
        };
        let key = load(&path, &bytes, &rng)?;
        let current = jwk(&key);
        let kid = current["kid"].as_str().unwrap_or_default().to_string();
        let mut keys = vec![current];
        let retired = dir.join(RETIRED_DIR);
        if let Ok(entries) = std::fs::read_dir(&retired) {
            let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for file in files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "p8"))
            {
                let read = crate::fsx::read(&retired, file).map_err(|source| SigningError::Io {
                    path: file.clone(),
                    source,
                });
                match read.and_then(|bytes| load(file, &bytes, &rng)) {
                    Ok(old) => keys.push(jwk(&old)),
                    Err(e) => tracing::warn!(error = %e, "retired card-signing key not published"),
                }
            }
        }
        Ok(Self {
            key,
            kid,
            rng,
            jwks: json!({ "keys": keys }),
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWK Set of the public keys.
    pub fn jwks(&self) -> &Value {
        &self.jwks
    }

    /// Puts a signature over `card` (without `signatures`, canonicalized)
    /// into its `signatures`; `jku`: where the JWKS is served.
    pub fn sign(&self, card: &mut Value, jku: &str) {
        if let Some(o) = card.as_object_mut() {
            o.remove("signatures");
        }
        let header = json!({"alg": "ES256", "typ": "JOSE", "kid": self.kid, "jku": jku});
        let protected = B64.encode(canonical(&header));
        let payload = B64.encode(canonical(card));
        let input = format!("{protected}.{payload}");
        match self.key.sign(&self.rng, input.as_bytes()) {
            Ok(sig) => {
                card["signatures"] =
                    json!([{"protected": protected, "signature": B64.encode(sig.as_ref())}]);
            }
            Err(_) => tracing::error!("signing an agent card failed: it is served unsigned"),
        }
    }
}

fn load(path: &Path, bytes: &[u8], rng: &SystemRandom) -> Result<EcdsaKeyPair, SigningError> {
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, bytes, rng).map_err(|e| {
        SigningError::Key {
            path: path.to_path_buf(),
            why: format!("not a PKCS#8 P-256 key ({e})"),
        }
    })
}

fn write_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = crate::fsx::create_new(dir, path, 0o600)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The public JWK of a key, its `kid` the RFC 7638 thumbprint.
fn jwk(key: &EcdsaKeyPair) -> Value {
    // An uncompressed point: 0x04, then x and y (32 bytes each).
    let point = key.public_key().as_ref();
    let (x, y) = (B64.encode(&point[1..33]), B64.encode(&point[33..65]));
    let members = json!({"crv": "P-256", "kty": "EC", "x": x, "y": y});
    use sha2::Digest;
    let kid = B64.encode(sha2::Sha256::digest(canonical(&members).as_bytes()));
    json!({"kty": "EC", "crv": "P-256", "x": x, "y": y, "kid": kid, "alg": "ES256", "use": "sig"})
}

/// JSON canonicalization (RFC 8785) of the values a card holds: object
/// members sorted by key (UTF-16 code units), no whitespace, strings
/// escaped as ECMAScript does, integers as written.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        // serde_json writes strings as RFC 8785 does (the short escapes,
        // other controls as lowercase \u00xx, nothing else escaped), and
        // integers plainly; a card holds no other numbers.
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};

    #[test]
    fn canonical_json_sorts_members_and_escapes_as_rfc_8785_does() {
        let v = json!({"b": [1, {"z": true, "a": null}], "a": "x\u{1}\n\"é", "\u{e000}": 0, "\u{1f600}": 1});
        assert_eq!(
            canonical(&v),
            "{\"a\":\"x\\u0001\\n\\\"é\",\"b\":[1,{\"a\":null,\"z\":true}],\"\u{1f600}\":1,\"\u{e000}\":0}"
        );
    }

    #[test]
    fn a_signed_card_verifies_with_the_published_key_until_a_byte_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let signer = CardSigner::open(dir.path()).expect("key");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(KEY_FILE))
                .expect("key file")
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let mut card = json!({"name": "a", "skills": [{"id": "s"}], "signatures": ["old"]});
        signer.sign(&mut card, "http://x/.well-known/jwks.json");
        let sig = card["signatures"][0].clone();
        let protected = sig["protected"].as_str().expect("protected");
        let signature = B64
            .decode(sig["signature"].as_str().expect("sig"))
            .expect("b64");
        let key = &signer.jwks()["keys"][0];
        let point = [
            vec![4u8],
            B64.decode(key["x"].as_str().expect("x")).expect("x"),
            B64.decode(key["y"].as_str().expect("y")).expect("y"),
        ]
        .concat();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point);
        let mut unsigned = card.clone();
        unsigned
            .as_object_mut()
            .expect("object")
            .remove("signatures");
        let input = format!("{protected}.{}", B64.encode(canonical(&unsigned)));
        public
            .verify(input.as_bytes(), &signature)
            .expect("verifies");
        unsigned["name"] = json!("b");
        let forged = format!("{protected}.{}", B64.encode(canonical(&unsigned)));
        assert!(public.verify(forged.as_bytes(), &signature).is_err());

        // The same key at the next start; after a rotation, a new one, with
        // the old one still published.
        assert_eq!(
            CardSigner::open(dir.path()).expect("again").kid(),
            signer.kid()
        );
        std::fs::create_dir_all(dir.path().join(RETIRED_DIR)).expect("mkdir");
        std::fs::rename(
            dir.path().join(KEY_FILE),
            dir.path().join(RETIRED_DIR).join("2026-12-01.p8"),
        )
        .expect("retire");
        let rotated = CardSigner::open(dir.path()).expect("rotated");
        assert_ne!(rotated.kid(), signer.kid());
        let kids: Vec<&str> = rotated.jwks()["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .filter_map(|k| k["kid"].as_str())
            .collect();
        assert_eq!(kids, [rotated.kid(), signer.kid()]);
        // A damaged key is refused with what to do.
        std::fs::write(dir.path().join(KEY_FILE), b"junk").expect("write");
        let e = CardSigner::open(dir.path())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("move it aside"), "{e}");
    }
}
