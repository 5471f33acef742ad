//! The artifact manifest (`murmur.yaml` inside a bundle): what an artifact is,
//! how it runs, and what it accepts and returns.

use serde::{Deserialize, Serialize};

use super::names::{validate_name, validate_semver};

/// What kind of artifact a bundle holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactRuntime {
    /// A tool a capsule (or agent) can invoke: WASM component or native binary.
    Tool,
    /// A WASM tool that talks to a model (the agent loop's inference driver).
    Driver,
    /// A WASM component exporting `murmur:hook/handler@0.1.0`.
    Hook,
    /// A `skill.md` an agent can load by name.
    Skill,
}

impl ArtifactRuntime {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Driver => "driver",
            Self::Hook => "hook",
            Self::Skill => "skill",
        }
    }
}

impl std::fmt::Display for ArtifactRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a tool is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Implementation {
    #[default]
    Wasm,
    Native,
}

impl Implementation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wasm => "wasm",
            Self::Native => "native",
        }
    }
}

/// Lifecycle events a hook can be bound to (`murmur:hook@0.1.0` event kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HookBinding {
    OnStage,
    OnSessionStart,
    OnSessionEnd,
    OnTaskStart,
    OnTaskEnd,
    OnInference,
    OnCompaction,
    All,
}

impl HookBinding {
    /// The event `kind` this binding receives (`All` receives every kind).
    pub fn kind(self) -> Option<&'static str> {
        Some(match self {
            Self::OnStage => "stage",
            Self::OnSessionStart => "session-start",
            Self::OnSessionEnd => "session-end",
            Self::OnTaskStart => "task-start",
            Self::OnTaskEnd => "task-end",
            Self::OnInference => "inference",
            Self::OnCompaction => "compaction",
            Self::All => return None,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(HookBinding),
    Many(Vec<HookBinding>),
}

/// `hook:` section of a hook artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    binding: OneOrMany,
}

impl HookSpec {
    pub fn bindings(&self) -> Vec<HookBinding> {
        match &self.binding {
            OneOrMany::One(b) => vec![*b],
            OneOrMany::Many(v) => v.clone(),
        }
    }

    /// Whether this hook receives events of `kind`.
    pub fn handles(&self, kind: &str) -> bool {
        self.bindings()
            .iter()
            .any(|b| b.kind().is_none_or(|k| k == kind))
    }
}

/// A bundle's `murmur.yaml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactManifest {
    pub name: String,
    pub version: String,
    pub runtime: ArtifactRuntime,
    /// Tools only; `wasm` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// A JSON Schema, as YAML or as a JSON string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<serde_yaml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_yaml::Value>,
    /// Hooks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<HookSpec>,
}

/// Which file of a bundle carries the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadKind {
    Component,
    Native,
    Skill,
}

impl ArtifactManifest {
    /// Parses and validates manifest text; errors say which field to fix.
    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Self = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        manifest.validate()?;
        Ok(manifest)
    }

    fn validate(&self) -> Result<(), String> {
        validate_name(&self.name).map_err(|m| format!("`name` {m}"))?;
        validate_semver(&self.version).map_err(|m| format!("`version` {m}"))?;
        if self.implementation.is_some() && self.runtime != ArtifactRuntime::Tool {
            return Err(format!(
                "`implementation` applies to tools only, but runtime is `{}`",
                self.runtime
            ));
        }
        match (self.runtime, &self.hook) {
            (ArtifactRuntime::Hook, None) => {
                return Err("a hook needs `hook: {binding: …}` (e.g. on-stage)".into());
            }
            (ArtifactRuntime::Hook, Some(spec)) if spec.bindings().is_empty() => {
                return Err("`hook.binding` must name at least one event".into());
            }
            (runtime, Some(_)) if runtime != ArtifactRuntime::Hook => {
                return Err(format!(
                    "`hook` applies to hooks only, but runtime is `{runtime}`"
                ));
            }
            _ => {}
        }
        for (field, schema) in [
            ("input_schema", &self.input_schema),
            ("output_schema", &self.output_schema),
        ] {
            if let Some(schema) = schema {
                schema_json(schema).map_err(|m| format!("`{field}` {m}"))?;
            }
        }
        Ok(())
    }

    pub fn implementation(&self) -> Implementation {
        self.implementation.unwrap_or_default()
    }

    pub fn payload_kind(&self) -> PayloadKind {
        match (self.runtime, self.implementation()) {
            (ArtifactRuntime::Skill, _) => PayloadKind::Skill,
            (ArtifactRuntime::Tool, Implementation::Native) => PayloadKind::Native,
            _ => PayloadKind::Component,
        }
    }

    /// The bundle entry holding the payload.
    pub fn payload_entry(&self) -> String {
        match self.payload_kind() {
            PayloadKind::Component => "component.wasm".into(),
            PayloadKind::Native => self.name.clone(),
            PayloadKind::Skill => "skill.md".into(),
        }
    }

    /// `wasm`, `native` or `skill`, for people.
    pub fn payload_kind_label(&self) -> &'static str {
        match self.payload_kind() {
            PayloadKind::Component => "wasm",
            PayloadKind::Native => "native",
            PayloadKind::Skill => "skill",
        }
    }

    pub fn input_schema_json(&self) -> Option<String> {
        self.input_schema.as_ref().and_then(|s| schema_json(s).ok())
    }

    pub fn output_schema_json(&self) -> Option<String> {
        self.output_schema
            .as_ref()
            .and_then(|s| schema_json(s).ok())
    }
}

/// A schema written as YAML, or as a string holding JSON, as compact JSON.
fn schema_json(value: &serde_yaml::Value) -> Result<String, String> {
    if let serde_yaml::Value::String(text) = value {
        let parsed: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("is a string but not JSON: {e}"))?;
        return Ok(parsed.to_string());
    }
    serde_json::to_string(value).map_err(|e| format!("cannot be expressed as JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_defaults_to_wasm_and_schema_becomes_json() {
        let m = ArtifactManifest::parse(
            "name: echo\nversion: 1.0.0\nruntime: tool\ninput_schema: {type: object}\n",
        )
        .expect("valid");
        assert_eq!(m.payload_entry(), "component.wasm");
        assert_eq!(
            m.input_schema_json().as_deref(),
            Some(r#"{"type":"object"}"#)
        );
    }

    #[test]
    fn native_payload_is_named_after_the_artifact() {
        let m = ArtifactManifest::parse(
            "name: envdump\nversion: 1.0.0\nruntime: tool\nimplementation: native\n",
        )
        .expect("valid");
        assert_eq!(m.payload_entry(), "envdump");
    }

    #[test]
    fn mistakes_name_the_field() {
        for (yaml, needle) in [
            ("name: x\nversion: 1.0.0\nruntime: hook\n", "hook: {binding"),
            (
                "name: x\nversion: 1.0.0\nruntime: skill\nimplementation: native\n",
                "`implementation` applies to tools only",
            ),
            ("name: X\nversion: 1.0.0\nruntime: tool\n", "`name`"),
            ("name: x\nversion: 1\nruntime: tool\n", "`version`"),
            (
                "name: x\nversion: 1.0.0\nruntime: gadget\n",
                "unknown variant",
            ),
            (
                "name: x\nversion: 1.0.0\nruntime: tool\nextra: 1\n",
                "unknown field `extra`",
            ),
            (
                "name: x\nversion: 1.0.0\nruntime: tool\ninput_schema: '{nope'\n",
                "`input_schema` is a string but not JSON",
            ),
        ] {
            let err = ArtifactManifest::parse(yaml).expect_err(yaml);
            assert!(err.contains(needle), "{yaml}: {err}");
        }
    }

    #[test]
    fn hook_bindings_select_event_kinds() {
        let m = ArtifactManifest::parse(
            "name: h\nversion: 1.0.0\nruntime: hook\nhook: {binding: [on-stage, on-task-end]}\n",
        )
        .expect("valid");
        let spec = m.hook.expect("hook");
        assert!(spec.handles("stage"));
        assert!(spec.handles("task-end"));
        assert!(!spec.handles("inference"));
    }
}
