//! `finance-tools`: the example MCP server. Serves stdio by default (stdout
//! carries only protocol messages; logs go to stderr) or Streamable HTTP at
//! `/mcp` with `--http 127.0.0.1:PORT`.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use finance_tools::server::FinanceTools;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

/// Example MCP server: gross_margin, add, multiply.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Serve Streamable HTTP on this address (path /mcp) instead of stdio.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Also expose the test aids `sleep_ms` and `environment`.
    #[arg(long)]
    test_tools: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    let test_tools = args.test_tools;
    match args.http {
        None => {
            let service = FinanceTools::new(test_tools)
                .serve(rmcp::transport::stdio())
                .await
                .context("MCP initialize over stdio")?;
            service.waiting().await?;
        }
        Some(addr) => {
            let ct = CancellationToken::new();
            let service: StreamableHttpService<FinanceTools, LocalSessionManager> = StreamableHttpService::new(
                move || Ok(FinanceTools::new(test_tools)),
                Default::default(),
                StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token()),
            );
            let router = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("bind {addr}"))?;
            // Tests read this line to learn the port when they pass :0.
            eprintln!("listening on http://{}/mcp", listener.local_addr()?);
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    ct.cancel();
                })
                .await?;
        }
    }
    Ok(())
}
