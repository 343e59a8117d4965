//! `engram token create|list|revoke`: the bearer tokens `engram serve` accepts.

use anyhow::Result;
use clap::{Args, Subcommand};
use engram_core::store::tokens::TokenError;
use engram_server::tokens::create_token;
use jiff::Timestamp;
use serde_json::json;

use crate::context::Context;
use crate::exit::{Failure, Status, usage};
use crate::output;

/// `engram token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token bound to one or more users; it is printed once and never again.
    #[command(after_help = "\
Example:
  engram token create --user alice --name laptop
The token is printed on standard output (and nothing else is), so it can be captured:
  TOKEN=$(engram token create --user alice)
Only its SHA-256 hash is stored. Once any token exists, `engram serve` requires one.")]
    Create(TokenCreateArgs),
    /// List tokens: id, name, users, created, last used, revoked (never the tokens themselves).
    List,
    /// Revoke a token: a running server refuses it from the next request on.
    Revoke(TokenRevokeArgs),
}

/// `engram token create`.
#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// A user whose memories the token may touch (repeat for several).
    #[arg(long = "user", short = 'u', required = true, value_name = "USER")]
    pub users: Vec<String>,
    /// A name to recognise it by in `engram token list` and in history (`api:<id>`).
    #[arg(long)]
    pub name: Option<String>,
}

/// `engram token revoke`.
#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's id, as `engram token list` shows it.
    pub id: String,
}

fn failure(err: TokenError) -> anyhow::Error {
    match err {
        TokenError::NotFound(_) => Failure {
            status: Status::NotFound,
            message: err.to_string(),
        }
        .into(),
        TokenError::Invalid(message) => usage(message),
        other => other.into(),
    }
}

/// Runs a token command.
pub fn run(ctx: &Context, command: TokenCommand) -> Result<Status> {
    let tokens = ctx.backend()?.tokens;
    match command {
        TokenCommand::Create(args) => {
            let (token, text) = ctx
                .block_on(create_token(
                    tokens.as_ref(),
                    args.name.as_deref(),
                    &args.users,
                    Timestamp::now(),
                ))?
                .map_err(failure)?;
            if ctx.json {
                output::json(&json!({
                    "id": token.id, "name": token.name, "users": token.users, "token": text
                }))?;
            } else {
                println!("{text}");
                eprintln!(
                    "created token {} for {}; it is shown only now: keep it somewhere safe",
                    token.id,
                    token.users.join(", ")
                );
            }
        }
        TokenCommand::List => {
            let list = ctx.block_on(tokens.list())?.map_err(failure)?;
            if ctx.json {
                output::json(&list)?;
            } else if list.is_empty() {
                eprintln!("no tokens (create one with `engram token create --user NAME`)");
            } else {
                println!(
                    "{:<12}  {:<16}  {:<16}  {:<16}  {:<8}  users",
                    "id", "name", "created", "last used", "state"
                );
                for token in &list {
                    println!(
                        "{:<12}  {:<16}  {:<16}  {:<16}  {:<8}  {}",
                        token.id,
                        token.name.as_deref().unwrap_or("-"),
                        output::local_time(token.created_at),
                        token
                            .last_used_at
                            .map(output::local_time)
                            .unwrap_or_else(|| "never".to_string()),
                        if token.is_active() {
                            "active"
                        } else {
                            "revoked"
                        },
                        token.users.join(", ")
                    );
                }
            }
        }
        TokenCommand::Revoke(args) => {
            let token = ctx
                .block_on(tokens.revoke(&args.id, Timestamp::now()))?
                .map_err(failure)?;
            if ctx.json {
                output::json(&token)?;
            } else {
                println!("revoked {}", token.id);
            }
        }
    }
    Ok(Status::Success)
}
