//! `engram-scripted-llm`: the scripted model server as a process, for tests that run engram as a
//! child process.
//!
//! ```text
//! engram-scripted-llm --script FILE [--port N] [--port-file PATH] [--record PATH]
//! ```
//!
//! FILE holds a JSON array of turns (or `{"turns": [...]}`; see `engram_llm::scripted::Turn`).
//! The server listens on 127.0.0.1 (port N, or a free one), writes the port number to PATH
//! (atomically, once it accepts connections) and prints `listening on http://127.0.0.1:PORT`.
//! OpenAI clients use `http://127.0.0.1:PORT/v1`, Anthropic clients `http://127.0.0.1:PORT`.
//! With `--record`, each request is appended to PATH as one JSON line as it arrives;
//! `GET /_scripted/requests` returns them all, with timings. It runs until killed.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use engram_llm::scripted::{RecordHook, RecordedRequest, ScriptedServer, parse_script};

const USAGE: &str =
    "usage: engram-scripted-llm --script FILE [--port N] [--port-file PATH] [--record PATH]";

struct Args {
    script: PathBuf,
    port: u16,
    port_file: Option<PathBuf>,
    record: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut script = None;
    let mut port = 0;
    let mut port_file = None;
    let mut record = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(flag) = args.next() {
        let flag = flag.to_string_lossy().into_owned();
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_string());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--script" => script = Some(PathBuf::from(value)),
            "--port" => {
                port = value
                    .to_string_lossy()
                    .parse()
                    .map_err(|_| format!("--port takes a port number, got {value:?}"))?;
            }
            "--port-file" => port_file = Some(PathBuf::from(value)),
            "--record" => record = Some(PathBuf::from(value)),
            other => return Err(format!("unknown option {other}; {USAGE}")),
        }
    }
    Ok(Args {
        script: script.ok_or_else(|| format!("--script is required; {USAGE}"))?,
        port,
        port_file,
        record,
    })
}

/// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, path)
}

async fn run(args: Args) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.script)
        .map_err(|e| format!("cannot read the script {}: {e}", args.script.display()))?;
    let turns = parse_script(&text)
        .map_err(|e| format!("the script {} is not valid: {e}", args.script.display()))?;

    let hook: Option<RecordHook> = match &args.record {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open the record file {}: {e}", path.display()))?;
            let file = Mutex::new(file);
            Some(Box::new(move |request: &RecordedRequest| {
                if let Ok(line) = serde_json::to_string(request) {
                    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = writeln!(file, "{line}");
                    let _ = file.flush();
                }
            }))
        }
        None => None,
    };

    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let server = ScriptedServer::start_on(addr, turns, hook)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    if let Some(path) = &args.port_file {
        write_atomically(path, &format!("{}\n", server.addr().port()))
            .map_err(|e| format!("cannot write the port file {}: {e}", path.display()))?;
    }
    println!("listening on {}", server.url());
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("engram-scripted-llm: {message}");
            ExitCode::FAILURE
        }
    }
}
