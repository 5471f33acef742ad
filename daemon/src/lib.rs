//! roostd: hosts murmur capsules on one shared wasmtime Engine.
//!
//! Code map (see ARCHITECTURE.md for the invariants):
//! - [`daemon`]: start-up and shutdown wiring.
//! - [`config`]: the daemon's YAML config and its defaults.
//! - [`manifest`], [`policy`]: `murmur.yaml` and the capability policy.
//! - [`staging`]: what is checked before a session exists.
//! - [`artifacts`], [`registry`]: a capsule's artifacts, verified and installed;
//!   where they come from.
//! - [`tools`]: native and shell tool processes; [`sandbox`]: the jail they
//!   run in (a helper mode of the roostd binary).
//! - [`agent`]: agent capsules' host-run tool-use loop (drivers, hooks, trace,
//!   MURMUR.md, checkpoints).
//! - [`supervisor`]: owner of the live-session table, session tasks, restarts.
//! - [`runtime`]: the only module that touches wasmtime.
//! - [`store`]: the only module that knows SQL.
//! - [`api`], [`a2a`]: the only modules that serve HTTP; [`http_client`] is
//!   the only HTTP client (besides guests' wasi-http in [`runtime`]).
//! - [`tasks`]: A2A tasks apart from the wire: states, event log, the broker.
//! - [`logs`]: guest output capture; [`metrics`]: counters; [`notify`]: sd_notify.

pub mod a2a;
pub mod agent;
pub mod api;
pub mod artifacts;
pub mod config;
pub mod daemon;
pub mod fsx;
pub mod http_client;
pub mod logs;
pub mod manifest;
pub mod metrics;
pub mod notify;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub mod staging;
pub mod store;
pub mod supervisor;
pub mod tasks;
pub mod tools;
