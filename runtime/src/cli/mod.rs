//! The `moat` command line: the arguments, and one module per group of commands; [`run`]
//! only dispatches.

mod api_key;
mod build_plugin;
mod cache;
mod call;
mod console;
mod credentials;
mod doctor;
mod embed;
mod host_auth;
mod host_config;
mod host_files;
mod hosts;
mod init;
mod inspect;
mod keys;
mod lint;
mod load;
pub mod logging;
mod new;
mod one_line;
mod policy;
mod policy_cedar;
mod python_toolchain;
mod reach;
mod replace_file;
mod serve;
mod serve_args;
mod supply;
mod toolchains;
mod ts_sdk;
pub mod version;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use moat::serve::config;
use moat::supply::policy::Policy;

use call::call;
use inspect::inspect;
use policy::policy_check;
use supply::{lock, pull, push, sign, verify};

/// Runs untrusted MCP tools as sandboxed WebAssembly components.
#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log less: warnings and errors only (-qq: errors only).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    quiet: u8,
    /// Log more: moat's debug lines (-vv: every crate's, -vvv: trace). A set MOAT_LOG filter
    /// (e.g. `info,moat=debug`) takes the place of both flags.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// How the log is written: `text` lines for people, or `json`, one object a line with the
    /// event's and its spans' fields, for collectors (default: MOAT_LOG_FORMAT, else text).
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<logging::LogFormat>,
}

impl Cli {
    /// The count of `-v` less the count of `-q`.
    pub fn verbosity(&self) -> i8 {
        (self.verbose.min(8) as i8) - (self.quiet.min(8) as i8)
    }

    /// The log format the command line asks for, if it does.
    pub fn log_format(&self) -> Option<logging::LogFormat> {
        self.log_format
    }
}

#[derive(Subcommand)]
enum Command {
    /// Serve plugins as MCP tools over stdio, or Streamable HTTP (logs go to stderr).
    Serve(serve_args::ServeArgs),
    /// Show a plugin's tools, their schemas and descriptions, what it imports, its permission
    /// manifest and what became of each grant.
    Inspect {
        /// A file, an https:// URL or an oci:// reference; with --config, the plugin's name (or
        /// file) in that config.
        plugin: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Inspect the plugin with the grants this moat.toml gives it.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        trust: TrustArgs,
    },
    /// Point out what in a plugin makes a model choose or call its tools wrong: tools and
    /// parameters without descriptions, limits stated in prose that the schema does not
    /// enforce, siblings named as WIT spells them, no word of when to use a tool, missing hints.
    Lint {
        /// Files, https:// URLs or oci:// references; with --config, plugin names in it.
        #[arg(required = true)]
        plugins: Vec<String>,
        /// Exit 1 when there is any finding (for CI).
        #[arg(long)]
        strict: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Lint the plugins as this moat.toml configures them.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        trust: TrustArgs,
    },
    /// Make a plugin project in Rust, Python, JavaScript or TypeScript: its WIT, its code, a test,
    /// and its permission manifest in Cargo.toml, pyproject.toml or package.json; `moat build`
    /// makes the component.
    New {
        /// The plugin's name: lowercase words joined by `-` (`weather`, `my-notes`).
        name: String,
        #[arg(long, value_enum)]
        lang: new::Lang,
        /// The new folder to make it in (default: the name).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build the plugin project in DIR with its language's toolchain (componentize-py,
    /// componentize-js, cargo) into build/WORLD.wasm, with its WIT docs and manifest embedded.
    Build {
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Give a component built by any toolchain (componentize-js, componentize-py, Go…) the
    /// descriptions of its WIT doc comments and a permission manifest, as the Rust guest SDK's
    /// build does: its WIT package goes into a `moat:wit` section, the manifest into
    /// `moat:manifest`.
    Embed {
        /// The component, rewritten in place unless --output is given.
        component: PathBuf,
        /// The folder of the WIT package it was built from (with its deps/).
        #[arg(long, default_value = "wit")]
        wit: PathBuf,
        /// The permission manifest: a moat-plugin.toml, or the `moat` object of a package.json,
        /// `[tool.moat]` of a pyproject.toml, `[package.metadata.moat]` of a Cargo.toml.
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Where to write the result.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Sign a plugin with a minisign secret key, writing FILE.minisig.
    Sign {
        /// The minisign secret key (an encrypted key's password: MOAT_SIGN_PASSWORD, else asked).
        #[arg(long, value_name = "SECRET.key")]
        key: PathBuf,
        file: PathBuf,
    },
    /// Check a plugin's FILE.minisig against a public key, or against the publishers of a policy.
    Verify {
        /// A minisign public key file.
        #[arg(long, value_name = "PUB", required_unless_present = "policy")]
        key: Option<PathBuf>,
        /// A policy whose [publishers] to trust.
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        policy: Option<PathBuf>,
        file: PathBuf,
    },
    /// Check a moat.toml against an enterprise policy without running anything.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Print what an MCP host needs to start this moat with these arguments (or, with --write,
    /// merge it into the host's own config file), or (`moat config schema`) the JSON Schema of
    /// moat.toml.
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        disable_help_subcommand = true
    )]
    Config {
        #[command(subcommand)]
        action: Option<ConfigAction>,
        #[command(flatten)]
        target: host_config::HostConfigArgs,
    },
    /// Credentials for `moat serve --http`.
    Auth {
        #[command(subcommand)]
        action: AuthAction,
    },
    /// Fetch a plugin into the download cache and print its sha256.
    Pull {
        /// A file, a folder, an https:// URL or an oci:// reference.
        source: String,
    },
    /// Publish a component to an OCI registry as a Wasm artifact.
    Push {
        /// The component file.
        file: PathBuf,
        /// Where to: oci://host[:port]/repository:tag.
        reference: String,
    },
    /// Pin every plugin of a moat.toml to its current sha256 in the lock file beside it, and
    /// show what changed since the last lock.
    Lock {
        /// The moat.toml whose plugins to pin; the lock is the same path with `.lock`.
        #[arg(long, default_value = "moat.toml")]
        config: PathBuf,
        /// Write nothing; exit 1 when the lock is missing or differs from what the plugins give
        /// now (for CI).
        #[arg(long)]
        check: bool,
    },
    /// Write a commented starter moat.toml (never over an existing file).
    Init {
        /// Where to write it.
        #[arg(default_value = "moat.toml")]
        path: PathBuf,
    },
    /// Make a minisign key pair for `moat sign`: PREFIX.key (secret, mode 0600) and PREFIX.pub.
    Keygen {
        /// The files' path without extension.
        #[arg(default_value = "minisign")]
        prefix: PathBuf,
        /// Leave the secret key unencrypted (else its password is MOAT_SIGN_PASSWORD, or asked
        /// for on a terminal).
        #[arg(long)]
        no_password: bool,
    },
    /// Print a shell's completion script: `moat completions bash > /etc/bash_completion.d/moat`.
    Completions { shell: clap_complete::Shell },
    /// Check this machine for moat: the wasm32-wasip2 target, the cache, the policy in force,
    /// and each MCP host's config file.
    Doctor,
    /// Sign a browser in to the console of a moat serving on this machine: prints a one-time
    /// link (made with the local token) and opens it.
    Console {
        /// Where that moat serves HTTP.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The local token's file (default: `$MOAT_TOKEN_FILE`, else ~/.config/moat/http-token).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Print the link without opening a browser.
        #[arg(long)]
        no_open: bool,
    },
    /// List or revoke callers' consented upstream credentials (moat.toml's credential_store).
    Credentials {
        #[command(subcommand)]
        action: CredentialsAction,
    },
    /// Manage the cache of compiled plugins (`MOAT_CACHE_DIR`, else `~/.cache/moat`).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Call one tool once and print the MCP result as JSON; with no TOOL, list the tools.
    #[command(after_help = call::EXIT_CODES)]
    Call {
        /// A file, an https:// URL or an oci:// reference; with --config, the plugin's name (or
        /// file) in that config.
        plugin: String,
        /// The tool's MCP name, or the plain name of the exported function.
        tool: Option<String>,
        /// The arguments, as a JSON object (default `{}`); `-` reads them from stdin.
        arguments: Option<String>,
        /// Call the plugin with the grants and limits this moat.toml gives it (and only as the
        /// lock beside it pins it, when there is one).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum AuthAction {
    /// Make a new API key: prints the key, for the client, and its hash, for moat.toml's
    /// `[auth] api_keys`.
    Key {
        /// The key's name, as [[access]] rules and the audit log name it (`key:NAME`).
        name: String,
    },
}

/// The enterprise policy to apply: the system one when it exists, else this one.
#[derive(clap::Args)]
struct TrustArgs {
    /// An administrator's policy file (default: /etc/moat/policy.toml when present).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Say for each plugin of the config whether the policy lets it load, and what it is granted.
    Check {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
    },
    /// Say why a plugin of the config may load or not, and why each grant was allowed or cut;
    /// with --tool, why a principal may or may not call a tool with some arguments (the
    /// [[access]] rules and the Cedar policies, naming the policies); with neither, print the
    /// [[access]] rules as the Cedar they amount to.
    Explain {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
        /// The plugin's name in the config.
        plugin: Option<String>,
        /// The tool to explain a call of, by its MCP name.
        #[arg(long, conflicts_with = "plugin")]
        tool: Option<String>,
        /// The caller's principal name.
        #[arg(long, default_value = "anonymous", requires = "tool")]
        principal: String,
        /// A group of the caller's token (repeatable).
        #[arg(long = "group", requires = "tool")]
        groups: Vec<String>,
        /// A scope of the caller's token (repeatable).
        #[arg(long = "scope", requires = "tool")]
        scopes: Vec<String>,
        /// The caller's other token claims, as a JSON object.
        #[arg(long, requires = "tool")]
        claims: Option<String>,
        /// The call's arguments, as a JSON object.
        #[arg(long, requires = "tool")]
        arguments: Option<String>,
    },
    /// Print the Cedar schema of what the config serves: what its policies are checked against.
    Schema {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a file of policy cases (principal, action, resource, arguments → allow or deny)
    /// against the config's policies; exit 1 when one is decided otherwise.
    Test {
        #[command(flatten)]
        trust: TrustArgs,
        #[arg(long)]
        config: PathBuf,
        /// A TOML file of [[case]] tables.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Print the JSON Schema of moat.toml, for editors to check the file and explain its keys.
    Schema,
}

#[derive(Subcommand)]
enum CredentialsAction {
    /// List whose credentials the store holds, from which source (never the credentials).
    List {
        /// Only this principal's (`key:ci`, `stdio`, a token's `sub`…).
        principal: Option<String>,
        #[arg(long, default_value = "moat.toml")]
        config: PathBuf,
        /// The secrets file, instead of the one moat.toml names.
        #[arg(long)]
        secrets: Option<PathBuf>,
    },
    /// Drop a principal's credential from a source: their next call asks them again.
    Revoke {
        principal: String,
        source: String,
        #[arg(long, default_value = "moat.toml")]
        config: PathBuf,
        /// The secrets file, instead of the one moat.toml names.
        #[arg(long)]
        secrets: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// Delete every compiled plugin in the cache.
    Clear,
    /// List what the cache holds: compiled plugins and downloads, with their sizes.
    List,
    /// Print the cache folder.
    Dir,
    /// Print how much the cache holds.
    Size,
}

pub async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve_args::run(args).await,
        Command::Inspect {
            plugin,
            json,
            config,
            trust,
        } => {
            let policy = Policy::resolve(trust.policy.as_deref())?;
            inspect(&plugin, config.as_deref(), json, &policy).await
        }
        Command::Lint {
            plugins,
            strict,
            json,
            config,
            trust,
        } => {
            let policy = Policy::resolve(trust.policy.as_deref())?;
            lint::run(&plugins, config.as_deref(), strict, json, &policy).await
        }
        Command::New { name, lang, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            new::run(&name, &dir, lang)
        }
        Command::Build { dir } => build_plugin::run(&dir),
        Command::Embed {
            component,
            wit,
            manifest,
            output,
        } => embed::run(&component, &wit, manifest.as_deref(), output.as_deref()),
        Command::Pull { source } => pull(&source).await,
        Command::Push { file, reference } => push(&file, &reference).await,
        Command::Lock { config, check } => lock(&config, check).await,
        Command::Init { path } => init::init(&path),
        Command::Keygen {
            prefix,
            no_password,
        } => keys::keygen(&prefix, no_password),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "moat", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor => doctor::doctor().await,
        Command::Console {
            url,
            token_file,
            no_open,
        } => console::console(&url, token_file, no_open).await,
        Command::Sign { key, file } => sign(&key, &file),
        Command::Verify { key, policy, file } => verify(key, policy, file),
        Command::Credentials { action } => match action {
            CredentialsAction::List {
                principal,
                config,
                secrets,
            } => credentials::list(&config, secrets.as_deref(), principal.as_deref()).await,
            CredentialsAction::Revoke {
                principal,
                source,
                config,
                secrets,
            } => credentials::revoke(&config, secrets.as_deref(), &principal, &source).await,
        },
        Command::Policy { action } => match action {
            PolicyAction::Check { trust, config } => {
                let policy = Policy::resolve(trust.policy.as_deref())?;
                let plugins = policy_check(&policy, &config, None).await?;
                let cedar = policy_cedar::check(&config, &policy).await?;
                Ok(if cedar { plugins } else { ExitCode::from(1) })
            }
            PolicyAction::Explain {
                trust,
                config,
                plugin,
                tool,
                principal,
                groups,
                scopes,
                claims,
                arguments,
            } => {
                let policy = Policy::resolve(trust.policy.as_deref())?;
                match (plugin, tool) {
                    (Some(plugin), _) => policy_check(&policy, &config, Some(&plugin)).await,
                    (None, Some(tool)) => {
                        let who = policy_cedar::Who {
                            name: principal,
                            groups,
                            scopes,
                            claims: policy_cedar::json_object(claims.as_deref(), "--claims")?,
                            ..Default::default()
                        };
                        let arguments =
                            policy_cedar::json_object(arguments.as_deref(), "--arguments")?;
                        policy_cedar::explain_call(&config, &policy, who, &tool, arguments).await
                    }
                    (None, None) => {
                        print_out(policy_cedar::access_as_cedar(&config, &policy)?.trim_end());
                        Ok(ExitCode::SUCCESS)
                    }
                }
            }
            PolicyAction::Schema { trust, config } => {
                let policy = Policy::resolve(trust.policy.as_deref())?;
                policy_cedar::schema(&config, &policy).await
            }
            PolicyAction::Test {
                trust,
                config,
                file,
            } => {
                let policy = Policy::resolve(trust.policy.as_deref())?;
                policy_cedar::test(&file, &config, &policy).await
            }
        },
        Command::Call {
            plugin,
            tool,
            arguments,
            config,
        } => Ok(call(&plugin, tool, arguments, config.as_deref()).await),
        Command::Config {
            action: Some(ConfigAction::Schema),
            ..
        } => {
            print_out(&serde_json::to_string_pretty(&config::json_schema())?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            action: None,
            target,
        } => host_config::run(target),
        Command::Auth {
            action: AuthAction::Key { name },
        } => api_key::make(&name),
        Command::Cache {
            action: CacheAction::List,
        } => cache::list(),
        Command::Cache {
            action: CacheAction::Dir,
        } => cache::print_dir(),
        Command::Cache {
            action: CacheAction::Size,
        } => cache::size(),
        Command::Cache {
            action: CacheAction::Clear,
        } => cache::clear(),
    }
}

/// Prints a command's output; a reader that went away (`moat inspect … | head`) is not an error.
pub fn print_out(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}
