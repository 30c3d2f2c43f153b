//! Where plugins come from: `moat pull`, `push`, `lock` and `verify`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use moat::sandbox::footprint::Footprint;
use moat::serve::config;
use moat::supply::lock::Lock;
use moat::supply::policy::Policy;
use moat::supply::signing;
use moat::supply::source::read_wasm;
use moat::supply::source::{Fetcher, Progress, Source, fetch_all};

use super::load::load;
use super::print_out;

/// `moat pull`: fetches a source (each plugin of a folder), compiles it into the compiled-plugin
/// cache so that the first `moat serve` of it starts warm, and prints `digest  source` lines.
pub async fn pull(text: &str) -> Result<ExitCode> {
    let fetcher = Fetcher::from_env();
    let engine = moat::sandbox::engine::new_engine()?;
    let cache = super::serve::open_cache();
    for (_, source) in Source::parse(text, Path::new(""))?.expand()? {
        let fetched = fetcher.fetch(&source).await?;
        Footprint::of(&fetched.wasm)
            .and_then(|footprint| footprint.check(&moat::sandbox::engine::pool_limits()))
            .with_context(|| format!("{source} cannot load"))?;
        if let Some(cache) = &cache {
            let spinner = fetcher.progress().spinner(&format!("compiling {source}"));
            let compiled = tokio::task::block_in_place(|| {
                cache.component(&engine, &fetched.wasm, &fetched.digest)
            });
            spinner.finish_and_clear();
            compiled.with_context(|| format!("{source} is not a valid WebAssembly component"))?;
        }
        let signed = match fetched.signature {
            Some(_) => ", with a publisher's signature",
            None => ", unsigned",
        };
        tracing::info!(
            "{source}: {} bytes from {}{signed}",
            fetched.wasm.len(),
            fetched.origin
        );
        print_out(&format!("{}  {source}", fetched.digest));
    }
    Ok(ExitCode::SUCCESS)
}

/// `moat push`: publishes a component and prints its digest and the reference that pins it.
pub async fn push(file: &Path, target: &str) -> Result<ExitCode> {
    let Source::Oci(oci) = Source::parse(target, Path::new(""))? else {
        bail!("push publishes to an OCI registry: give an oci://host/repository:tag reference");
    };
    let wasm = read_wasm(file)?;
    moat::supply::source::check_component(&wasm).with_context(|| file.display().to_string())?;
    let signature = signing::read_detached(file)?;
    let pushed = Fetcher::new(None, Progress::for_stderr())
        .push(&oci, &wasm, signature.as_deref())
        .await?;
    let pinned = oci.pinned(&pushed.manifest);
    let signed = match signature {
        Some(_) => format!(
            ", with its signature {}",
            signing::signature_path(file).display()
        ),
        None => String::new(),
    };
    tracing::info!(
        "pushed {} to {oci}, manifest {}{signed}",
        file.display(),
        pushed.manifest
    );
    print_out(&format!("{}  {pinned}", pushed.digest));
    Ok(ExitCode::SUCCESS)
}

/// `moat lock`: fetches and loads every plugin of a moat.toml, shows how each differs from the
/// lock file, and writes the lock file anew. Nothing is written unless every plugin loads.
/// With `check`, nothing is written at all, and any difference (or no lock) is exit code 1.
pub async fn lock(config_path: &Path, check: bool) -> Result<ExitCode> {
    let sources = config::read(config_path)?;
    let lock_path = Lock::path_for(config_path);
    let base = config_path.parent().unwrap_or(Path::new(""));
    let existing = Lock::read(&lock_path)?;
    let missing = existing.is_none();
    let old = existing.unwrap_or_default();
    let fetcher = Fetcher::from_env();
    let fetched = fetch_all(&fetcher, &sources).await;
    let engine = moat::sandbox::engine::new_engine()?;
    let policy = Policy::resolve(None)?;
    // Cranelift's code, stored in the cache: the next `moat serve` starts warm.
    let (registry, errors) = load(
        &engine,
        &sources,
        fetched,
        super::serve::open_cache().as_ref(),
        None,
        fetcher.progress(),
        &policy,
    )?;
    if !errors.is_empty() {
        for error in &errors {
            eprintln!("moat: plugin \"{}\": {:#}", error.plugin, error.error);
        }
        bail!(
            "{} not written: {} of {} plugins did not load",
            lock_path.display(),
            errors.len(),
            sources.len()
        );
    }
    let new = registry.lock(&sources, base)?;
    let report = old.report(&new);
    if check {
        print_out(&report.join("\n"));
        if missing {
            eprintln!("moat: {} is missing; run `moat lock`", lock_path.display());
            return Ok(ExitCode::from(1));
        }
        if old.version != new.version || old.plugins != new.plugins {
            eprintln!(
                "moat: {} differs from what the plugins of {} give now (above); run `moat lock` \
                 and review the change",
                lock_path.display(),
                config_path.display()
            );
            return Ok(ExitCode::from(1));
        }
        eprintln!("moat: {} is up to date", lock_path.display());
        return Ok(ExitCode::SUCCESS);
    }
    new.write(&lock_path)?;
    print_out(&report.join("\n"));
    tracing::info!("wrote {}", lock_path.display());
    Ok(ExitCode::SUCCESS)
}

/// `moat sign`: signs `file` with the secret `key`, writing FILE.minisig.
pub fn sign(key: &Path, file: &Path) -> Result<ExitCode> {
    let out = signing::sign_file(key, file)?;
    eprintln!("moat: wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// `moat verify`: checks FILE.minisig over FILE's bytes.
pub fn verify(key: Option<PathBuf>, policy: Option<PathBuf>, file: PathBuf) -> Result<ExitCode> {
    let keys = match (key, policy) {
        (Some(key), _) => vec![signing::TrustedKey::from_file(&key)?],
        (None, Some(policy)) => Policy::read(&policy)?.publishers,
        (None, None) => bail!("give --key or --policy"),
    };
    let wasm = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let signature_path = signing::signature_path(&file);
    let signature = std::fs::read_to_string(&signature_path)
        .with_context(|| format!("reading the signature {}", signature_path.display()))?;
    match signing::verify(&wasm, &signature, &keys) {
        Ok(key) => {
            print_out(&format!(
                "{}: good signature by \"{}\" (key {}), {}",
                file.display(),
                key.publisher,
                key.id,
                moat::supply::source::Digest::of(&wasm)
            ));
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("moat: {}: {error}", file.display());
            Ok(ExitCode::from(1))
        }
    }
}
