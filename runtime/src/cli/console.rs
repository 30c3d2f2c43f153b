//! `moat console`: a one-time link that signs a browser in to the console of a moat serving
//! on this machine, asked for with the local token (as Jupyter prints its link), and opened in
//! the browser when one can be.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

/// Asks the moat at `url` for a link, prints it and opens it unless `no_open`.
pub async fn console(url: &str, token_file: Option<PathBuf>, no_open: bool) -> Result<ExitCode> {
    let file = moat::access::credentials::token_file(token_file, None)?;
    // Read, never made here: a token made now would be no moat's.
    if !file.exists() {
        bail!(
            "no credential at {}: give --token-file (the file of the local token that moat \
             serves with, or of an operator's API key)",
            file.display()
        );
    }
    let token = moat::access::credentials::local_token(&file)?;
    let base = url.trim_end_matches('/').trim_end_matches("/mcp");
    moat::supply::source::install_tls_provider();
    let answer = reqwest::Client::new()
        .post(format!("{base}/console/link"))
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("asking {base} for a console link"))?;
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no reason given");
        if status == reqwest::StatusCode::NOT_FOUND {
            bail!("{base} serves no console: add [console] to its moat.toml");
        }
        bail!("{base} refused a console link ({status}): {why}");
    }
    let link = body["url"].as_str().context("the answer names no link")?;
    println!("{link}");
    eprintln!("The link signs one browser in, once, within two minutes.");
    if !no_open {
        let opened = std::process::Command::new("xdg-open")
            .arg(link)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        if !opened.is_ok_and(|s| s.success()) {
            eprintln!("(no browser opened: open the link yourself)");
        }
    }
    Ok(ExitCode::SUCCESS)
}
