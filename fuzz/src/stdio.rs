//! The stdio transport: arbitrary bytes as the client's side of the stream.
//!
//! The server must answer only with JSON-RPC lines, and must finish once its input ends (a
//! server that waits on forever is a hang the timeout below reports).

use std::time::Duration;

use super::{CATALOGUE, RUNTIME};
use moat::mcp::server::MoatServer;
use rmcp::ServiceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs one input; panics on a finding.
pub fn check(data: &[u8]) {
    let output = RUNTIME.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let serving = tokio::spawn(async move {
            let (read, write) = tokio::io::split(server);
            if let Ok(running) = MoatServer::new(CATALOGUE.clone())
                .serve((read, write))
                .await
            {
                let _ = running.waiting().await;
            }
        });
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let write = async {
            // The server may stop reading (and close) early: a failed write is not a finding.
            let _ = to_server.write_all(data).await;
            let _ = to_server.shutdown().await;
        };
        let read = async {
            let mut output = Vec::new();
            from_server.read_to_end(&mut output).await.unwrap();
            output
        };
        let run = async {
            let ((), output) = tokio::join!(write, read);
            serving.await.expect("the server task panicked");
            output
        };
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the server did not finish after its input ended")
    });
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let message: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "the server wrote a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
    }
}
