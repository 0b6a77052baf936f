//! Configuration in two steps (STYLE.md point 7): [`raw`] holds the serde shape
//! of one TOML file plus `FLOTILLA_*` environment overrides, read with the
//! `config` crate; [`Settings::load`] validates it into runtime settings whose
//! errors name the offending key. Relative paths resolve against the config
//! file's directory, so a config works from any working directory.
//!
//! The keys are a public contract, documented in `docs/CONFIG.md`.

pub mod raw;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use raw::{LocalConfig, NatsConfig, PlannerConfig, SubagentConfig};

use crate::ids::{SubagentType, is_valid_token};

/// Environment variable prefix for overrides: `FLOTILLA_NATS__URL` sets `[nats] url`.
pub const ENV_PREFIX: &str = "FLOTILLA";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file or environment could not be read or parsed.
    #[error("cannot load configuration{}: {source}", path.as_ref().map(|p| format!(" from {}", p.display())).unwrap_or_default())]
    Load {
        /// The file, when there is one.
        path: Option<PathBuf>,
        /// What the `config` crate said.
        source: ::config::ConfigError,
    },
    /// A key has a value that cannot work.
    #[error("invalid config key `{key}`: {message}")]
    Invalid {
        /// Dotted key, e.g. `subagents.finance.model`.
        key: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// A chat model, resolved from `[models.<name>]`.
#[derive(Clone, Debug)]
pub enum ModelSettings {
    /// Any OpenAI-compatible `/chat/completions` endpoint.
    OpenAi {
        /// Base URL, e.g. `https://api.openai.com/v1`.
        base_url: String,
        /// Model name sent in requests.
        model: String,
        /// Name of the environment variable holding the API key (never the key).
        api_key_env: Option<String>,
        /// Per-request timeout.
        timeout: Duration,
        /// Retries on 429/5xx/timeouts before giving up.
        max_retries: u32,
        /// Sampling temperature, when set.
        temperature: Option<f32>,
    },
    /// Deterministic turns from a script file.
    Scripted {
        /// The script, resolved to an absolute path.
        script: PathBuf,
    },
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
    /// NATS connection and naming.
    pub nats: NatsConfig,
    /// Models by name.
    pub models: BTreeMap<String, ModelSettings>,
    /// The planner agent, when configured.
    pub planner: Option<PlannerConfig>,
    /// Subagent types by name.
    pub subagents: BTreeMap<SubagentType, SubagentConfig>,
    /// Local all-in-one mode (`flotilla up`).
    pub local: LocalConfig,
}

impl Settings {
    /// Loads `path` (if given) plus environment overrides and validates them.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// Like [`Settings::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = ::config::Config::builder();
        if let Some(p) = path {
            if !p.is_file() {
                return Err(invalid("--config", format!("{} does not exist or is not a file", p.display())));
            }
            builder = builder.add_source(::config::File::from(p).format(::config::FileFormat::Toml));
        }
        let env: std::collections::HashMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}_")) && k.contains("__")).collect();
        builder = builder.add_source(
            ::config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(env)),
        );
        let raw: raw::RawConfig = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|source| ConfigError::Load { path: path.map(Path::to_path_buf), source })?;
        let base = path.and_then(|p| p.parent()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        Self::validate(raw, path, &base)
    }

    fn validate(raw: raw::RawConfig, path: Option<&Path>, base: &Path) -> Result<Self, ConfigError> {
        if !is_valid_token(&raw.nats.prefix) {
            return Err(invalid("nats.prefix", "use 1-64 characters from a-z, A-Z, 0-9, '-' and '_'"));
        }
        let mut models = BTreeMap::new();
        for (name, m) in raw.models {
            let key = |k: &str| format!("models.{name}.{k}");
            let settings = match m.provider.as_str() {
                "openai" => ModelSettings::OpenAi {
                    base_url: m.base_url.unwrap_or_else(|| "https://api.openai.com/v1".into()),
                    model: m.model.ok_or_else(|| invalid(key("model"), "required for provider \"openai\""))?,
                    api_key_env: m.api_key_env,
                    timeout: Duration::from_secs(m.timeout.unwrap_or(120)),
                    max_retries: m.max_retries.unwrap_or(3),
                    temperature: m.temperature,
                },
                "scripted" => {
                    let script =
                        m.script.ok_or_else(|| invalid(key("script"), "required for provider \"scripted\""))?;
                    let script = base.join(script);
                    if !script.is_file() {
                        return Err(invalid(key("script"), format!("{} does not exist", script.display())));
                    }
                    ModelSettings::Scripted { script }
                }
                other => {
                    return Err(invalid(
                        key("provider"),
                        format!("unknown provider {other:?}: use \"openai\" or \"scripted\""),
                    ));
                }
            };
            models.insert(name, settings);
        }
        let check_model = |key: String, model: &str| {
            if models.contains_key(model) {
                Ok(())
            } else {
                let known: Vec<_> = models.keys().cloned().collect();
                Err(invalid(key, format!("no model {model:?} under [models] (known: {})", known.join(", "))))
            }
        };
        if let Some(p) = &raw.planner {
            check_model("planner.model".into(), &p.model)?;
            if p.max_steps == 0 {
                return Err(invalid("planner.max_steps", "must be at least 1"));
            }
        }
        let mut subagents = BTreeMap::new();
        for (name, s) in raw.subagents {
            let ty = SubagentType::new(&name).map_err(|e| invalid(format!("subagents.{name}"), e.to_string()))?;
            check_model(format!("subagents.{name}.model"), &s.model)?;
            if s.concurrency == 0 {
                return Err(invalid(format!("subagents.{name}.concurrency"), "must be at least 1"));
            }
            if s.max_steps == 0 {
                return Err(invalid(format!("subagents.{name}.max_steps"), "must be at least 1"));
            }
            subagents.insert(ty, s);
        }
        let mut local = raw.local;
        local.state_dir = base.join(&local.state_dir);
        Ok(Settings {
            source: path.map(Path::to_path_buf),
            nats: raw.nats,
            models,
            planner: raw.planner,
            subagents,
            local,
        })
    }

    /// The model `name`, which validation guarantees exists when referenced.
    pub fn model(&self, name: &str) -> Result<&ModelSettings, ConfigError> {
        self.models.get(name).ok_or_else(|| invalid(format!("models.{name}"), "no such model"))
    }

    /// The planner section, or an error saying it is needed.
    pub fn planner(&self) -> Result<&PlannerConfig, ConfigError> {
        self.planner.as_ref().ok_or_else(|| {
            invalid("planner", "missing: the orchestrator needs a [planner] section (see docs/CONFIG.md)")
        })
    }
}

#[cfg(test)]
mod tests;
