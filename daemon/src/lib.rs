//! roostd: hosts murmur capsules on one shared wasmtime Engine.
//!
//! Code map (ARCHITECTURE.md has it whole, with the invariants that
//! `scripts/check-architecture` checks):
//! - [`daemon`]: start-up, wiring (`daemon::wire`) and shutdown.
//! - [`config`]: the daemon's YAML config, its defaults and overrides.
//! - [`manifest`], [`policy`]: `murmur.yaml` and the capability policy.
//! - [`staging`]: what is checked before a session exists.
//! - [`artifacts`], [`registry`]: a capsule's artifacts, verified and installed;
//!   where they come from.
//! - [`tools`]: native and shell tool processes; [`sandbox`]: the jail they
//!   run in (the `roost-jail` helper); [`fsx`]: file operations where tools
//!   can write.
//! - [`agent`]: agent capsules' host-run tool-use loop (drivers, hooks, trace,
//!   MURMUR.md, checkpoints).
//! - [`supervisor`]: owner of the live-session table, session tasks, restarts.
//! - [`runtime`]: the only module that touches wasmtime; it knows nothing of
//!   its embedder, which implements its ports.
//! - [`store`]: the only module that knows SQL.
//! - [`api`], [`a2a`]: the only modules that serve HTTP (the control API,
//!   the metrics listener and the dashboard; the gateway); [`http_client`] is
//!   the only HTTP client (guests' wasi-http requests go out through it too).
//! - [`tasks`]: A2A tasks apart from the wire: states, event log, the broker.
//! - [`schedules`]: durable timers that fire A2A tasks, each tick once.
//! - [`ids`]: `SessionId`, `TaskId`.
//! - [`logs`]: guest output capture; [`logfmt`]: roostd's own log as JSON;
//!   [`notify`]: sd_notify.
//! - [`telemetry`]: the only module that knows OpenTelemetry (OTLP export,
//!   spans); [`metrics`]: the only one that knows Prometheus; [`health`]:
//!   readiness.
//! - [`secrets`]: files holding tokens, checked before they are read.
//! - [`uploads`]: capsules uploaded over the control socket.
//! - [`cluster`]: a node of a cluster over NATS JetStream (joining, the node
//!   registry); the only module that knows NATS.

pub mod a2a;
pub mod agent;
pub mod api;
pub mod artifacts;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod fsx;
pub mod health;
pub mod http_client;
pub mod ids;
pub mod logfmt;
pub mod logs;
pub mod manifest;
pub mod metrics;
pub mod notify;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod schedules;
pub mod secrets;
pub use roost_jail as sandbox;
pub mod staging;
pub mod store;
pub mod supervisor;
pub mod tasks;
pub mod telemetry;
pub mod tools;
pub mod uploads;
