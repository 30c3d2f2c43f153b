//! `moat policy check` and `explain`: what the policy lets each plugin of a config load with.

use std::process::ExitCode;

use anyhow::{Result, bail};

use moat::serve::config;
use moat::supply::policy::Policy;
use moat::supply::source::{Fetcher, fetch_all};

use super::print_out;

/// `moat policy check` (every plugin, `only` = None) and `moat policy explain` (one plugin):
/// admits each plugin of the config as `serve` would, without compiling or running it.
pub async fn policy_check(
    policy: &Policy,
    config_path: &std::path::Path,
    only: Option<&str>,
) -> Result<ExitCode> {
    let mut sources = config::read(config_path)?;
    if let Some(name) = only {
        sources.retain(|s| s.name == name);
        if sources.is_empty() {
            bail!("{} has no plugin \"{name}\"", config_path.display());
        }
    }
    // Remote plugins are fetched (or revalidated) as `serve` would: a policy decides on the
    // bytes and the signature that came with them.
    let fetched = fetch_all(&Fetcher::from_env(), &sources).await;
    let mut refused = 0;
    let mut out = String::new();
    for (source, fetched) in sources.iter().zip(fetched) {
        let admitted = fetched.and_then(|fetched| policy.admit(source, &fetched));
        match admitted {
            Err(error) => {
                refused += 1;
                out.push_str(&format!("{}: refused: {error:#}\n", source.name));
            }
            Ok(admitted) => {
                out.push_str(&format!(
                    "{}: allowed by {}\n",
                    source.name, admitted.allowed_by
                ));
                out.push_str(&format!("  digest: {}\n", admitted.digest));
                if let Some(publisher) = &admitted.publisher {
                    out.push_str(&format!("  signed by: {publisher}\n"));
                }
                if only.is_some() {
                    match &admitted.manifest {
                        Some(m) => {
                            out.push_str(&format!("  asks for: {}\n", serde_json::to_string(m)?))
                        }
                        None => out.push_str("  asks for: (no manifest)\n"),
                    }
                }
                for note in &admitted.notes {
                    let quiet = note.fate == moat::supply::policy::Fate::Granted && only.is_none();
                    if !quiet {
                        out.push_str(&format!("  {note}\n"));
                    }
                }
            }
        }
    }
    print_out(out.trim_end());
    Ok(if refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
