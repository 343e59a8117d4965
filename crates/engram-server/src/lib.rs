//! engram over the network.
//!
//! - [`api`]: the REST API (axum) under `/v1`, with `/health` and `/openapi.json`; errors are
//!   JSON with stable codes ([`error::ErrorCode`]).
//! - [`mem0`]: Mem0-compatible routes (its open-source server's and its hosted platform's, as
//!   its `MemoryClient` calls them), adapters over the same operations.
//! - [`mcp`]: the MCP server (rmcp) with memory tools and the reference server's
//!   knowledge-graph tools, over stdio or streamable HTTP at `/mcp`.
//! - [`mcp_client`]: other MCP servers' tools for the agent, as `mcp_<server>_<tool>`.
//! - [`auth`]: bearer tokens bound to users; a memory of another user is answered exactly as a
//!   missing one.
//! - [`serve`]: binding, the loopback rule, graceful shutdown; [`connections`]: timeouts for
//!   clients that stall and the connection cap.
//!
//! - [`tokens`]: making API tokens and checking their text (hashes compared in constant time).
//!
//! The stores come from the program's composition root as an [`engram_core::Backend`]; every
//! store call is awaited (an engine that blocks moves its work off the async runtime itself),
//! and [`service::MemoryService`] bounds how many run at once.

pub mod api;
pub mod auth;
pub mod config;
pub mod connections;
pub mod error;
pub mod extract;
pub mod knowledge;
pub mod mcp;
pub mod mcp_client;
pub mod mem0;
pub mod openapi;
pub mod serve;
pub mod service;
pub mod tokens;
pub mod ui;

pub use error::{ApiError, ErrorCode};
pub use serve::{ServeError, ServeOptions, Server, Stores, shutdown_signal};
